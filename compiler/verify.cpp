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
#include "support/format.h"
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
  // A model with no TorchScript module of its own: the reference is the whole model as one generated stage.
  auto whole = emit::whole_model_layout(model.graph);
  if (auto source = model.source->stage_source(model, whole)) {
    request.reference = std::move(*source);
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

// The model in float32 against float64 (TorchPlugin::Float64Check), measured as verify measures
// (each gradient against at least a fraction of the largest): float32's rounding reaches 3.5e-3
// on the corpus (Conformer's bias before BatchNorm, 0 in exact arithmetic; BatchNorm over
// 2-sample slices in EfficientNet 7e-4), 1.8e-6 on the samples but ResNet-50, whose untrained
// BatchNorm layers add up to 0.4 (no single op: Float64Verdict::fails); libtorch 1.13's
// gelu_backward fault and a cancellation are 0.2 and beyond. A looser tolerance of the check
// itself applies too.
constexpr double kFloat32Rounding = 1e-2;

double float64_tolerance(double tolerance) { return std::max(tolerance, kFloat32Rounding); }

std::int64_t float64_weight_bytes(const ir::Graph& graph) {
  std::int64_t bytes = 0;
  for (const auto& value : graph.values())
    if (value.is_weight() && value.is_tensor()) bytes += value.type.bytes() * (value.type.dtype == ir::DType::kFloat32 ? 2 : 1);
  return bytes;
}

// Why the model is not run in float64: its weights beyond `limit` (set by `option`) in float64.
std::string float64_off(const Model& model, std::int64_t limit, const std::string& option) {
  auto bytes = float64_weight_bytes(model.graph);
  if (bytes <= limit) return "";
  return "its weights take " + human_bytes(static_cast<double>(bytes)) + " in float64, beyond " + option + " " +
         human_bytes(static_cast<double>(limit));
}

// The tensor ranks' files (TorchPlugin::TensorRankCheck) summed up: against the model, and what
// each rank computes whole against rank 0's.
struct RankFiles {
  const TorchPlugin::TensorRankCheck& check;
  Summary outputs = summarize(check.outputs), gradients = summarize(check.gradients),
          across_ranks = summarize(check.across_ranks);
  const Difference* worst() const {
    const Difference* worst = nullptr;
    for (const auto* summary : {&outputs, &gradients, &across_ranks})
      if (summary->worst && (!worst || summary->max_rel() > worst->max_rel)) worst = summary->worst;
    return worst;
  }
  double max_rel() const { return worst() ? worst()->max_rel : 0.0; }
};

// "tensor     rank files of 2 tensor ranks chained too: 1 outputs max rel 0, 52 gradients max
// rel 9.19e-08, 27 across ranks max rel 0   worst: gradient w (rank files)", or why they were not.
std::string rank_files_line(const RankFiles& ranks) {
  if (ranks.check.degree == 0) return "tensor     rank files not chained: " + ranks.check.not_chained + "\n";
  char line[512];
  std::snprintf(line, sizeof line,
                "tensor     rank files of %d tensor ranks chained too: %zu outputs max rel %.3g, %zu gradients max rel "
                "%.3g, %zu across ranks max rel %.3g%s%s\n",
                ranks.check.degree, ranks.outputs.compared, ranks.outputs.max_rel(), ranks.gradients.compared,
                ranks.gradients.max_rel(), ranks.across_ranks.compared, ranks.across_ranks.max_rel(),
                ranks.worst() ? "   worst: " : "", ranks.worst() ? ranks.worst()->what.c_str() : "");
  return line;
}

// The same for partition's check line: ", the files of 2 tensor ranks too (within 1.2e-07)".
std::string rank_files_text(const RankFiles& ranks) {
  if (ranks.check.degree == 0)
    return ranks.check.not_chained.empty() ? "" : ", the tensor ranks' files not (" + ranks.check.not_chained + ")";
  char text[128];
  std::snprintf(text, sizeof text, ", the files of %d tensor ranks too (within %.3g)", ranks.check.degree, ranks.max_rel());
  return text;
}

nlohmann::json rank_files_json(const RankFiles& ranks) {
  if (ranks.check.degree == 0) return {{"chained", false}, {"reason", ranks.check.not_chained}};
  return {{"chained", true},
          {"degree", ranks.check.degree},
          {"outputs", summary_json(ranks.outputs)},
          {"gradients", summary_json(ranks.gradients)},
          {"across_ranks", summary_json(ranks.across_ranks)}};
}

// Whether the plan has rank files to report on: chained, or why not.
bool has_rank_files(const TorchPlugin::TensorRankCheck& check) {
  return check.degree > 0 || !check.not_chained.empty();
}

struct Float64Verdict {
  const TorchPlugin::Float64Check& check;
  double tolerance;
  Summary outputs = summarize(check.outputs), gradients = summarize(check.gradients);
  const Difference* worst() const { return outputs.max_rel() >= gradients.max_rel() ? outputs.worst : gradients.worst; }
  double max_rel() const { return std::max(outputs.max_rel(), gradients.max_rel()); }
  bool differs() const { return check.ran && max_rel() > tolerance; }
  // The reference wrong at an op (a kernel, a cancellation), or where no op could be looked for:
  // stages that match it prove nothing. Built up over many ops, it is how the model rounds in
  // float32 at these inputs and weights (an untrained ResNet-50's BatchNorm): said, not failed.
  bool fails() const { return differs() && !check.builds_up; }
};

// "float64: the model in float32 is within 2.1e-06 (tolerance 0.01; worst: gradient w)".
std::string reference_text(const Float64Verdict& verdict) {
  if (!verdict.check.ran) return "float32 only (no float64 run: " + verdict.check.not_run + ")";
  char text[512];
  std::snprintf(text, sizeof text, "float64: the model in float32 %s %.3g (tolerance %.3g; worst: %s)",
                verdict.differs() ? "differs from it by" : "is within", verdict.max_rel(), verdict.tolerance,
                verdict.worst() ? verdict.worst()->what.c_str() : "nothing compared");
  return text;
}

// "model: float32 gradients differ from float64 by 0.52 (gradient w) from op 4 'aten::linear' ->
// 'h.3' (its backward) at model.py:12", when they differ.
std::string departure_text(const Float64Verdict& verdict) {
  bool outputs = verdict.outputs.max_rel() > verdict.tolerance, gradients = verdict.gradients.max_rel() > verdict.tolerance;
  char text[512];
  std::snprintf(text, sizeof text, "model: float32 %s differ from float64 by %.3g (%s)",
                outputs && gradients ? "outputs and gradients" : outputs ? "outputs" : "gradients", verdict.max_rel(),
                verdict.worst()->what.c_str());
  const auto& departure = verdict.check.departure;
  if (verdict.check.builds_up) {
    return text + std::string(", built up over many ops (") + verdict.check.not_located +
           "): the model is ill-conditioned in float32 at these inputs";
  }
  if (!departure) return text + std::string("; no op is named: ") + verdict.check.not_located;
  std::string op = departure->op >= 0 ? "op " + std::to_string(departure->op) + " " : "op ";
  return text + (" from " + op + "'" + departure->kind + "' -> '" + departure->value + "'") +
         (departure->in_backward ? " (its backward)" : "") + (departure->location.empty() ? "" : " at " + departure->location);
}

// The same for partition's check line: "float64 reference within 2.1e-06", or a warning.
std::string check_reference_text(const Float64Verdict& verdict) {
  if (!verdict.check.ran) return "float32 reference only (" + verdict.check.not_run + ")";
  if (verdict.differs()) return "warning: " + departure_text(verdict);
  char text[64];
  std::snprintf(text, sizeof text, "float64 reference within %.3g", verdict.max_rel());
  return text;
}

nlohmann::json reference_json(const Float64Verdict& verdict) {
  if (!verdict.check.ran) return {{"dtype", "float32"}, {"reason", verdict.check.not_run}};
  nlohmann::json json = {{"dtype", "float64"},
                         {"tolerance", verdict.tolerance},
                         {"outputs", summary_json(verdict.outputs)},
                         {"gradients", summary_json(verdict.gradients)},
                         {"differs", verdict.differs()},
                         {"fails", verdict.fails()}};
  if (!verdict.differs()) return json;
  json["message"] = departure_text(verdict);
  if (const auto& d = verdict.check.departure) {
    json["departure"] = {{"op", d->op},           {"kind", d->kind},       {"value", d->value},
                         {"in_backward", d->in_backward}, {"max_rel", d->max_rel}, {"location", d->location}};
  } else {
    json["not_located"] = verdict.check.not_located;
    json["builds_up"] = verdict.check.builds_up;
  }
  return json;
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
  request.float64_off = float64_off(model, options.float64_limit_bytes, "--float64-limit");
  request.float64_tolerance = float64_tolerance(options.tolerance);
  auto report = torch_plugin().verify(request);
  // The reference itself wrong (Float64Verdict::fails): stages that match it prove nothing.
  Float64Verdict float64{report.float64, request.float64_tolerance};
  if (float64.fails()) report.problems.push_back(departure_text(float64));

  VerifyOutcome outcome;
  auto outputs = summarize(report.outputs), gradients = summarize(report.gradients);
  RankFiles ranks{report.tensor_ranks};
  double max_rel = std::max({outputs.max_rel(), gradients.max_rel(), ranks.max_rel()});
  outcome.passed = report.problems.empty() && !report.outputs.empty() && max_rel <= options.tolerance;

  std::ostringstream text;
  text << "verify     " << plan.path << ": " << plan.stages.size() << " stage(s), " << plan.batch.microbatches
       << " microbatch(es) of " << plan.batch.microbatch_size << " (" << report.samples
       << " samples; the model runs on chunks of " << report.reference_chunk << ")\n"
       << summary_line("outputs", outputs) << summary_line("gradients", gradients);
  if (has_rank_files(report.tensor_ranks)) text << rank_files_line(ranks);
  text << "reference  " << reference_text(float64) << "\n";
  if (!report.note.empty()) text << "note       " << report.note << "\n";
  if (float64.differs() && !float64.fails()) text << "warning    " << departure_text(float64) << "\n";
  if (auto note = model.source->reference_note(); !note.empty()) text << "note       " << note << "\n";
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
                     {"note", report.note},
                     {"reference", reference_json(float64)}};
  if (has_rank_files(report.tensor_ranks)) outcome.summary["tensor_ranks"] = rank_files_json(ranks);
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
  // An export with a fixed batch runs only at its microbatch; unequal shares of a mixed cluster's
  // stage (replica_samples) keep theirs.
  const bool shares = std::any_of(plan.stages.begin(), plan.stages.end(), [](const plan::Stage& s) { return !s.replica_samples.empty(); });
  if (!model.fixed_batch && !shares) small.batch.microbatch_size = std::min(plan.batch.microbatch_size, 2 * slices);
  small.batch.microbatches = std::min(plan.batch.microbatches, 2);
  return small;
}

}  // namespace

