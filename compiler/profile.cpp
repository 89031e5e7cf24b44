#include "compiler/profile.h"

#include <chrono>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cost_model/device.h"
#include "cost_model/op_signature.h"
#include "cost_model/step_estimate.h"
#include "ir/requires_grad.h"
#include "support/error.h"
#include "support/format.h"
#include "support/sha256.h"

namespace rannc {
namespace {

constexpr int kCheckReps = 10;

// The file's content and everything that decides its shapes.
std::string model_key(const ProfileOptions& options) {
  std::string key = sha256_of_file(options.model_path);
  for (const auto& spec : options.load.inputs) key += " " + format_input_spec(spec);
  if (options.load.batch) key += " batch=" + std::to_string(*options.load.batch);
  return key;
}

bool fully_measured(const cost::ProfileDb& db, const cost::ModelProfile& model) {
  const cost::DeviceProfile* device = db.device(model.device);
  if (!device) return false;
  for (const auto& [signature, count] : model.signatures) {
    if (!device->ops.count(signature)) return false;
  }
  return true;
}

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled) {}
  void update(std::size_t done, std::size_t total) const {
    if (!enabled_) return;
    constexpr std::size_t kWidth = 30;
    std::size_t filled = total ? done * kWidth / total : kWidth;
    std::cerr << "\rprofiling [" << std::string(filled, '#') << std::string(kWidth - filled, '.') << "] " << done << "/"
              << total << " op signatures" << (done == total ? "\n" : "") << std::flush;
  }

 private:
  bool enabled_;
};

// Ops with a cost, grouped by signature; the first op of each group stands for all.
std::map<std::string, std::vector<ir::OpId>> ops_by_signature(const ir::Graph& graph,
                                                              const std::vector<bool>& requires_grad) {
  std::map<std::string, std::vector<ir::OpId>> groups;
  for (const auto& op : graph.ops()) {
    if (cost::classify(graph, op) == cost::OpClass::kGlue) continue;
    groups[cost::op_signature(graph, op, requires_grad)].push_back(op.id);
  }
  return groups;
}

// A timed signature into the DB, with its analytic work for calibration.
void add_measurement(cost::DeviceProfile& device, const std::string& signature, cost::OpMeasurement m,
                     const std::string& kind, const cost::OpWork& work, ProfileReport& report) {
  m.kind = kind;
  m.op_class = std::string(cost::op_class_name(work.op_class));
  m.flops_fwd = work.flops_fwd;
  m.bytes_fwd = work.bytes_fwd;
  m.flops_bwd = work.flops_bwd;
  m.bytes_bwd = work.bytes_bwd;
  device.ops[signature] = m;
  ++report.timed;
}

// Times the signatures the DB lacks and adds them.
void measure_missing(const Model& model, const std::map<std::string, std::vector<ir::OpId>>& groups,
                     const std::vector<bool>& requires_grad, const ProfileOptions& options, cost::DeviceProfile& device,
                     ProfileReport& report) {
  std::vector<std::string> missing;
  std::vector<ir::OpId> representatives;
  for (const auto& [signature, ops] : groups) {
    if (device.ops.count(signature)) continue;
    missing.push_back(signature);
    representatives.push_back(ops.front());
  }
  ProgressBar bar(options.progress && !representatives.empty());
  auto results = torch_plugin().profile_ops(model, representatives, requires_grad, options.reps,
                                            [&](std::size_t done, std::size_t total) { bar.update(done, total); });
  std::set<std::string> unprofiled;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const ir::Op& op = model.graph.op(representatives[i]);
    if (!results[i]) {
      unprofiled.insert(op.kind);
      continue;
    }
    add_measurement(device, missing[i], *results[i], op.kind, cost::op_work(model.graph, op, requires_grad), report);
  }
  report.unprofiled_kinds.assign(unprofiled.begin(), unprofiled.end());
}

// rannc-run's training loss, measured like an op when the DB lacks it: its signature, or "".
std::string measure_loss(const Model& model, const std::vector<bool>& requires_grad, const ProfileOptions& options,
                         cost::DeviceProfile& device, ProfileReport& report) {
  ir::ValueId input = cost::loss_input(model.graph, requires_grad);
  if (input == ir::kNoId) return "";
  const ir::Value& value = model.graph.value(input);
  std::string signature = cost::loss_signature(value);
  if (device.ops.count(signature)) return signature;
  const std::string kind = "rannc::training_loss";
  auto measured = torch_plugin().profile_loss(value.type.shape, options.reps);
  if (!measured) {
    report.unprofiled_kinds.push_back(kind);
    return "";
  }
  add_measurement(device, signature, *measured, kind, cost::loss_work(value), report);
  return signature;
}

