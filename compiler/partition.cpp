#include "compiler/partition.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <set>

#include "compiler/cpu_calibration.h"
#include "compiler/explain.h"
#include "compiler/sharded_partition.h"
#include "compiler/show.h"
#include "compiler/stage_files.h"
#include "compiler/verify.h"
#include "cost_model/cost_model.h"
#include "cost_model/profile_db.h"
#include "emit/launch_files.h"
#include "emit/pictures.h"
#include "emit/plan_builder.h"
#include "partitioner/planner.h"
#include "plan/plan_json.h"
#include "sharding/embedding_tables.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/folder_lock.h"
#include "support/format.h"
#include "support/input_file.h"
#include "support/sha256.h"
#include "support/stable_number.h"

namespace rannc {
namespace {

using Clock = std::chrono::steady_clock;

void check_positive(const std::optional<int>& value, const char* flag) {
  if (value && *value < 1) throw InputError(std::string(flag) + " " + std::to_string(*value) + ": must be at least 1");
}

// The layouts that lost which --explain simulates and lists.
constexpr int kExplainedRunnersUp = 5;

// One count of --layout: a whole number of at least 1, small enough to mean devices.
int layout_number(const std::string& item, const std::string& digits) {
  constexpr int kMax = 9999999;
  bool number = !digits.empty() && digits.size() <= 7 &&
                std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!number || std::stoi(digits) < 1)
    throw InputError("--layout " + text_excerpt(item) + ": must be a whole number from 1 to " + std::to_string(kMax));
  return std::stoi(digits);
}

void apply_layout(const PartitionOptions& options, partition::PlanRequest& request) {
  if (options.layout.empty()) return;
  if (options.stages || options.microbatches)
    throw InputError("--layout sets the stage and microbatch counts: give it without --stages and --microbatches");
  ForcedLayout layout = parse_layout(options.layout, request.cluster.gpus(), request.cluster.gpus_per_node);
  request.stages = layout.stages;
  request.pipelines = layout.pipelines;
  request.microbatches = layout.microbatches;
  request.tensor_degree = layout.tensor_degree;
  if (layout.context_degree > 1) {
    if (request.cluster.mixed())
      throw InputError("--layout cp=: context parallelism is not planned on a mixed cluster");
    request.context_degree = layout.context_degree;
  }
  if (layout.chunks > 1) {
    if (request.schedule != plan::Schedule::k1F1B) throw InputError("--layout vp=: interleaved stages run the 1f1b schedule");
    if (request.cluster.mixed())
      throw InputError("--layout vp=: interleaved stages are not planned on a mixed cluster (a device group's chunks would "
                       "straddle its kinds)");
    request.interleave = layout.chunks;
  }
  if (layout.microbatches && *layout.microbatches > partition::kMaxMicrobatches)
    throw InputError("--layout m=" + std::to_string(*layout.microbatches) + ": at most " + std::to_string(partition::kMaxMicrobatches));
}

}  // namespace

