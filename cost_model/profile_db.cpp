#include "cost_model/profile_db.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "support/atomic_file.h"
#include "support/error.h"

namespace rannc::cost {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "rannc-profile-db";
constexpr int kVersion = 1;

json to_json(const OpMeasurement& m) {
  return {{"kind", m.kind},           {"class", m.op_class},
          {"flops_fwd", m.flops_fwd}, {"bytes_fwd", m.bytes_fwd},
          {"flops_bwd", m.flops_bwd}, {"bytes_bwd", m.bytes_bwd},
          {"fwd_ms", m.fwd_ms},       {"bwd_ms", m.bwd_ms},
          {"fwd_peak_bytes", m.fwd_peak_bytes}, {"retained_bytes", m.retained_bytes},
          {"bwd_peak_bytes", m.bwd_peak_bytes}, {"reps", m.reps}};
}

OpMeasurement measurement_from_json(const json& j) {
  OpMeasurement m;
  m.kind = j.at("kind").get<std::string>();
  m.op_class = j.at("class").get<std::string>();
  m.flops_fwd = j.at("flops_fwd").get<double>();
  m.bytes_fwd = j.at("bytes_fwd").get<double>();
  m.flops_bwd = j.at("flops_bwd").get<double>();
  m.bytes_bwd = j.at("bytes_bwd").get<double>();
  m.fwd_ms = j.at("fwd_ms").get<double>();
  m.bwd_ms = j.at("bwd_ms").get<double>();
  m.fwd_peak_bytes = j.at("fwd_peak_bytes").get<std::int64_t>();
  m.retained_bytes = j.at("retained_bytes").get<std::int64_t>();
  m.bwd_peak_bytes = j.at("bwd_peak_bytes").get<std::int64_t>();
  m.reps = j.at("reps").get<int>();
  for (double v : {m.flops_fwd, m.bytes_fwd, m.flops_bwd, m.bytes_bwd, m.fwd_ms, m.bwd_ms}) {
    if (!std::isfinite(v) || v < 0) throw std::invalid_argument("a negative or non-finite number");
  }
  if (m.reps < 1) throw std::invalid_argument("no repetitions");
  return m;
}

DeviceProfile device_from_json(const json& j) {
  DeviceProfile d;
  d.description = j.at("description").get<std::string>();
  d.peak_fp32_flops = j.at("peak_fp32_flops").get<double>();
  d.mem_bandwidth = j.at("mem_bandwidth").get<double>();
  d.op_overhead = j.at("op_overhead").get<double>();
  if (d.peak_fp32_flops <= 0 || d.mem_bandwidth <= 0 || d.op_overhead < 0) {
    throw std::invalid_argument("device peaks must be positive");
  }
  for (const auto& [signature, entry] : j.at("ops").items()) {
    try {
      d.ops[signature] = measurement_from_json(entry);
    } catch (const std::exception& e) {
      throw std::invalid_argument("op '" + signature.substr(0, 80) + "': " + e.what());
    }
  }
  return d;
}

json device_to_json(const DeviceProfile& d) {
  json ops = json::object();
  for (const auto& [signature, m] : d.ops) ops[signature] = to_json(m);
  return {{"description", d.description},
          {"peak_fp32_flops", d.peak_fp32_flops},
          {"mem_bandwidth", d.mem_bandwidth},
          {"op_overhead", d.op_overhead},
          {"ops", ops}};
}

json model_to_json(const ModelProfile& m) {
  json signatures = json::object();
  for (const auto& [signature, count] : m.signatures) signatures[signature] = count;
  return {{"path", m.path},
          {"device", m.device},
          {"signatures", signatures},
          {"unprofiled_kinds", m.unprofiled_kinds},
          {"unprofiled_signatures", m.unprofiled_signatures},
          {"ops", m.ops},
          {"fwd_ms", m.fwd_ms}, {"bwd_ms", m.bwd_ms}, {"peak_bytes", m.peak_bytes}};
}

ModelProfile model_from_json(const json& j) {
  ModelProfile m;
  m.path = j.at("path").get<std::string>();
  m.device = j.at("device").get<std::string>();
  for (const auto& [signature, count] : j.at("signatures").items()) m.signatures[signature] = count.get<int>();
  m.unprofiled_kinds = j.at("unprofiled_kinds").get<std::vector<std::string>>();
  m.unprofiled_signatures = j.at("unprofiled_signatures").get<int>();
  m.ops = j.at("ops").get<int>();
  m.fwd_ms = j.at("fwd_ms").get<double>();
  m.bwd_ms = j.at("bwd_ms").get<double>();
  m.peak_bytes = j.at("peak_bytes").get<double>();
  return m;
}

json parse_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a folder, not a profile DB");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot read the profile DB");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    throw InputError(path + ": profile DB is not valid JSON: " + first_line(e.what()));
  } catch (const std::exception& e) {
    throw InputError(path + ": cannot read the profile DB: " + first_line(e.what()));
  }
}

}  // namespace

ProfileDb ProfileDb::load(const std::string& path, bool must_exist) {
  ProfileDb db;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (must_exist) throw InputError(path + ": no such profile DB");
    return db;
  }
  json j = parse_file(path);
  try {
    if (!j.is_object() || j.value("format", "") != kFormat) throw std::invalid_argument("not a rannc-profile-db file");
    if (j.at("version").get<int>() != kVersion) {
      throw std::invalid_argument("version " + j.at("version").dump() + " is not supported (expected 1)");
    }
    for (const auto& [name, device] : j.at("devices").items()) {
      try {
        db.devices_[name] = device_from_json(device);
      } catch (const std::exception& e) {
        throw std::invalid_argument("device '" + name + "': " + first_line(e.what()));
      }
    }
    for (const auto& [key, model] : j.at("models").items()) {
      try {
        db.models_[key] = model_from_json(model);
      } catch (const std::exception& e) {
        throw std::invalid_argument("model '" + key.substr(0, 80) + "': " + first_line(e.what()));
      }
    }
  } catch (const std::exception& e) {
    throw InputError(path + ": corrupt profile DB: " + first_line(e.what()));
  }
  return db;
}

void ProfileDb::save(const std::string& path) const {
  json devices = json::object();
  for (const auto& [name, device] : devices_) devices[name] = device_to_json(device);
  json models = json::object();
  for (const auto& [key, model] : models_) models[key] = model_to_json(model);
  json j = {{"format", kFormat}, {"version", kVersion}, {"devices", devices}, {"models", models}};
  write_file_atomically(path, j.dump(1, ' ', false, json::error_handler_t::replace) + "\n", "the profile DB");
}

const ModelProfile* ProfileDb::model(const std::string& key) const {
  auto it = models_.find(key);
  return it == models_.end() ? nullptr : &it->second;
}

const DeviceProfile* ProfileDb::device(const std::string& name) const {
  auto it = devices_.find(name);
  return it == devices_.end() ? nullptr : &it->second;
}

}  // namespace rannc::cost