cost::ModelProfile profile_loaded_model(const Model& model, const ProfileOptions& options, cost::ProfileDb& db,
                                        ProfileReport& report) {
  if (model.format != ModelFormat::kTorchScript) {
    throw InputError(model.path + ": profile needs a TorchScript model (.pt); its measurements also calibrate "
                     "the costs of ONNX models");
  }
  // The profiler runs on this machine's GPU, else its CPU; the DB keys it by the device's name.
  const std::string device_name = torch_plugin().profiled_device();
  cost::DeviceProfile& device = db.device_for_update(device_name);
  if (device.peak_fp32_flops <= 0) {
    auto ops = std::move(device.ops);
    device = torch_plugin().measure_device();
    device.ops = std::move(ops);
  }
  auto requires_grad = ir::values_requiring_grad(model.graph);
  auto groups = ops_by_signature(model.graph, requires_grad);
  measure_missing(model, groups, requires_grad, options, device, report);
  std::string loss = measure_loss(model, requires_grad, options, device, report);

  // The preset the device's measurements calibrate (cost::preset_for_device).
  const cost::DeviceSpec* preset = cost::find_device_preset(cost::preset_for_device(device_name));
  auto estimate = cost::estimate_step(model.graph, *preset, plan::Precision::kFp32, plan::Optimizer::kSgd, &db);
  cost::ModelProfile profile;
  profile.path = model.path;
  profile.device = device_name;
  for (const auto& [signature, ops] : groups) {
    profile.ops += static_cast<int>(ops.size());
    if (device.ops.count(signature)) profile.signatures[signature] = static_cast<int>(ops.size());
  }
  report.passes = estimate.passes;
  profile.fwd_ms = estimate.fwd_ms;
  profile.bwd_ms = estimate.bwd_ms;
  profile.peak_bytes = estimate.memory.total();
  profile.unprofiled_kinds = report.unprofiled_kinds;
  profile.unprofiled_signatures = static_cast<int>(groups.size() - profile.signatures.size());
  if (!loss.empty()) profile.signatures[loss] = 1;  // so that a second run finds it measured
  return profile;
}

}  // namespace

ProfileReport run_profile(const ProfileOptions& options) {
  auto start = std::chrono::steady_clock::now();
  ProfileReport report;
  report.model_path = options.model_path;
  cost::ProfileDb db = options.db_path.empty() ? cost::ProfileDb{} : cost::ProfileDb::load(options.db_path);
  std::string key = model_key(options);
  const cost::ModelProfile* known = db.model(key);
  std::optional<Model> model;
  if (!known || !fully_measured(db, *known) || options.check) {
    model = load_model(options.model_path, options.load);
    db.set_model(key, profile_loaded_model(*model, options, db, report));
    if (!options.db_path.empty()) db.save(options.db_path);
    report.model_loaded = true;
  }
  const cost::ModelProfile& profile = *db.model(key);
  report.signatures = static_cast<int>(profile.signatures.size()) + profile.unprofiled_signatures;
  report.unprofiled_signatures = profile.unprofiled_signatures;
  report.unprofiled_kinds = profile.unprofiled_kinds;
  report.device = profile.device;
  report.device_description = db.device(profile.device)->description;
  report.ops = profile.ops;
  report.fwd_ms = profile.fwd_ms;
  report.bwd_ms = profile.bwd_ms;
  report.peak_bytes = profile.peak_bytes;
  if (options.check) report.measured = torch_plugin().measure_training_step(*model, kCheckReps);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

nlohmann::json profile_report_json(const ProfileReport& r) {
  nlohmann::json j = {{"model", r.model_path},
                      {"device", r.device},
                      {"device_description", r.device_description},
                      {"model_loaded", r.model_loaded},
                      {"ops", r.ops},
                      {"signatures", r.signatures},
                      {"timed", r.timed},
                      {"unprofiled_kinds", r.unprofiled_kinds},
                      {"unprofiled_signatures", r.unprofiled_signatures},
                      {"predicted", {{"fwd_ms", r.fwd_ms}, {"bwd_ms", r.bwd_ms}, {"step_ms", r.fwd_ms + r.bwd_ms},
                                     {"peak_bytes", r.peak_bytes}}},
                      {"seconds", r.seconds}};
  // Beside a measured step, the sums its prediction is the longer of: a host-bound step shows.
  if (r.passes && r.measured) {
    j["predicted"]["host_ms"] = {{"fwd", r.passes->fwd.host_ms}, {"bwd", r.passes->bwd.host_ms}};
    j["predicted"]["device_ms"] = {{"fwd", r.passes->fwd.device_ms}, {"bwd", r.passes->bwd.device_ms}};
  }
  if (r.measured) {
    j["measured"] = {{"step_ms", r.measured->step_ms},
                     {"host_ms", r.measured->host_ms},
                     {"peak_bytes", r.measured->peak_bytes},
                     {"reps", r.measured->reps}};
  }
  return j;
}

std::string profile_report_text(const ProfileReport& r) {
  std::ostringstream out;
  out << "model        " << r.model_path << "\n"
      << "device       " << r.device << " (" << r.device_description << ")\n"
      << "ops          " << r.ops << " in " << r.signatures << " signatures: " << r.timed << " timed now, "
      << r.signatures - r.timed - r.unprofiled_signatures << " from the profile DB\n";
  if (!r.unprofiled_kinds.empty()) {
    out << "not profiled " << r.unprofiled_signatures << " signatures of ";
    for (const auto& kind : r.unprofiled_kinds) out << kind << " ";
    out << "(cannot run alone; costed by the roofline)\n";
  }
  double step = r.fwd_ms + r.bwd_ms;
  out << "predicted    step " << human_ms(step) << " (forward " << human_ms(r.fwd_ms) << ", backward "
      << human_ms(r.bwd_ms) << "), peak memory " << human_bytes(r.peak_bytes) << "\n";
  if (r.measured) {
    char line[160];
    std::snprintf(line, sizeof line, "measured     step %s, peak memory %s: predicted/measured %.2f (time), %.2f (memory)\n",
                  human_ms(r.measured->step_ms).c_str(), human_bytes(static_cast<double>(r.measured->peak_bytes)).c_str(),
                  step / r.measured->step_ms, r.peak_bytes / static_cast<double>(r.measured->peak_bytes));
    out << line;
  }
  return out.str();
}

}  // namespace rannc
