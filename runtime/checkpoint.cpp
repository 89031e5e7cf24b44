#include "runtime/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>
#include <sstream>

#include "runtime/mpi_world.h"
#include "runtime/stage_runner.h"
#include "runtime/state_sync.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/input_file.h"
#include "support/sha256.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/torch_error.h"

namespace rannc::runtime {
namespace {

namespace fs = std::filesystem;

// Runs `work` on every rank; when it fails on any, every rank throws InputError with the first
// failing rank's message, so the whole job stops alike.
void on_every_rank(const MpiWorld& world, const std::function<void()>& work) {
  std::string message;
  try {
    work();
  } catch (const std::exception& e) {
    message = "rank " + std::to_string(world.rank()) + ": " + torch_message(e);
  }
  std::string first;
  for (const auto& text : world.gather(message))  // every rank's on rank 0, none elsewhere
    if (first.empty()) first = text;
  first = world.broadcast(first, 0);
  if (!first.empty()) throw InputError(first);
}

void fresh_folder(const std::string& path) {
  std::error_code error;
  fs::remove_all(path, error);
  if (!error) fs::create_directories(path, error);
  if (error) throw InputError("--save: cannot create " + path + ": " + error.message());
}

at::Tensor generator_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_generator_state(const at::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// A rank's files in a checkpoint beside its chunks' weights (chunk_weights_file): the optimizer
// state its stage's ranks of its tensor rank share when replicated, its shards of sharded state
// and its random state.
struct RankFiles {
  std::string shared_optimizer, own_optimizer, random_state;
  const std::string& optimizer(const StateSync& state) const { return state.replicated() ? shared_optimizer : own_optimizer; }
};

RankFiles rank_files(const plan::Plan& plan, Placement placement, int rank) {
  const auto& stage = plan.stages.at(static_cast<std::size_t>(placement.stage));
  return {plan::stage_optimizer_file(stage, placement.tensor_rank), plan::rank_optimizer_file(rank),
          plan::rank_state_file(rank)};
}

// The weights of one of the rank's model chunks (its stage, its tensor rank's slices).
std::string chunk_weights_file(const plan::Plan& plan, const StageRunner& chunk, Placement placement) {
  return plan::stage_weights_file(plan.stages.at(static_cast<std::size_t>(chunk.stage_id())), placement.tensor_rank);
}

}  // namespace

CheckpointWriter::CheckpointWriter(const RunOptions& options, const plan::Plan& plan, std::string plan_sha256,
                                   std::string optimizer, Placement placement)
    : options_(options),
      plan_(plan),
      plan_sha256_(std::move(plan_sha256)),
      optimizer_(std::move(optimizer)),
      placement_(placement) {}

bool CheckpointWriter::due(int steps_done) const {
  if (options_.save_dir.empty()) return false;
  return steps_done == options_.steps || (options_.save_every > 0 && steps_done % options_.save_every == 0);
}

void CheckpointWriter::save(const MpiWorld& world, int steps_done, const std::vector<StageRunner*>& chunks,
                            const StateSync& state) const {
  const auto partial = (fs::path(options_.save_dir) / (plan::checkpoint_folder_name(steps_done) + ".partial")).string();
  try {
    on_every_rank(world, [&] {
      if (world.rank() == 0) fresh_folder(partial);
    });
    std::string written;
    on_every_rank(world, [&] { written = write_rank_files(partial, world.rank(), chunks, state); });
    // Rank 0 lists what every rank wrote: the files the manifest must hold.
    std::vector<std::string> files;
    for (const auto& names : world.gather(written)) {
      std::istringstream lines(names);
      for (std::string name; std::getline(lines, name);) files.push_back(name);
    }
    on_every_rank(world, [&] {
      if (world.rank() == 0) publish(partial, steps_done, files);
    });
  } catch (const Error&) {
    // Every rank has stopped writing (the failure was agreed on): the part written goes, so a
    // full disk gets its space back; `latest` still names the last whole checkpoint.
    std::error_code ignored;
    if (world.rank() == 0) fs::remove_all(partial, ignored);
    throw;
  }
}

std::string CheckpointWriter::write_rank_files(const std::string& folder, int rank, const std::vector<StageRunner*>& chunks,
                                               const StateSync& state) const {
  std::string names;
  auto write = [&](const std::string& file, const std::string& bytes) {
    write_file_atomically((fs::path(folder) / file).string(), bytes, "the checkpoint");
    names += file + "\n";
  };
  const auto files = rank_files(plan_, placement_, rank);
  // The replicas of one tensor rank hold the same values: the first writes them.
  bool first_replica = placement_.pipeline == 0 && placement_.replica == 0;
  if (first_replica)
    for (const StageRunner* chunk : chunks) write(chunk_weights_file(plan_, *chunk, placement_), state_dict_bytes(chunk->state()));
  if (first_replica || !state.replicated()) write(files.optimizer(state), state_dict_bytes(state.named_state()));
  write(files.random_state, state_dict_bytes({{kRandomStateKey, generator_state()}}));
  return names;
}

// Rank 0, once every rank has written its `files`: the manifest over them and the plan's copy,
// then the folder's final name, then `latest`. Each step is atomic, so a kill leaves `latest`
// naming a whole checkpoint.
void CheckpointWriter::publish(const std::string& partial, int steps_done, std::vector<std::string> files) const {
  plan::CheckpointManifest manifest;
  manifest.step = steps_done;
  manifest.plan_sha256 = plan_sha256_;
  manifest.model_sha256 = plan_.model.sha256;
  manifest.optimizer = optimizer_;
  manifest.seed = options_.seed;
  manifest.accumulate_steps = options_.accumulate_steps;
  files.push_back(plan::kCheckpointPlanFile);
  write_file_atomically((fs::path(partial) / plan::kCheckpointPlanFile).string(),
                        read_regular_file(options_.plan_path, kMaxJsonFileBytes, "plan"), "the checkpoint");
  for (const auto& file : files) {
    auto path = (fs::path(partial) / file).string();
    // Another host's rank wrote it: a --save folder that is not shared between the hosts shows here.
    if (!fs::exists(path))
      throw InputError(path + ": not visible from rank 0 (--save must name a folder every rank's host shares)");
    manifest.files[file] = sha256_of_file(path);
  }
  write_file_atomically((fs::path(partial) / plan::kCheckpointManifestFile).string(),
                        plan::checkpoint_manifest_json(manifest), "the checkpoint manifest");
  const auto name = plan::checkpoint_folder_name(steps_done);
  const auto final_path = fs::path(options_.save_dir) / name;
  std::error_code error;
  fs::remove_all(final_path, error);
  if (!error) fs::rename(partial, final_path, error);
  if (error) throw InputError("--save: cannot rename " + partial + " to " + final_path.string() + ": " + error.message());
  write_file_atomically((fs::path(options_.save_dir) / plan::kLatestCheckpointFile).string(), name + "\n",
                        "the latest checkpoint's name");
}

ResumePoint open_resume_point(const RunOptions& options, const plan::Plan& plan, const std::string& plan_sha256,
                              const std::string& optimizer) {
  auto folder = plan::find_checkpoint(options.resume_dir, "--resume");
  auto manifest = plan::read_checkpoint_manifest(folder);
  const std::string what = "--resume " + folder + ": ";
  if (manifest.version < plan::kCheckpointVersion) {
    throw InputError(what + "written by an earlier rannc-run (checkpoint format " + std::to_string(manifest.version) +
                     "), whose optimizer state this one cannot read: `rannc-partition export` it and train with --init");
  }
  if (manifest.model_sha256 != plan.model.sha256) throw InputError(what + "saved with another model");
  if (manifest.optimizer != optimizer)
    throw InputError(what + "holds " + manifest.optimizer + " state, this run has --optimizer " + optimizer);
  if (options.data_dir.empty() && manifest.seed != options.seed) {
    throw InputError(what + "trained on the random data of --seed " + std::to_string(manifest.seed) + ", this run has --seed " +
                     std::to_string(options.seed));
  }
  if (manifest.accumulate_steps != options.accumulate_steps) {
    throw InputError(what + "trained with --accumulate-steps " + std::to_string(manifest.accumulate_steps) +
                     ", this run has " + std::to_string(options.accumulate_steps) + " (the data would not resume where it stopped)");
  }
  if (manifest.step >= options.steps) {
    throw InputError(what + "has trained " + std::to_string(manifest.step) + " steps: --steps " +
                     std::to_string(options.steps) + " leaves none to train");
  }
  ResumePoint point;
  point.same_plan = manifest.plan_sha256 == plan_sha256;
  point.saved = std::make_unique<SavedCheckpoint>(folder, std::move(manifest));
  const auto& saved = point.saved->plan();
  if (saved.batch.global != plan.batch.global) {
    throw InputError(what + "trained on global batches of " + std::to_string(saved.batch.global) + " samples, this plan's are " +
                     std::to_string(plan.batch.global) + " (the data would not resume where it stopped)");
  }
  return point;
}

namespace {

// A checkpoint's tensors that do not fit together (a file edited and its manifest with it) fail in
// libtorch: one InputError naming the checkpoint, as for any other malformed file.
template <typename Work>
void reading(const std::string& source, Work&& work) {
  try {
    work();
  } catch (const c10::Error& e) {
    throw InputError(source + ": " + torch_message(e));
  }
}

void restore_stage_files(const ResumePoint& point, const plan::Plan& plan, Placement placement, int rank,
                         const std::vector<StageRunner*>& chunks) {
  const auto& saved = *point.saved;
  const auto source = "checkpoint " + saved.folder();
  if (point.same_plan) {
    for (StageRunner* chunk : chunks) {
      auto weights = plan::checked_checkpoint_file(saved.folder(), saved.manifest(), chunk_weights_file(plan, *chunk, placement));
      chunk->load_state(read_state_dict(weights, "checkpoint"), weights);
    }
  } else {
    std::set<std::string> wanted;
    for (const StageRunner* chunk : chunks)
      for (const auto& [name, tensor] : chunk->state()) wanted.insert(name);
    std::vector<TensorDict> held(chunks.size());
    saved.read_weights(wanted, [&](const std::string& name, const at::Tensor& whole) {
      for (std::size_t c = 0; c < chunks.size(); ++c)
        if (chunks[c]->holds(name)) held[c].emplace_back(name, chunks[c]->rank_part(name, whole, source));
    });
    for (std::size_t c = 0; c < chunks.size(); ++c) chunks[c]->load_state(held[c], source);
  }
  // A rank the saved plan did not have keeps the state --seed gave it; under the same plan every
  // rank wrote its own.
  auto random = saved.random_state(rank);
  if (!random && point.same_plan)
    throw InputError("checkpoint " + saved.folder() + ": lists no " + plan::rank_state_file(rank) + " for rank " +
                     std::to_string(rank));
  if (random) set_generator_state(*random);
}

void restore_optimizer_files(const ResumePoint& point, const plan::Plan& plan, Placement placement, int rank,
                             const std::vector<StageRunner*>& chunks, StateSync& state) {
  const auto& saved = *point.saved;
  const auto source = "checkpoint " + saved.folder();
  if (point.same_plan) {
    auto file = plan::checked_checkpoint_file(saved.folder(), saved.manifest(), rank_files(plan, placement, rank).optimizer(state));
    state.load_named_state(read_state_dict(file, "checkpoint"), file);
    return;
  }
  std::set<std::string> wanted;
  for (const StageRunner* chunk : chunks)
    for (const auto& weight : chunk->weights()) wanted.insert(weight.name);
  saved.read_optimizer_state(wanted, [&](const std::string& name, const ParamState& whole) {
    auto chunk = std::find_if(chunks.begin(), chunks.end(), [&](const StageRunner* c) { return c->holds(name); });
    ParamState mine{whole.step, {}};
    for (const auto& [field, tensor] : whole.fields) mine.fields.emplace_back(field, (*chunk)->rank_part(name, tensor, source));
    state.set_weight_state(state.index_of(name), mine, source + ": '" + name + "'");
  });
}

}  // namespace

// Under the plan saved, each rank's own files hold exactly its part; under another, its part is cut
// from the whole model's tensors (runtime/saved_checkpoint.h).
void restore_stage(const ResumePoint& point, const plan::Plan& plan, Placement placement, int rank,
                   const std::vector<StageRunner*>& chunks) {
  reading("checkpoint " + point.saved->folder(), [&] { restore_stage_files(point, plan, placement, rank, chunks); });
}

void restore_optimizer(const ResumePoint& point, const plan::Plan& plan, Placement placement, int rank,
                       const std::vector<StageRunner*>& chunks, StateSync& state) {
  reading("checkpoint " + point.saved->folder(), [&] { restore_optimizer_files(point, plan, placement, rank, chunks, state); });
}

}  // namespace rannc::runtime
