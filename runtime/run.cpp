#include "runtime/run.h"

#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint.h"
#include "runtime/communicator.h"
#include "runtime/device_choice.h"
#include "runtime/loss.h"
#include "runtime/memory_tracker.h"
#include "runtime/nccl_group.h"
#include "runtime/tensor_parallel_group.h"
#include "runtime/trainer.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/format.h"
#include "support/sha256.h"
#include "torch_side/accelerator.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/torch_error.h"
#include "torch_side/torch_kernel_fixes.h"

namespace rannc::runtime {
namespace {

using nlohmann::json;

// What one rank prepares on its own before any communication: everything a bad input breaks.
struct RankSetup {
  plan::Plan plan;
  std::unique_ptr<RankLayout> layout;
  Placement placement;
  LossPlan loss;
  std::unique_ptr<TrainingData> data;
  DeviceChoice device;
  DeviceFacts device_facts;               // what chose `device`; the report gives its node place
  std::vector<GradientGroup> gradient_groups;  // of all its stages (RankLayout::rank_gradient_groups)
  std::unique_ptr<StageRunner> runner;    // its (first) stage
  std::vector<std::unique_ptr<StageRunner>> later_chunks;  // interleaved: its other model chunks
  OptimizerSettings optimizer;
  std::string plan_sha256;                // the manifest of a checkpoint records it
  std::optional<ResumePoint> resume;      // --resume's checkpoint
  double restore_s = 0;                   // reading this rank's part of it
};

// The rank's stages' runners, in model order (RankLayout::stages_of).
std::vector<StageRunner*> runners_of(RankSetup& setup) {
  std::vector<StageRunner*> runners{setup.runner.get()};
  for (auto& chunk : setup.later_chunks) runners.push_back(chunk.get());
  return runners;
}

std::vector<SampleSpec> sample_specs(const plan::Plan& plan, const LossPlan& loss) {
  std::vector<SampleSpec> specs;
  for (const auto& input : plan.model.inputs) {
    SampleSpec spec;
    spec.name = input.name;
    spec.dtype = *ir::parse_dtype(input.dtype);
    spec.sample_shape = input.shape;
    spec.sample_shape.erase(spec.sample_shape.begin() + input.batch_dim);
    spec.batch_dim = input.batch_dim;
    if (input.index_bound > 0) spec.index_bound = input.index_bound;  // else SampleSpec's {0, 1}
    specs.push_back(spec);
  }
  if (loss.target) specs.push_back(*loss.target);
  return specs;
}

// What rannc-run does not do with a sharded plan yet: one line each.
void check_sharded_options(const RunOptions& options) {
  const char* unsupported = options.clip_grad_norm > 0 ? "--clip-grad-norm"
                            : !options.save_dir.empty() ? "--save"
                            : !options.resume_dir.empty() ? "--resume"
                            : !options.init_path.empty() ? "--init" : nullptr;
  if (unsupported) throw InputError(std::string(unsupported) + " is not supported with a sharded plan of embedding tables yet");
}

std::vector<std::string> needed_arrays(const plan::Plan& plan, const std::vector<int>& stages, const LossPlan& loss) {
  std::vector<std::string> names;
  for (int stage : stages)
    for (const auto& input : plan.stages[static_cast<std::size_t>(stage)].inputs)
      if (input.model_input && std::find(names.begin(), names.end(), *input.model_input) == names.end())
        names.push_back(*input.model_input);
  if (plan.sharding && plan.sharding->files)
    for (const auto& name : plan.sharding->files->index_inputs)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  if (loss.target && std::find(stages.begin(), stages.end(), loss.stage) != stages.end())
    names.push_back(loss.target->name);
  return names;
}

// A finite number in [0, max], or one line naming the flag.
void check_range(double value, double max, const char* flag) {
  if (value >= 0 && value <= max) return;
  char text[96];
  std::snprintf(text, sizeof text, "%s %g: must be 0 to %g", flag, value, max);
  throw InputError(text);
}

OptimizerSettings optimizer_settings(const RunOptions& options, const plan::Plan& plan) {
  OptimizerSettings settings;
  settings.kind = options.optimizer.empty() ? plan.optimizer : plan::parse_optimizer(options.optimizer, "--optimizer");
  check_range(options.lr, 1e30, "--lr");
  check_range(options.weight_decay, 1e6, "--weight-decay");
  check_range(options.clip_grad_norm, 1e30, "--clip-grad-norm");
  if (options.warmup_steps < 0) throw InputError("--warmup-steps must not be negative");
  settings.lr = options.lr;
  settings.schedule = parse_lr_schedule(options.lr_schedule);
  settings.warmup_steps = options.warmup_steps;
  settings.total_steps = options.steps;
  settings.weight_decay = options.weight_decay;
  settings.clip_grad_norm = options.clip_grad_norm;
  return settings;
}

void check_checkpoint_options(const RunOptions& options, const MpiWorld& world) {
  if (!options.resume_dir.empty() && !options.init_path.empty())
    throw InputError("--resume and --init: give one (the checkpoint holds the weights to start from)");
  if (options.save_every < 0) throw InputError("--save-every must not be negative");
  if (options.save_every > 0 && options.save_dir.empty()) throw InputError("--save-every needs --save DIR");
  // Rank 0 publishes checkpoints: a folder it cannot write fails now, not at the first checkpoint.
  if (world.rank() != 0 || options.save_dir.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(options.save_dir, error);
  if (error) throw InputError("--save " + options.save_dir + ": cannot create: " + error.message());
  check_can_write((std::filesystem::path(options.save_dir) / plan::kLatestCheckpointFile).string(), "--save");
}

// --device (else $RANNC_DEVICE, else auto) with what this process sees, left in `facts`: its GPUs
// and its place among the ranks of its node, from MPI (mpi_world.h), so that under srun or any
// other launcher the ranks of a node take its GPUs in turn.
DeviceChoice device_for_rank(const RunOptions& options, const plan::Plan& plan, const MpiWorld& world, DeviceFacts& facts) {
  std::string flag = options.device;
  if (flag.empty()) flag = std::getenv("RANNC_DEVICE") ? std::getenv("RANNC_DEVICE") : "";
  if (flag.empty()) flag = "auto";
  facts.plan_on_gpu = plan.cluster.device != "cpu";
  facts.built_with_cuda = accel::built_with_cuda();
  facts.gpus = accel::cuda_device_count();
  facts.nccl_built = nccl_built();
  facts.local_rank = world.local_rank();
  facts.local_size = world.local_size();
  return choose_device(flag, facts);
}

c10::Device torch_device(const DeviceChoice& choice) {
  if (!choice.cuda) return c10::Device(c10::DeviceType::CPU);
  return c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(choice.gpu));
}

// A GPU computes fp32 in fp32, as the CPU does (no TF32), so that its losses are the CPU's.
void use_device(const DeviceChoice& choice) {
  if (!choice.cuda) return;
  accel::set_current_device(torch_device(choice));
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

// What of tensor parallelism this rannc-run trains: one degree in every stage, each stage cut
// into its tensor ranks' files.
void check_tensor_parallel(const plan::Plan& plan) {
  int degree = plan.stages.front().tensor_parallel.degree;
  for (const auto& stage : plan.stages) {
    const auto& split = stage.tensor_parallel;
    if (split.degree != degree)
      throw InputError(plan.path + ": stage " + std::to_string(stage.id) + " splits its layers over " +
                       std::to_string(split.degree) + " devices and stage 0 over " + std::to_string(degree) +
                       "; rannc-run trains plans whose stages share one tensor-parallel degree (--layout ...,tp=T)");
    if (split.degree > 1 && split.files.empty())
      throw InputError(plan.path + ": stage " + std::to_string(stage.id) +
                       " is tensor-parallel but names no stage file per tensor rank (tensor_parallel.files): "
                       "partition the model again");
  }
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Random ops of the stage files (dropout) draw from libtorch's generators, which libtorch seeds
// anew in every process: seeded from --seed and the rank, a run draws the same masks each time it
// runs, and each rank masks its own.
void seed_random_ops(std::uint64_t seed, int rank) {
  at::manual_seed(seed * 1000003u + static_cast<std::uint64_t>(rank) + 1);
}

std::unique_ptr<RankSetup> set_up(const RunOptions& options, const MpiWorld& world) {
  auto setup = std::make_unique<RankSetup>();
  setup->plan = plan::read_plan_file(options.plan_path);
  const auto& plan = setup->plan;
  if (plan.sharding) check_sharded_options(options);
  if (plan.attention == plan::Fusion::kFused)
    throw InputError(plan.path + ": planned for fused attention kernels (--attention fused), which rannc-run does not run: "
                     "partition again without --attention");
  if (plan.elementwise == plan::Fusion::kFused)
    throw InputError(plan.path + ": planned for fused elementwise kernels (--elementwise fused), which rannc-run does not "
                     "run: partition again without --elementwise");
  for (const auto& stage : plan.stages)
    if (stage.context_degree > 1)
      throw InputError(plan.path + ": stage " + std::to_string(stage.id) + " splits each sample's positions over " +
                       std::to_string(stage.context_degree) + " devices (context parallelism), which rannc-run does not run: "
                       "partition again without --context-parallel");
  check_tensor_parallel(plan);
  if (static_cast<int>(plan.ranks.size()) != world.size()) {
    throw InputError(plan.path + ": the plan has " + std::to_string(plan.ranks.size()) + " ranks, but " +
                     std::to_string(world.size()) + " were started (run mpirun -np " + std::to_string(plan.ranks.size()) +
                     ")");
  }
  if (options.steps < 1) throw InputError("--steps must be at least 1");
  if (options.accumulate_steps < 1 || options.accumulate_steps > 1000000)
    throw InputError("--accumulate-steps " + std::to_string(options.accumulate_steps) + ": must be 1 to 1000000");
  // Rank 0 writes the report after the last step: a path it cannot write fails now, not then.
  if (world.rank() == 0 && !options.report_path.empty()) check_can_write(options.report_path, "--report");
  if (world.rank() == 0 && !options.log_path.empty()) check_can_write(options.log_path, "--log");
  for (const auto& stage : plan.stages) plan::check_stage_file(plan, stage, /*check_sha256=*/false);
  setup->layout = std::make_unique<RankLayout>(plan);
  setup->placement = setup->layout->placement(world.rank());
  setup->gradient_groups = setup->layout->rank_gradient_groups(world.rank());
  check_messages(plan);
  setup->loss = plan_loss(plan, options.loss);
  const auto& stage = plan.stages.at(static_cast<std::size_t>(setup->placement.stage));
  const auto chunks = setup->layout->stages_of(world.rank());
  // The files this rank loads are the ones partition wrote.
  for (int chunk : chunks) plan::check_stage_file(plan, plan.stages[static_cast<std::size_t>(chunk)]);
  setup->data = std::make_unique<TrainingData>(options, plan.batch.global, sample_specs(plan, setup->loss),
                                               needed_arrays(plan, chunks, setup->loss),
                                               setup->layout->step_rows(setup->placement));
  setup->optimizer = optimizer_settings(options, plan);
  if (options.bucket_kib < 1 || options.bucket_kib > (std::int64_t{1} << 30))
    throw InputError("--bucket-kib " + std::to_string(options.bucket_kib) + ": must be 1 to 2^30 (1 TiB)");
  check_checkpoint_options(options, world);
  setup->plan_sha256 = sha256_of_file(options.plan_path);
  setup->device = device_for_rank(options, plan, world, setup->device_facts);
  use_device(setup->device);
  seed_random_ops(options.seed, world.rank());
  setup->runner = std::make_unique<StageRunner>(plan, stage, torch_device(setup->device), setup->placement.tensor_rank);
  for (std::size_t c = 1; c < chunks.size(); ++c)
    setup->later_chunks.push_back(std::make_unique<StageRunner>(plan, plan.stages[static_cast<std::size_t>(chunks[c])],
                                                                torch_device(setup->device), setup->placement.tensor_rank));
  if (!options.init_path.empty()) {
    auto state = read_state_dict(options.init_path, "--init");
    for (StageRunner* runner : runners_of(*setup)) runner->load_model_state(state, "--init " + options.init_path);
  }
  if (!options.resume_dir.empty()) {
    setup->resume = open_resume_point(options, plan, setup->plan_sha256,
                                      std::string(plan::optimizer_name(setup->optimizer.kind)));
    auto start = std::chrono::steady_clock::now();
    restore_stage(*setup->resume, plan, setup->placement, world.rank(), runners_of(*setup));
    setup->restore_s = seconds_since(start);
  }
  for (StageRunner* runner : runners_of(*setup))
    if (runner->stage_id() == setup->loss.stage)
      runner->set_loss(
          loss_function(setup->loss, plan, *setup->layout, setup->placement, *setup->data, options.accumulate_steps));
  return setup;
}

// Rank 0 prints each distinct start-up error once: bare when every rank has it, otherwise with
// the ranks that do.
void print_start_errors(const std::vector<std::string>& messages) {
  std::map<std::string, std::vector<int>> ranks_by_message;
  for (std::size_t r = 0; r < messages.size(); ++r)
    if (!messages[r].empty()) ranks_by_message[messages[r]].push_back(static_cast<int>(r));
  for (const auto& [message, ranks] : ranks_by_message) {
    if (ranks.size() == messages.size()) {
      std::cerr << "rannc-run: " << message << "\n";
    } else {
      std::cerr << "rannc-run: rank" << (ranks.size() > 1 ? "s " : " ") << ranges_text(ranks) << ": " << message << "\n";
    }
  }
}

int agree_on_start(const MpiWorld& world, int status, const std::string& message) {
  auto messages = world.gather(message);
  if (world.rank() == 0) print_start_errors(messages);
  return world.max(status);
}

// Start-up work (set_up, and what needs the communicator after it): a rank that fails stops every
// rank alike, with one line for each distinct error (agree_on_start). Returns the agreed exit status.
template <typename Work>
int agreed_start(const MpiWorld& world, Work&& work) {
  int status = 0;
  std::string message;
  try {
    work();
  } catch (const Error& e) {
    status = static_cast<int>(e.status());
    message = e.what();
  } catch (const std::exception& e) {
    status = 1;
    message = torch_message(e);
  }
  return agree_on_start(world, status, message);
}

std::string describe(const plan::Plan& plan, int accumulate_steps, const std::string& where) {
  std::string accumulation = accumulate_steps > 1 ? ", " + std::to_string(accumulate_steps) + " batches per optimizer step" : "";
  return plan.path + ": " + std::to_string(plan.ranks.size()) + " ranks, " + std::to_string(plan.stages.size()) +
         " stages, " + std::to_string(plan.batch.pipelines) + " pipeline(s), " + std::to_string(plan.batch.microbatches) +
         " microbatches of " + std::to_string(plan.batch.microbatch_size) + accumulation + ", " +
         std::string(plan::schedule_name(plan.schedule)) + ", " + where;
}

json rank_json(const RankRecord& r) {
  json entry = {{"rank", r.rank}, {"stage", r.stage}, {"peak_mem_bytes", r.peak_mem_bytes}, {"fwd_ms", r.fwd_ms},
                {"bwd_ms", r.bwd_ms}, {"comm_ms", r.comm_ms}, {"offload_bytes", r.offload_bytes},
                {"optimizer_elements", r.optimizer_elements}, {"data_bytes", r.data_bytes},
                {"host_ms", {{"data", r.host.data_ms}, {"passes", r.host.passes_ms},
                             {"optimizer", r.host.optimizer_ms}, {"wait", r.host.wait_ms}}}};
  if (r.embeddings) {
    const auto& e = *r.embeddings;
    entry["embeddings"] = {{"index_bytes", e.index_bytes},   {"pooled_bytes", e.pooled_bytes},
                           {"host_bytes", e.host_bytes},
                           {"grad_bytes", e.grad_bytes},     {"allreduce_bytes", e.allreduce_bytes},
                           {"lookup_ms", e.lookup_ms},       {"index_ms", e.index_ms},
                           {"pooled_ms", e.pooled_ms},       {"grad_ms", e.grad_ms},
                           {"allreduce_ms", e.allreduce_ms}};
  }
  return entry;
}

void write_report(const std::string& path, const std::vector<StepRecord>& steps, const std::vector<std::string>& ranks,
                  const std::string& stopped) {
  json report = {{"steps", json::array()}, {"ranks", json::array()}};
  for (const auto& s : steps) {
    json entry = {{"step", s.step}, {"loss", s.loss}, {"ms", s.ms}};
    if (s.grad_norm > 0) entry["grad_norm"] = s.grad_norm;
    report["steps"].push_back(entry);
  }
  for (const auto& text : ranks) report["ranks"].push_back(json::parse(text));
  if (!stopped.empty()) report["stopped"] = stopped;
  write_file_atomically(path, report.dump(1) + "\n", "the report");
}

// Rank 0's account of each step as it ends: a line on stdout (loss, learning rate, throughput and
// the time left at the mean step so far) and, with --log, a JSON line, flushed at once so that a
// killed job keeps the steps it ran. A log that cannot be written ends the job with one line.
class Progress {
 public:
  Progress(const RunOptions& options, std::int64_t global_batch)
      : path_(options.log_path), steps_(options.steps), global_batch_(global_batch) {
    if (!path_.empty()) log_.open(path_, std::ios::out | std::ios::trunc);
    if (!path_.empty() && !log_) throw std::runtime_error("--log " + path_ + ": cannot open");
  }

  void report(const StepRecord& record) {
    total_ms_ += record.ms;
    ++reported_;
    double samples_per_s = record.ms > 0 ? global_batch_ / (record.ms / 1e3) : 0;
    double eta_s = total_ms_ / reported_ * (steps_ - record.step - 1) / 1e3;
    std::printf("step %d loss %.6f ms %.1f lr %.6g samples/s %.1f eta %.1f s\n", record.step, record.loss, record.ms,
                record.lr, samples_per_s, eta_s);
    std::fflush(stdout);
    if (path_.empty()) return;
    json line = {{"step", record.step}, {"loss", record.loss}, {"lr", record.lr}, {"ms", record.ms},
                 {"samples_per_s", samples_per_s}};
    if (record.grad_norm > 0) line["grad_norm"] = record.grad_norm;
    log_ << line.dump() << '\n' << std::flush;
    if (!log_) throw std::runtime_error("--log " + path_ + ": cannot write step " + std::to_string(record.step));
  }

 private:
  std::string path_;
  int steps_;
  double global_batch_;
  double total_ms_ = 0;
  int reported_ = 0;  // steps this run (a resumed one starts past 0)
  std::ofstream log_;
};

// "nan", "inf" or "-inf".
std::string loss_text(double loss) { return std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf"; }

// Returns the exit status: 0, 1 when the loss stopped being finite, or 2 when a checkpoint could
// not be written. Every rank sees the same loss (summed over the world) and the same checkpoint
// outcome, so all stop at the same step and exit alike.
int train(const RunOptions& options, const MpiWorld& world, RankSetup& setup) {
  const auto& groups = setup.gradient_groups;
  // NCCL only when every rank can use it; a rank on the CPU or sharing its GPU makes it Gloo for all.
  CommSettings comm{setup.runner->device(), false};
  comm.nccl = world.max(setup.device.nccl ? 0 : 1) == 0;
  Communicator communicator(world, groups, std::chrono::seconds(options.timeout_s), comm,
                            setup.layout->tensor_group(world.rank()));
  // The stage file's collectives (torch_side/tensor_parallel_ops.h) run in this group.
  if (communicator.tensor_group())
    tp::set_process_group(std::make_shared<TensorParallelGroup>(communicator.tensor_group(),
                                                                std::chrono::seconds(options.timeout_s)));
  // Rank 0's device, and the other ranks' where they differ.
  std::string where = setup.device.cuda ? "cuda:" + std::to_string(setup.device.gpu) : "cpu";
  auto wheres = world.gather(where);
  if (world.rank() == 0) {
    std::map<std::string, std::vector<int>> ranks_by_where;
    for (std::size_t r = 0; r < wheres.size(); ++r) ranks_by_where[wheres[r]].push_back(static_cast<int>(r));
    where.clear();
    for (const auto& [text, ranks] : ranks_by_where)
      where += (where.empty() ? "" : "; ") + (ranks_by_where.size() > 1 ? "ranks " + ranges_text(ranks) + " on " : "") + text;
    where += ", " + communicator.backend_text();
  }
  // Every chunk's parameters, in the order rank_gradient_groups indexes them.
  std::vector<at::Tensor> params;
  std::vector<std::string> names;
  for (StageRunner* runner : runners_of(setup)) {
    params.insert(params.end(), runner->parameters().begin(), runner->parameters().end());
    for (const auto& weight : runner->weights()) names.push_back(weight.name);
  }
  StateSync state(params, names, groups, communicator, setup.optimizer, options.bucket_kib * 1024);
  const int first_step = setup.resume ? setup.resume->step() : 0;
  if (setup.resume) {
    auto start = std::chrono::steady_clock::now();
    int status = agreed_start(world, [&] {
      restore_optimizer(*setup.resume, setup.plan, setup.placement, world.rank(), runners_of(setup), state);
    });
    if (status != 0) return status;
    setup.restore_s += seconds_since(start);
  }
  // The slowest rank's reading is the time the job waited for it.
  double restore_s = world.max(static_cast<int>(setup.restore_s * 1000)) / 1000.0;
  CheckpointWriter checkpoints(options, setup.plan, setup.plan_sha256, std::string(plan::optimizer_name(setup.optimizer.kind)),
                               setup.placement);
  std::unique_ptr<EmbeddingExchange> embeddings;
  if (setup.plan.sharding) {
    int status = agreed_start(world, [&] {
      embeddings = std::make_unique<EmbeddingExchange>(setup.plan, world.rank(), communicator, setup.optimizer);
    });
    if (status != 0) return status;
  }
  Trainer trainer(setup.plan, *setup.layout, world.rank(), runners_of(setup), *setup.data, communicator, state,
                  options.accumulate_steps, embeddings.get());
  if (world.rank() == 0) std::cout << "rannc-run: " << describe(setup.plan, options.accumulate_steps, where) << std::endl;
  if (world.rank() == 0 && setup.plan.precision == plan::Precision::kFp16Mixed)
    std::cout << "rannc-run: fp16-mixed: computed in fp32 (libtorch's CPU autocast has no float16, and rannc-run has no "
                 "loss scaling yet)" << std::endl;
  std::vector<StepRecord> steps;
  std::string stopped;
  int status = 0;
  // Rank 0 alone reports, and opens the log: another rank's host may not even have its folder.
  std::optional<Progress> progress;
  if (world.rank() == 0) progress.emplace(options, setup.plan.batch.global * options.accumulate_steps);
  if (world.rank() == 0 && setup.resume) {
    const auto& saved = setup.resume->saved->plan();
    std::cout << "rannc-run: resuming from " << setup.resume->saved->folder() << " at step " << first_step;
    if (!setup.resume->same_plan)
      std::cout << ", saved under another plan (" << saved.ranks.size() << " ranks, " << saved.stages.size() << " stages)";
    std::printf(", read in %.2f s\n", restore_s);
    std::fflush(stdout);
  }
  for (int step = first_step; step < options.steps; ++step) {
    StepRecord record = trainer.run_step(step);
    if (!std::isfinite(record.loss)) {
      stopped = "step " + std::to_string(step) + ": the loss is " + loss_text(record.loss) +
                "; training stopped (diverged: lower --lr, or check the data)";
      status = static_cast<int>(ExitStatus::kCannotMeet);
      if (world.rank() == 0) std::cerr << "rannc-run: " << stopped << std::endl;
      break;
    }
    steps.push_back(record);
    if (progress) progress->report(record);
    if (checkpoints.due(step + 1)) {
      try {
        checkpoints.save(world, step + 1, runners_of(setup), state);
      } catch (const Error& e) {
        stopped = std::string("checkpoint: ") + e.what();
        if (world.rank() == 0) std::cerr << "rannc-run: " << stopped << std::endl;
        status = static_cast<int>(e.status());
        break;
      }
    }
  }
  // Each rank's measurements, and where it ran: its host and its place among that host's ranks.
  json entry = rank_json(trainer.record());
  entry["host"] = MpiWorld::hostname();
  entry["local_rank"] = setup.device_facts.local_rank;
  entry["local_size"] = setup.device_facts.local_size;
  auto ranks = world.gather(entry.dump());
  // The finite steps are reported even when training stopped, with what stopped it.
  if (world.rank() == 0 && !options.report_path.empty()) write_report(options.report_path, steps, ranks, stopped);
  return status;
}

}  // namespace

int run(const RunOptions& options, const MpiWorld& world) {
  track_cpu_tensor_memory();
  mend_torch_kernels();
  std::unique_ptr<RankSetup> setup;
  if (int status = agreed_start(world, [&] { setup = set_up(options, world); }); status != 0) return status;
  try {
    return train(options, world, *setup);
  } catch (const std::exception& e) {
    std::cerr << "rannc-run: rank " << world.rank() << ": " << torch_message(e) << std::endl;
    world.abort(1);
  }
}

}  // namespace rannc::runtime