StageCheck check_stage_files(const Model& model, const plan::Plan& plan, double tolerance,
                             std::int64_t float64_limit_bytes) {
  auto small = small_workload(plan, model);
  auto request = request_for(model, small, /*seed=*/0);
  request.skip_random = true;
  request.gradient_floor = 1e-3;  // a check for gross errors: see partition.cpp
  request.float64_off = float64_off(model, float64_limit_bytes, "--check-limit");
  request.float64_tolerance = float64_tolerance(tolerance);
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
  RankFiles ranks{report.tensor_ranks};
  const auto* worst = outputs.max_rel() >= gradients.max_rel() ? outputs.worst : gradients.worst;
  if (ranks.max_rel() > std::max(outputs.max_rel(), gradients.max_rel())) worst = ranks.worst();
  double max_rel = std::max({outputs.max_rel(), gradients.max_rel(), ranks.max_rel()});
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
                outputs.compared, gradients.compared, std::max(outputs.max_rel(), gradients.max_rel()),
                static_cast<long long>(report.samples));
  Float64Verdict float64{report.float64, request.float64_tolerance};
  check.compared = true;
  check.line = line + rank_files_text(ranks) + "; " + check_reference_text(float64);
  check.summary = {{"compared", true}, {"samples", report.samples}, {"outputs", summary_json(outputs)},
                   {"gradients", summary_json(gradients)}, {"reference", reference_json(float64)}};
  if (has_rank_files(report.tensor_ranks)) check.summary["tensor_ranks"] = rank_files_json(ranks);
  return check;
}

}  // namespace rannc