ForcedLayout parse_layout(const std::string& text, int devices, int devices_per_node) {
  const std::string form =
      "expected pp=N,dp=N[,m=N][,tp=N][,cp=N][,vp=N], e.g. pp=8,dp=8 or pp=16,dp=8,tp=8,vp=2 or pp=4,dp=2,tp=4,cp=2,vp=5";
  ForcedLayout layout;
  std::set<std::string> seen;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = std::min(text.find(',', begin), text.size());
    std::string item = text.substr(begin, end - begin);
    begin = end + 1;
    auto equals = item.find('=');
    std::string key = item.substr(0, equals);
    if (equals == std::string::npos || (key != "pp" && key != "dp" && key != "m" && key != "tp" && key != "cp" && key != "vp"))
      throw InputError("--layout " + text_excerpt(text) + ": " + text_excerpt(item) + " is not a layout item; " + form);
    if (!seen.insert(key).second) throw InputError("--layout " + text_excerpt(text) + ": " + key + " is given twice");
    int value = layout_number(item, item.substr(equals + 1));
    if (key == "pp") layout.stages = value;
    if (key == "dp") layout.pipelines = value;
    if (key == "m") layout.microbatches = value;
    if (key == "tp") layout.tensor_degree = value;
    if (key == "cp") layout.context_degree = value;
    if (key == "vp") layout.chunks = value;
  }
  if (!layout.stages || !layout.pipelines) throw InputError("--layout " + text_excerpt(text) + ": " + form);
  if (layout.chunks > 1 && layout.stages < 2)
    throw InputError("--layout vp=" + std::to_string(layout.chunks) + ": interleaving needs pp=2 or more");
  if (devices_per_node % layout.tensor_degree != 0)
    throw InputError("--layout tp=" + std::to_string(layout.tensor_degree) + ": must divide the " +
                     std::to_string(devices_per_node) + " devices of a node (a tensor-parallel group stays in one node)");
  if (layout.context_degree > plan::kMaxParallelDegree)
    throw InputError("--layout cp=" + std::to_string(layout.context_degree) + ": at most " +
                     std::to_string(plan::kMaxParallelDegree));
  const int group = layout.tensor_degree * layout.context_degree;
  if (devices_per_node % group != 0 && group % devices_per_node != 0)
    throw InputError("--layout cp=" + std::to_string(layout.context_degree) + ": tp x cp = " + std::to_string(group) +
                     " must divide the " + std::to_string(devices_per_node) +
                     " devices of a node or be a whole number of nodes (a context group fills whole nodes)");
  std::int64_t product =
      static_cast<std::int64_t>(layout.stages) * layout.pipelines * layout.tensor_degree * layout.context_degree;
  if (product != devices) {
    throw InputError("--layout " + text_excerpt(text) + ": pp x dp" + (layout.tensor_degree > 1 ? " x tp" : "") +
                     (layout.context_degree > 1 ? " x cp" : "") + " = " + std::to_string(product) +
                     " devices, but the job has " + std::to_string(devices) + " (--gpus)");
  }
  return layout;
}

