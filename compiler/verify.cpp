#include "compiler/verify.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <sstream>

#include "compiler/model.h"
#include "compiler/stage_files.h"
#include "compiler/torch_plugin.h"
#include "plan/plan_json.h"
#include "emit/stage_layout.h"
#include "support/error.h"
#include "support/sha256.h"

namespace rannc {
namespace {

using Difference = TorchPlugin::Difference;

// The model the plan was made for: same bytes, loaded with the plan's example inputs.
Model load_planned_model(const plan::Plan& plan, const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw InputError(path + ": no such file (the plan's model; give --model MODEL if it moved)");
  }
  if (sha256_of_file(path) != plan.model.sha256) {
    throw InputError(path + ": sha256 differs from the one in " + plan.path +
                     " (the plan was made for another version of the model; partition it again)");
  }
  LoadOptions load;
  for (const auto& input : plan.model.inputs) {
    auto dtype = ir::parse_dtype(input.dtype);
    if (!dtype) throw InputError(plan.path + ": model input '" + input.name + "' has unknown dtype " + input.dtype);
    load.inputs.push_back({input.name, input.shape, *dtype});
  }
  load.batch = plan.model.evaluated_batch;
  return load_model(path, load);
}

TorchPlugin::VerifyRequest request_for(const Model& model, const plan::Plan& plan, std::uint64_t seed) {
  TorchPlugin::VerifyRequest request;
  request.model = &model;
  request.plan = &plan;
  request.seed = seed;
  if (model.format == ModelFormat::kOnnx) {
    // ONNX has no runtime here: the reference is the whole model as one generated stage.
    auto whole = emit::whole_model_layout(model.graph);
    request.reference = onnx_stage_source(model, whole);
    for (const auto& weight : whole.params) request.reference_names[weight.stage_name] = model.graph.value(weight.value).name;
  }
  return request;
}

// One group of differences (outputs or gradients) summed up once, for the text and the JSON.
struct Summary {
  std::size_t compared = 0;
  double max_abs = 0;
  const Difference* worst = nullptr;  // the largest relative difference
  double max_rel() const { return worst ? worst->max_rel : 0.0; }
};

Summary summarize(const std::vector<Difference>& differences) {
  Summary summary{differences.size()};
  for (const auto& d : differences) {
    summary.max_abs = std::max(summary.max_abs, d.max_abs);
    if (!summary.worst || d.max_rel > summary.worst->max_rel) summary.worst = &d;
  }
  return summary;
}

nlohmann::json summary_json(const Summary& summary) {
  nlohmann::json json = {{"compared", summary.compared}, {"max_abs", summary.max_abs}};
  if (summary.worst) {
    json["max_rel"] = summary.worst->max_rel;
    json["worst"] = summary.worst->what;
  }
  return json;
}

std::string summary_line(const char* label, const Summary& summary) {
  char line[512];
  std::snprintf(line, sizeof line, "%-10s %4zu compared   max abs %.3g   max rel %.3g%s%s\n", label, summary.compared,
                summary.max_abs, summary.max_rel(), summary.worst ? "   worst: " : "",
                summary.worst ? summary.worst->what.c_str() : "");
  return line;
}

}  // namespace

VerifyOutcome run_verify(const VerifyOptions& options) {
  if (!(options.tolerance > 0)) throw InputError("--tolerance must be positive");
  auto plan = plan::read_plan_file(options.plan_path);
  // Its dense stage reads pooled lookups that no stage file computes; the files compose as
  // tests/cli/check_sharded_files.py checks.
  if (plan.sharding) throw InputError(plan.path + ": a sharded plan of embedding tables: verify checks pipeline plans only");
  plan::check_stage_files(plan);
  Model model = load_planned_model(plan, options.model_path.value_or(plan.model_file()));
  auto request = request_for(model, plan, options.seed);
  auto report = torch_plugin().verify(request);

  VerifyOutcome outcome;
  auto outputs = summarize(report.outputs), gradients = summarize(report.gradients);
  double max_rel = std::max(outputs.max_rel(), gradients.max_rel());
  outcome.passed = report.problems.empty() && !report.outputs.empty() && max_rel <= options.tolerance;

  std::ostringstream text;
  text << "verify     " << plan.path << ": " << plan.stages.size() << " stage(s), " << plan.batch.microbatches
       << " microbatch(es) of " << plan.batch.microbatch_size << " (" << report.samples
       << " samples; the model runs on chunks of " << report.reference_chunk << ")\n"
       << summary_line("outputs", outputs) << summary_line("gradients", gradients);
  if (!report.note.empty()) text << "note       " << report.note << "\n";
  if (model.format == ModelFormat::kOnnx) {
    text << "note       ONNX: the reference is the whole model through the same op mapping, so this checks the "
            "partition; the mapping itself is tested against PyTorch\n";
  }
  for (const auto& problem : report.problems) text << "problem    " << problem << "\n";
  char verdict[256];
  if (!report.problems.empty()) {
    std::snprintf(verdict, sizeof verdict, "FAIL: %zu problem(s)\n", report.problems.size());
  } else {
    std::snprintf(verdict, sizeof verdict, "%s: max relative difference %.3g %s tolerance %.3g\n",
                  outcome.passed ? "PASS" : "FAIL", max_rel, max_rel <= options.tolerance ? "within" : "beyond",
                  options.tolerance);
  }
  text << verdict;
  outcome.text = text.str();
  outcome.summary = {{"plan", plan.path},
                     {"passed", outcome.passed},
                     {"tolerance", options.tolerance},
                     {"samples", report.samples},
                     {"reference_chunk", report.reference_chunk},
                     {"outputs", summary_json(outputs)},
                     {"gradients", summary_json(gradients)},
                     {"problems", report.problems},
                     {"note", report.note}};
  return outcome;
}

