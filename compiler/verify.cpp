#include "compiler/verify.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "compiler/model.h"
#include "compiler/onnx_frontend.h"
#include "compiler/torch_plugin.h"
#include "emit/onnx_stage_source.h"
#include "emit/plan_file.h"
#include "emit/stage_layout.h"
#include "support/error.h"
#include "support/sha256.h"

namespace rannc {
namespace {

using Difference = TorchPlugin::Difference;

// The model the plan was made for: same bytes, loaded with the plan's example inputs.
Model load_planned_model(const emit::PlanFile& plan, const std::string& path) {
  if (!std::filesystem::exists(path)) {
    throw InputError(path + ": no such file (the plan's model; give --model MODEL if it moved)");
  }
  if (sha256_of_file(path) != plan.model_sha256) {
    throw InputError(path + ": sha256 differs from the one in " + plan.path +
                     " (the plan was made for another version of the model; partition it again)");
  }
  LoadOptions load;
  for (const auto& input : plan.model_inputs) {
    auto dtype = ir::parse_dtype(input.dtype);
    if (!dtype) throw InputError(plan.path + ": model input '" + input.name + "' has unknown dtype " + input.dtype);
    load.inputs.push_back({input.name, input.shape, *dtype});
  }
  load.batch = plan.evaluated_batch;
  return load_model(path, load);
}

TorchPlugin::VerifyRequest request_for(const Model& model, const emit::PlanFile& plan, std::uint64_t seed) {
  TorchPlugin::VerifyRequest request;
  request.model = &model;
  request.plan = &plan;
  request.seed = seed;
  if (model.format == ModelFormat::kOnnx) {
    // ONNX has no runtime here: the reference is the whole model as one generated stage.
    auto whole = emit::whole_model_layout(model.graph);
    const auto& proto = dynamic_cast<const OnnxModelSource&>(*model.source).proto();
    request.reference = emit::onnx_stage_source(model.path, proto, model.graph, whole);
    for (const auto& weight : whole.params) request.reference_names[weight.stage_name] = model.graph.value(weight.value).name;
  }
  return request;
}

const Difference* worst(const std::vector<Difference>& differences) {
  const Difference* worst = nullptr;
  for (const auto& d : differences)
    if (!worst || d.max_rel > worst->max_rel) worst = &d;
  return worst;
}

nlohmann::json differences_json(const std::vector<Difference>& differences) {
  nlohmann::json summary = {{"compared", differences.size()}};
  double max_abs = 0;
  for (const auto& d : differences) max_abs = std::max(max_abs, d.max_abs);
  summary["max_abs"] = max_abs;
  if (const auto* w = worst(differences)) {
    summary["max_rel"] = w->max_rel;
    summary["worst"] = w->what;
  }
  return summary;
}

std::string differences_line(const char* label, const std::vector<Difference>& differences) {
  char line[512];
  double max_abs = 0;
  for (const auto& d : differences) max_abs = std::max(max_abs, d.max_abs);
  const auto* w = worst(differences);
  std::snprintf(line, sizeof line, "%-10s %4zu compared   max abs %.3g   max rel %.3g%s%s\n", label, differences.size(),
                max_abs, w ? w->max_rel : 0.0, w ? "   worst: " : "", w ? w->what.c_str() : "");
  return line;
}

}  // namespace

VerifyOutcome run_verify(const VerifyOptions& options) {
  if (!(options.tolerance > 0)) throw InputError("--tolerance must be positive");
  auto plan = emit::read_plan_file(options.plan_path);
  emit::check_stage_files_exist(plan);
  Model model = load_planned_model(plan, options.model_path.value_or(plan.model_path));
  auto request = request_for(model, plan, options.seed);
  auto report = torch_plugin().verify(request);

  VerifyOutcome outcome;
  const auto* worst_output = worst(report.outputs);
  const auto* worst_gradient = worst(report.gradients);
  double max_rel = std::max(worst_output ? worst_output->max_rel : 0.0, worst_gradient ? worst_gradient->max_rel : 0.0);
  outcome.passed = report.problems.empty() && !report.outputs.empty() && max_rel <= options.tolerance;

  std::ostringstream text;
  text << "verify     " << plan.path << ": " << plan.stages.size() << " stage(s), " << plan.microbatches
       << " microbatch(es) of " << plan.microbatch_size << " (" << report.samples
       << " samples; the model runs on chunks of " << report.reference_chunk << ")\n"
       << differences_line("outputs", report.outputs) << differences_line("gradients", report.gradients);
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
                     {"outputs", differences_json(report.outputs)},
                     {"gradients", differences_json(report.gradients)},
                     {"problems", report.problems},
                     {"note", report.note}};
  return outcome;
}

}  // namespace rannc