partition::PlanRequest plan_request(const PartitionOptions& options) {
  partition::PlanRequest request;
  request.cluster = cost::cluster_from_flags(options.cluster);
  request.schedule = plan::parse_schedule(options.schedule, "--schedule");
  request.optimizer = plan::parse_optimizer(options.optimizer, "--optimizer");
  request.precision = plan::parse_precision(options.precision, "--precision");
  for (int kind = 0; kind < request.cluster.kinds(); ++kind)
    cost::check_precision_supported(request.cluster.kind_view(kind).device, request.precision);
  request.attention = plan::parse_fusion(options.attention, "--attention");
  request.elementwise = plan::parse_fusion(options.elementwise, "--elementwise");
  check_positive(options.stages, "--stages");
  check_positive(options.microbatches, "--microbatches");
  if (options.microbatches && *options.microbatches > partition::kMaxMicrobatches) {
    throw InputError("--microbatches " + std::to_string(*options.microbatches) + ": at most " +
                     std::to_string(partition::kMaxMicrobatches));
  }
  request.stages = options.stages;
  request.microbatches = options.microbatches;
  if (options.shard_state != "auto") {
    try {
      request.state_sharding = plan::parse_state_sharding(options.shard_state, "--shard-state");
    } catch (const InputError&) {
      throw InputError("--shard-state " + text_excerpt(options.shard_state) + ": unknown (known: auto, none, optimizer)");
    }
  }
  auto batch = requested_batch(options.load);
  if (batch && *batch > std::numeric_limits<int>::max())
    throw InputError("--batch " + std::to_string(*batch) + ": larger than a plan supports (2^31 - 1)");
  if (options.stages && *options.stages > request.cluster.gpus()) {
    throw InputError("--stages " + std::to_string(*options.stages) + ": more stages than the " +
                     std::to_string(request.cluster.gpus()) + " devices");
  }
  if (options.recompute != "auto") {
    for (auto choice : {plan::Recompute::kNone, plan::Recompute::kSelective, plan::Recompute::kFull})
      if (options.recompute == plan::recompute_name(choice)) request.recompute = choice;
    if (!request.recompute)
      throw InputError("--recompute " + text_excerpt(options.recompute) + ": unknown (known: auto, none, selective, full)");
  }
  // rannc-run runs neither tensor parallelism nor interleaved stages yet: plans for the machine it
  // runs on (the measured `cpu` preset) use neither unless forced.
  bool measured_here = false;
  for (int kind = 0; kind < request.cluster.kinds(); ++kind)
    measured_here = measured_here || request.cluster.kind_view(kind).device.measured_here;
  request.max_tensor_degree = measured_here ? 1 : request.cluster.gpus_per_node;
  request.max_interleave = measured_here ? 1 : partition::kInterleaveChunks.back();
  if (options.sequence_parallel != "on" && options.sequence_parallel != "off")
    throw InputError("--sequence-parallel '" + text_excerpt(options.sequence_parallel) + "': on or off");
  request.sequence_parallel = options.sequence_parallel == "on";
  if (options.tensor_parallel) {
    if (*options.tensor_parallel < 1 || request.cluster.gpus_per_node % *options.tensor_parallel != 0)
      throw InputError("--tensor-parallel " + std::to_string(*options.tensor_parallel) + ": must divide the " +
                       std::to_string(request.cluster.gpus_per_node) + " devices of a node (1 plans none)");
    request.max_tensor_degree = *options.tensor_parallel;
  }
  if (options.context_parallel != 1) {
    if (options.context_parallel > plan::kMaxParallelDegree)
      throw InputError("--context-parallel " + std::to_string(options.context_parallel) + ": at most " +
                       std::to_string(plan::kMaxParallelDegree));
    if (options.context_parallel < 1 || !request.cluster.tiles_nodes(options.context_parallel))
      throw InputError("--context-parallel " + std::to_string(options.context_parallel) + ": must divide the " +
                       std::to_string(request.cluster.gpus_per_node) +
                       " devices of a node or be a whole number of nodes (1 plans none)");
    if (request.cluster.mixed())
      throw InputError("--context-parallel " + std::to_string(options.context_parallel) +
                       ": context parallelism is not planned on a mixed cluster");
    request.max_context_degree = options.context_parallel;
  }
  apply_layout(options, request);
  if (request.tensor_degree) request.max_tensor_degree = std::max(request.max_tensor_degree, *request.tensor_degree);
  return request;
}

void set_model_batch(partition::PlanRequest& request, const PartitionOptions& options, const Model& model) {
  request.global_batch = requested_batch(options.load).value_or(model.batch);
  if (model.fixed_batch) request.fixed_microbatch = static_cast<int>(*model.fixed_batch);  // the loader bounds it
}

namespace {

// The output folder, made only once there is a plan to write, so that a run that fails before
// (a bad model, no plan that fits) leaves nothing behind. When a later step fails, discard()
// removes what this run made: the folder and any parents it created, never a folder that was
// there before (nor its files).
class OutputFolder {
 public:
  explicit OutputFolder(const std::string& path) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::path created;
    for (fs::path p = fs::absolute(path, ec); !ec && !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
      created = p;
      if (p == p.parent_path()) break;
    }
    fs::create_directories(path, ec);
    if (ec || !fs::is_directory(path)) throw InputError(path + ": cannot create the output folder");
    created_ = created;
  }

  void discard() const {
    std::error_code ec;  // best effort: the run is failing already, with its own error
    if (!created_.empty()) std::filesystem::remove_all(created_, ec);
  }

 private:
  std::filesystem::path created_;  // the topmost folder this run created; empty: none
};

// How the plan was found, beside show --json's object of the plan in partition --json.
nlohmann::json planning_json(const partition::PlanResult& result, double load_ms, double total_ms) {
  const auto& t = result.times;
  return {{"units", result.partitioning.units.units.size()},
          {"blocks", result.partitioning.blocking.count()},
          {"configs_searched", result.census.searched},
          {"ms",
           {{"load", load_ms}, {"units", t.units_ms}, {"coarsen", t.coarsen_ms}, {"costs", t.costs_ms},
            {"search", t.search_ms}, {"simulate", t.simulate_ms}, {"total", total_ms}}}};
}

