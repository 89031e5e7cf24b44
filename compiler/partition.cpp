#include "compiler/partition.h"

#include <chrono>
#include <filesystem>
#include <limits>

#include "compiler/show.h"
#include "compiler/stage_files.h"
#include "compiler/verify.h"
#include "cost_model/cost_model.h"
#include "cost_model/profile_db.h"
#include "emit/launch_files.h"
#include "emit/pictures.h"
#include "plan/plan_json.h"
#include "emit/plan_builder.h"
#include "partitioner/planner.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/folder_lock.h"
#include "support/format.h"
#include "support/sha256.h"
#include "support/stable_number.h"

namespace rannc {
namespace {

using Clock = std::chrono::steady_clock;

void check_positive(const std::optional<int>& value, const char* flag) {
  if (value && *value < 1) throw InputError(std::string(flag) + " " + std::to_string(*value) + ": must be at least 1");
}

// Every request option checked before the model is read, so a typo fails fast.
partition::PlanRequest request_from(const PartitionOptions& options) {
  partition::PlanRequest request;
  request.cluster = cost::cluster_from_flags(options.cluster);
  request.schedule = plan::parse_schedule(options.schedule, "--schedule");
  request.optimizer = plan::parse_optimizer(options.optimizer, "--optimizer");
  request.precision = plan::parse_precision(options.precision, "--precision");
  cost::check_precision_supported(request.cluster.device, request.precision);
  check_positive(options.stages, "--stages");
  check_positive(options.microbatches, "--microbatches");
  if (options.microbatches && *options.microbatches > partition::kMaxMicrobatches) {
    throw InputError("--microbatches " + std::to_string(*options.microbatches) + ": at most " +
                     std::to_string(partition::kMaxMicrobatches));
  }
  request.stages = options.stages;
  request.microbatches = options.microbatches;
  if (options.stages && *options.stages > request.cluster.gpus()) {
    throw InputError("--stages " + std::to_string(*options.stages) + ": more stages than the " +
                     std::to_string(request.cluster.gpus()) + " devices");
  }
  return request;
}

std::string plan_path_in(const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec || !std::filesystem::is_directory(out_dir)) throw InputError(out_dir + ": cannot create the output folder");
  return (std::filesystem::path(out_dir) / "plan.json").string();
}

nlohmann::json summary_json(const partition::PlanResult& result, const std::string& path, const partition::PlanRequest& request,
                            double load_ms, double total_ms) {
  const auto& p = result.pipeline;
  const auto& t = result.times;
  return {{"plan", path},
          {"stages", p.stages.size()},
          {"pipelines", p.config.pipelines},
          {"microbatches", p.config.microbatches},
          {"microbatch_size", p.config.microbatch_size},
          {"iteration_ms", stable_number(p.predicted.iteration_ms)},
          {"lower_bound_ms", stable_number(p.predicted.lower_bound_ms)},
          {"efficiency", stable_number(p.predicted.efficiency)},
          {"bubble_fraction", stable_number(p.predicted.bubble_fraction)},
          {"peak_mem_bytes", stable_number(p.predicted.peak_mem_bytes)},
          {"mem_limit_bytes", request.cluster.mem_bytes},
          {"unused_devices", p.unused_ranks.size()},
          {"units", result.partitioning.units.units.size()},
          {"blocks", result.partitioning.blocking.count()},
          {"configs_searched", result.configs_searched},
          {"planning_ms",
           {{"load", load_ms}, {"units", t.units_ms}, {"coarsen", t.coarsen_ms}, {"costs", t.costs_ms},
            {"search", t.search_ms}, {"simulate", t.simulate_ms}, {"total", total_ms}}}};
}

// The files beside plan.json for people and schedulers. They are made from the plan as a reader
// sees it (checked by the plan reader), so they cannot describe anything plan.json does not say.
void write_companion_files(const plan::Plan& plan, const partition::PlacedPipeline& pipeline) {
  auto beside = [&](const char* name) { return (std::filesystem::path(plan.folder()) / name).string(); };
  std::string launch = beside("launch.sh");
  write_file_atomically(launch, emit::launch_script(plan), "the launch script");
  std::error_code ec;
  namespace fs = std::filesystem;
  fs::permissions(launch, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add, ec);
  if (ec) throw InputError(launch + ": cannot make it executable: " + ec.message());
  write_file_atomically(beside("job.sbatch"), emit::sbatch_script(plan), "the SLURM job");
  write_file_atomically(beside("schedule.svg"), emit::schedule_svg(pipeline, emit::plan_title(plan)), "the schedule picture");
  write_file_atomically(beside("stages.dot"), emit::stages_dot(plan), "the stage graph");
}

// plan.json of an earlier run, and with --plan-only the stage files this plan would name:
// those on disk belong to another plan, and readers must not take them for this one's.
void remove_outputs_of_old_plan(const std::string& plan_path, const std::vector<emit::StageLayout>* stage_files) {
  auto remove = [](const std::filesystem::path& path) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    if (ec) throw InputError(path.string() + ": cannot remove the output of an earlier run: " + ec.message());
  };
  remove(plan_path);
  if (stage_files)
    for (const auto& stage : *stage_files) remove(std::filesystem::path(plan_path).parent_path() / stage.file);
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
  auto check = check_stage_files(model, plan, kTolerance);
  line = check.line;
  return check.summary;
}

}  // namespace