namespace {

// The plan on a small workload that still exercises every cut: replica slices of two samples
// (BatchNorm needs more than one) in the widest stage, and two microbatches where the plan has
// several.
plan::Plan small_workload(const plan::Plan& plan, const Model& model) {
  plan::Plan small = plan;
  int slices = 1;
  for (const auto& stage : plan.stages) slices = std::lcm(slices, stage.replicas_per_pipeline);
  // An export with a fixed batch runs only at its microbatch.
  if (!model.fixed_batch) small.batch.microbatch_size = std::min(plan.batch.microbatch_size, 2 * slices);
  small.batch.microbatches = std::min(plan.batch.microbatches, 2);
  return small;
}

}  // namespace

StageCheck check_stage_files(const Model& model, const plan::Plan& plan, double tolerance) {
  auto small = small_workload(plan, model);
  auto request = request_for(model, small, /*seed=*/0);
  request.skip_random = true;
  request.gradient_floor = 1e-3;  // a check for gross errors: see partition.cpp
  auto report = torch_plugin().verify(request);
  StageCheck check;
  if (!report.skipped.empty()) {
    check.line = "not compared: " + report.skipped;
    check.summary = {{"compared", false}, {"reason", report.skipped}};
    return check;
  }
  // NaN in the unpartitioned model on made-up inputs (a made-up length of 0) allows no verdict.
  auto reference_not_finite = [](const TorchPlugin::Difference& d) { return d.reference_not_finite; };
  if (std::any_of(report.outputs.begin(), report.outputs.end(), reference_not_finite) ||
      std::any_of(report.gradients.begin(), report.gradients.end(), reference_not_finite)) {
    check.line = "not compared: the model itself gives NaN or infinity on made-up inputs, so the stage files are not checked";
    check.summary = {{"compared", false}, {"reason", check.line}};
    return check;
  }
  auto outputs = summarize(report.outputs), gradients = summarize(report.gradients);
  const auto* worst = outputs.max_rel() >= gradients.max_rel() ? outputs.worst : gradients.worst;
  double max_rel = std::max(outputs.max_rel(), gradients.max_rel());
  std::string advice = " (plan.json not written; --no-check writes it anyway)";
  if (!report.problems.empty()) {
    throw Error(ExitStatus::kBadInput, model.path + ": the stage files do not reproduce the model: " +
                                           report.problems.front() + advice);
  }
  if (report.outputs.empty() || max_rel > tolerance) {
    char what[256];
    std::snprintf(what, sizeof what, "%s differs by %.3g (relative; tolerance %.3g)",
                  worst ? worst->what.c_str() : "no output", max_rel, tolerance);
    throw Error(ExitStatus::kBadInput, model.path + ": the stage files do not reproduce the model: " + what + advice);
  }
  char line[256];
  std::snprintf(line, sizeof line, "stage files match the model: %zu outputs and %zu gradients within %.3g relative on %lld samples",
                outputs.compared, gradients.compared, max_rel, static_cast<long long>(report.samples));
  check.compared = true;
  check.line = line;
  check.summary = {{"compared", true}, {"samples", report.samples}, {"outputs", summary_json(outputs)},
                   {"gradients", summary_json(gradients)}};
  return check;
}

}  // namespace rannc