// The files beside plan.json for people and schedulers. They are made from the plan as a reader
// sees it (checked by the plan reader), so they cannot describe anything plan.json does not say.
void write_companion_files(const plan::Plan& plan, const partition::PlacedPipeline& pipeline,
                           const std::string& runtime_folder) {
  auto beside = [&](const char* name) { return (std::filesystem::path(plan.folder()) / name).string(); };
  std::string launch = beside("launch.sh");
  write_file_atomically(launch, emit::launch_script(plan, runtime_folder), "the launch script");
  std::error_code ec;
  namespace fs = std::filesystem;
  fs::permissions(launch, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add, ec);
  if (ec) throw InputError(launch + ": cannot make it executable: " + ec.message());
  write_file_atomically(beside("job.sbatch"), emit::sbatch_script(plan, runtime_folder), "the SLURM job");
  write_file_atomically(beside("schedule.svg"), emit::schedule_svg(pipeline, emit::plan_title(plan)), "the schedule picture");
  write_file_atomically(beside("stages.dot"), emit::stages_dot(plan), "the stage graph");
}

// stage_<digits>.pt, stage_<digits>_tp<digits>.pt and shards_<digits>.pt, the names of the stage
// files, tensor ranks' stage files and shard files partition writes (emit/stage_layout.cpp,
// sharded_partition.cpp), and the sharded plan's others.
bool numbered_file(const std::string& name, const std::string& prefix, const std::string& second = "") {
  const std::string suffix = ".pt";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  auto numbers = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  auto digits = [](const std::string& text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (second.empty()) return digits(numbers);
  auto at = numbers.find(second);
  return at != std::string::npos && digits(numbers.substr(0, at)) && digits(numbers.substr(at + second.size()));
}

bool is_stage_file_name(const std::string& name) {
  return numbered_file(name, "stage_") || numbered_file(name, "stage_", "_tp") || numbered_file(name, "shards_") ||
         name == kIndicesFile || name == kTablesFile;
}

// plan.json of an earlier run and its stage files: readers must not take them for this plan's
// (with --plan-only, or fewer stages, some would never be overwritten). Other files stay.
void remove_outputs_of_old_plan(const std::string& plan_path) {
  namespace fs = std::filesystem;
  std::vector<fs::path> old{plan_path};
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(plan_path).parent_path(), ec))
    if (is_stage_file_name(entry.path().filename().string())) old.push_back(entry.path());
  if (ec) throw InputError(fs::path(plan_path).parent_path().string() + ": cannot list the output folder: " + ec.message());
  for (const auto& path : old) {
    fs::remove(path, ec);
    if (ec) throw InputError(path.string() + ": cannot remove the output of an earlier run: " + ec.message());
  }
}

std::int64_t weight_bytes(const ir::Graph& graph) {
  std::int64_t bytes = 0;
  for (const auto& value : graph.values())
    if (value.is_weight()) bytes += value.type.bytes();
  return bytes;
}

// A wrong stage file must never leave the tool silently: the files just written are chained
// against the model before plan.json names them (throws, naming the worst tensor, if they differ).
nlohmann::json check_written_stages(const Model& model, const plan::Plan& plan, const PartitionOptions& options,
                                    std::string& line) {
  // A check for gross errors (a cut that mixes samples, a lost gradient, garbage from a kernel):
  // those differ by far more; fp32 sums in another order differ by far less. verify measures
  // closer.
  constexpr double kTolerance = 1e-2;
  if (!options.check) {
    line = "not compared (--no-check)";
    return {{"compared", false}, {"reason", "--no-check"}};
  }
  if (weight_bytes(model.graph) > options.check_limit_bytes) {
    line = "not compared: the weights take " + human_bytes(static_cast<double>(weight_bytes(model.graph))) +
           ", beyond --check-limit " + human_bytes(static_cast<double>(options.check_limit_bytes)) +
           " (run verify where they fit)";
    return {{"compared", false}, {"reason", line}};
  }
  auto check = check_stage_files(model, plan, kTolerance, options.check_limit_bytes);
  line = check.line;
  return check.summary;
}