PartitionReport run_partition(const PartitionOptions& options) {
  auto start = Clock::now();
  partition::PlanRequest request = request_from(options);
  std::optional<cost::ProfileDb> db;
  if (!options.profile_db.empty()) db = cost::ProfileDb::load(options.profile_db, /*must_exist=*/true);
  std::string plan_path = plan_path_in(options.out_dir);
  FolderLock lock(options.out_dir);  // held until every file is written
  auto batch = requested_batch(options.load);
  if (batch && *batch > std::numeric_limits<int>::max())
    throw InputError("--batch " + std::to_string(*batch) + ": larger than a plan supports (2^31 - 1)");

  Model model = load_model(options.model_path, options.load);
  request.global_batch = requested_batch(options.load).value_or(model.batch);
  if (model.fixed_batch) request.fixed_microbatch = static_cast<int>(*model.fixed_batch);  // the loader bounds it
  double load_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  cost::CostModel costs(model.graph, request.cluster.device, request.precision, db ? &*db : nullptr);
  auto result = partition::plan_model(model.graph, model.batch, costs, request);
  auto layouts = emit::stage_layouts(model.graph, result);
  emit::ModelFacts facts{options.model_path, sha256_of_file(options.model_path),
                         std::string(model_format_name(model.format)), model.batch};
  plan::Plan plan = emit::build_plan(model.graph, facts, request, result, layouts);
  plan.path = plan_path;
  // The old plan goes first, so that a run that fails part-way leaves no plan.json naming files
  // it did not write; plan.json is the last file written, once everything it names is there.
  remove_outputs_of_old_plan(plan_path, options.plan_only ? &layouts : nullptr);
  if (!options.plan_only) {
    auto hashes = write_stage_files(model, layouts, options.out_dir);
    for (std::size_t i = 0; i < hashes.size(); ++i) plan.stages[i].sha256 = hashes[i];
  }
  // Checked as every reader will check it before it is written: a plan the runtime would refuse
  // is never left behind.
  std::string text = plan::to_text(plan);
  plan::from_json(nlohmann::json::parse(text), plan_path);
  std::string check_line;
  nlohmann::json check;
  if (!options.plan_only) check = check_written_stages(model, plan, options, check_line);
  write_companion_files(plan, result.pipeline);
  write_file_atomically(plan_path, text, "the plan");
  double total_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  PartitionReport report;
  report.plan_path = plan_path;
  report.summary = summary_json(result, plan_path, request, load_ms, total_ms);
  report.text = show_text(plan);
  if (!options.plan_only) {
    report.summary["check"] = check;
    report.text += "check      " + check_line + "\n";
  }
  return report;
}

}  // namespace rannc