// Everything the run writes into the output folder, the plan last (see run_partition).
struct Outputs {
  const Model& model;
  plan::Plan& plan;
  const std::vector<emit::StageLayout>& layouts;
  const partition::PlanResult& result;
};

// Makes the output folder and holds its lock while `write` runs (a run refused here leaves the
// folder to the run that holds it); a failing `write` removes what this run made.
template <typename Write>
void write_into_output_folder(const std::string& out_dir, Write&& write) {
  OutputFolder folder(out_dir);
  FolderLock lock(out_dir);
  try {
    write();
  } catch (...) {
    folder.discard();
    throw;
  }
}

// plan.json's text, checked as every reader will check it before it is written: a plan the
// runtime would refuse is never left behind.
std::string checked_plan_text(const plan::Plan& plan) {
  std::string text = plan::to_text(plan);
  plan::from_json(nlohmann::json::parse(text), plan.path);
  return text;
}

// Writes the stage files, checks them, writes the companion files and plan.json; returns the
// check's summary (null with --plan-only) and sets `check_line`.
nlohmann::json write_outputs(const Outputs& out, const PartitionOptions& options, std::string& check_line) {
  // The old plan goes first, so that a run that fails part-way leaves no plan.json naming files
  // it did not write; plan.json is the last file written, once everything it names is there.
  remove_outputs_of_old_plan(out.plan.path);
  if (!options.plan_only) {
    auto hashes = write_stage_files(out.model, out.layouts, options.out_dir);
    for (std::size_t i = 0; i < hashes.size(); ++i) {
      auto& stage = out.plan.stages[i];
      stage.sha256 = hashes[i].stage;
      for (std::size_t rank = 0; rank < hashes[i].tensor_ranks.size(); ++rank)
        stage.tensor_parallel.files.at(rank).sha256 = hashes[i].tensor_ranks[rank];
    }
  }
  std::string text = checked_plan_text(out.plan);
  nlohmann::json check;
  if (!options.plan_only) check = check_written_stages(out.model, out.plan, options, check_line);
  write_companion_files(out.plan, out.result.pipeline, options.runtime_folder);
  write_file_atomically(out.plan.path, text, "the plan");
  return check;
}

// plan.json of a sharded plan, after its files (sharded_partition.h) unless --plan-only.
PartitionReport write_sharded(const Model& model, ShardedPlan sharded, const PartitionOptions& options, double load_ms,
                              std::chrono::steady_clock::time_point start) {
  auto& plan = sharded.plan;
  plan.path = (std::filesystem::path(options.out_dir) / "plan.json").string();
  plan.generator = options.generator;
  write_into_output_folder(options.out_dir, [&] {
    remove_outputs_of_old_plan(plan.path);
    if (!options.plan_only) write_sharded_files(model, sharded, options.out_dir);
    write_file_atomically(plan.path, checked_plan_text(plan), "the plan");
  });
  options.progress.done("wrote " + plan.path);
  PartitionReport report;
  report.plan_path = plan.path;
  report.summary = show_json(plan);
  auto& planning = report.summary["planning"] = sharded.summary;
  planning["ms"]["load"] = load_ms;
  planning["ms"]["total"] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  report.text = show_text(plan);
  return report;
}

// The free plan's pipeline, to compare a --layout plan with.
partition::PlacedPipeline free_pipeline(const Model& model, const std::vector<const cost::CostModel*>& costs,
                                        partition::PlanRequest request) {
  request.stages.reset();
  request.pipelines.reset();
  request.microbatches.reset();
  request.tensor_degree.reset();
  request.context_degree.reset();
  request.runners_up = 0;
  return partition::plan_model(model.graph, model.batch, costs, request).pipeline;
}

}  // namespace

PartitionReport run_partition(const PartitionOptions& options) {
  auto start = Clock::now();
  partition::PlanRequest request = plan_request(options);
  check_sharding_options(options.sharding);
  std::optional<cost::ProfileDb> db;
  if (!options.profile_db.empty()) db = cost::ProfileDb::load(options.profile_db, /*must_exist=*/true);

  Model model = load_model(options.model_path, options.load);
  options.progress.done("loaded " + options.model_path + ": " + plural(static_cast<std::int64_t>(model.graph.ops().size()), "op"));
  set_model_batch(request, options, model);
  request.cluster.device = with_this_cpu(request.cluster.device, db ? &*db : nullptr);
  for (auto& group : request.cluster.groups) group.device = with_this_cpu(group.device, db ? &*db : nullptr);
  double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  auto tables = sharding::find_embedding_tables(model.graph, model.batch);
  if (wants_sharded_plan(tables, options.sharding)) {
    if (options.explain || !options.layout.empty())
      throw InputError(std::string(options.explain ? "--explain" : "--layout") +
                       " is for pipeline plans; this model's embedding tables are sharded (--no-table-sharding plans them in a pipeline)");
    if (request.attention == plan::Fusion::kFused || request.elementwise == plan::Fusion::kFused)
      throw InputError(std::string(request.attention == plan::Fusion::kFused ? "--attention" : "--elementwise") +
                       " fused is for pipeline plans; this model's embedding tables are sharded, their dense part costed op "
                       "by op (--no-table-sharding plans them in a pipeline)");
    if (request.cluster.mixed())
      throw InputError("sharded embedding tables are planned on one device kind; this cluster mixes " +
                       request.cluster.device_names() + " (--no-table-sharding plans them in a pipeline)");
    auto sharded = plan_sharded(model, std::move(tables), options.sharding, request, db ? &*db : nullptr, options.model_path);
    return write_sharded(model, std::move(sharded), options, load_ms, start);
  }
  // One cost model per device kind (a mixed cluster's each calibrated by its own profile, if any).
  std::vector<cost::CostModel> kind_models;
  for (int kind = 0; kind < request.cluster.kinds(); ++kind)
    kind_models.emplace_back(model.graph, request.cluster.kind_view(kind).device, request.precision, db ? &*db : nullptr);
  std::vector<const cost::CostModel*> costs;
  for (const auto& kind_model : kind_models) costs.push_back(&kind_model);
  request.runners_up = options.explain ? kExplainedRunnersUp : 0;
  auto result = partition::plan_model(model.graph, model.batch, costs, request,
                                      [&](const std::string& outcome) { options.progress.done(outcome); });
  std::optional<partition::PlacedPipeline> free;
  if (!options.layout.empty()) {
    free = free_pipeline(model, costs, request);
    options.progress.done("planned the free layout to compare with");
  }
  auto layouts = emit::stage_layouts(model.graph, result);
  // The model's absolute path, so that the plan finds it from any working directory.
  emit::ModelFacts facts{std::filesystem::canonical(options.model_path).string(), sha256_of_file(options.model_path),
                         std::string(model_format_name(model.format)), model.batch};
  plan::Plan plan = emit::build_plan(model.graph, facts, request, result, layouts);
  plan.path = (std::filesystem::path(options.out_dir) / "plan.json").string();
  plan.generator = options.generator;

  std::string check_line;
  nlohmann::json check;
  write_into_output_folder(options.out_dir, [&] { check = write_outputs({model, plan, layouts, result}, options, check_line); });
  options.progress.done("wrote " + plan.path + (options.plan_only ? "" : " and " + plural(plan.stage_count(), "stage file")));
  double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  PartitionReport report;
  report.plan_path = plan.path;
  report.summary = show_json(plan);
  report.summary["planning"] = planning_json(result, load_ms, total_ms);
  report.text = show_text(plan);
  if (!options.plan_only) {
    report.summary["check"] = check;
    report.text += "check      " + check_line + "\n";
  }
  if (options.explain) {
    report.summary["explain"] = explain_json(result, request.cluster.least_mem_bytes());
    report.text += explain_text(result, request.cluster.least_mem_bytes());
  }
  if (free) {
    report.summary["layout"] = layout_comparison_json(options.layout, result.pipeline, *free);
    report.text += layout_comparison_text(options.layout, result.pipeline, *free);
  }
  return report;
}

}  // namespace rannc
