#include "cost_model/profile_db.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>

#include "cost_model/device.h"
#include "support/atomic_file.h"
#include "support/error.h"
#include "support/input_file.h"

namespace rannc::cost {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "rannc-profile-db";
constexpr int kVersion = 1;

json to_json(const OpMeasurement& m) {
  json j = {{"kind", m.kind},           {"class", m.op_class},
            {"flops_fwd", m.flops_fwd}, {"bytes_fwd", m.bytes_fwd},
            {"flops_bwd", m.flops_bwd}, {"bytes_bwd", m.bytes_bwd},
            {"fwd_ms", m.fwd_ms},       {"bwd_ms", m.bwd_ms},
            {"fwd_peak_bytes", m.fwd_peak_bytes}, {"retained_bytes", m.retained_bytes},
            {"bwd_peak_bytes", m.bwd_peak_bytes}, {"reps", m.reps}};
  if (m.fwd_host_ms > 0 || m.bwd_host_ms > 0) {  // measured on a GPU
    j["fwd_host_ms"] = m.fwd_host_ms;
    j["bwd_host_ms"] = m.bwd_host_ms;
  }
  return j;
}

// A field of the DB with its path ("devices.cpu.ops['aten::linear(...)'].fwd_ms"), so that every
// problem names where it is. Numbers must be finite, non-negative and below a bound no real
// measurement reaches (sums of them must not overflow).
class Field {
 public:
  Field(const json& value, std::string path) : value_(value), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw std::invalid_argument(path_ + ": " + problem);
  }
  const json& raw() const { return value_; }
  const std::string& path() const { return path_; }

  Field operator[](const char* key) const {
    if (!value_.is_object()) fail("expected an object, found " + json_excerpt(value_));
    auto it = value_.find(key);
    if (it == value_.end()) throw std::invalid_argument(child(key) + ": missing");
    return Field(*it, child(key));
  }
  bool has(const char* key) const { return value_.is_object() && value_.contains(key); }
  // The members of an object, each with its key in the path.
  std::vector<std::pair<std::string, Field>> members() const {
    if (!value_.is_object()) fail("expected an object, found " + json_excerpt(value_));
    std::vector<std::pair<std::string, Field>> list;
    for (auto it = value_.begin(); it != value_.end(); ++it)
      list.emplace_back(it.key(), Field(*it, path_ + "['" + text_excerpt(it.key()) + "']"));
    return list;
  }
  std::string text() const {
    if (!value_.is_string()) fail("expected a string, found " + json_excerpt(value_));
    return value_.get<std::string>();
  }
  std::vector<std::string> texts() const {
    if (!value_.is_array()) fail("expected an array of strings, found " + json_excerpt(value_));
    std::vector<std::string> list;
    for (std::size_t i = 0; i < value_.size(); ++i) list.push_back(Field(value_[i], path_ + "[" + std::to_string(i) + "]").text());
    return list;
  }
  // A finite number in [0, max] (or (0, max] when `positive`).
  double amount(double max, bool positive = false) const {
    if (!value_.is_number()) fail("expected a number, found " + json_excerpt(value_));
    double x = value_.get<double>();
    if (!std::isfinite(x)) fail(json_excerpt(value_) + ": not a finite number");
    if (x < 0) fail(json_excerpt(value_) + ": must not be negative");
    if (positive && x == 0) fail("0: must be positive");
    if (x > max) fail(json_excerpt(value_) + ": more than " + json(max).dump());
    return x;
  }
  std::int64_t count(std::int64_t min, std::int64_t max) const {
    if (!value_.is_number_integer()) fail("expected an integer, found " + json_excerpt(value_));
    bool too_big = value_.is_number_unsigned() && value_.get<std::uint64_t>() > static_cast<std::uint64_t>(max);
    std::int64_t n = too_big ? max : value_.get<std::int64_t>();
    if (n < min) fail(json_excerpt(value_) + (min == 0 ? ": must not be negative" : ": must be at least " + std::to_string(min)));
    if (too_big || n > max) fail(json_excerpt(value_) + ": more than " + std::to_string(max));
    return n;
  }

 private:
  std::string child(const char* key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& value_;
  std::string path_;
};

constexpr double kMaxMs = 1e12;              // about 30 years
constexpr double kMaxWork = 1e30;            // FLOPs or bytes of one op
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 62;
constexpr std::int64_t kMaxCount = std::numeric_limits<int>::max();

OpMeasurement measurement_from_json(const Field& f) {
  OpMeasurement m;
  m.kind = f["kind"].text();
  m.op_class = f["class"].text();
  m.flops_fwd = f["flops_fwd"].amount(kMaxWork);
  m.bytes_fwd = f["bytes_fwd"].amount(kMaxWork);
  m.flops_bwd = f["flops_bwd"].amount(kMaxWork);
  m.bytes_bwd = f["bytes_bwd"].amount(kMaxWork);
  m.fwd_ms = f["fwd_ms"].amount(kMaxMs);
  m.bwd_ms = f["bwd_ms"].amount(kMaxMs);
  m.fwd_peak_bytes = f["fwd_peak_bytes"].count(0, kMaxBytes);
  m.retained_bytes = f["retained_bytes"].count(0, kMaxBytes);
  m.bwd_peak_bytes = f["bwd_peak_bytes"].count(0, kMaxBytes);
  m.reps = static_cast<int>(f["reps"].count(1, kMaxCount));
  if (f.has("fwd_host_ms")) m.fwd_host_ms = f["fwd_host_ms"].amount(kMaxMs);
  if (f.has("bwd_host_ms")) m.bwd_host_ms = f["bwd_host_ms"].amount(kMaxMs);
  return m;
}

DeviceProfile device_from_json(const Field& f) {
  DeviceProfile d;
  d.description = f["description"].text();
  d.peak_fp32_flops = f["peak_fp32_flops"].amount(1e21, /*positive=*/true);
  d.mem_bandwidth = f["mem_bandwidth"].amount(1e18, /*positive=*/true);
  d.op_overhead = f["op_overhead"].amount(10);  // seconds
  for (const auto& [signature, entry] : f["ops"].members()) d.ops[signature] = measurement_from_json(entry);
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

ModelProfile model_from_json(const Field& f) {
  ModelProfile m;
  m.path = f["path"].text();
  m.device = f["device"].text();
  for (const auto& [signature, count] : f["signatures"].members()) m.signatures[signature] = static_cast<int>(count.count(0, kMaxCount));
  m.unprofiled_kinds = f["unprofiled_kinds"].texts();
  m.unprofiled_signatures = static_cast<int>(f["unprofiled_signatures"].count(0, kMaxCount));
  m.ops = static_cast<int>(f["ops"].count(0, kMaxCount));
  m.fwd_ms = f["fwd_ms"].amount(kMaxMs);
  m.bwd_ms = f["bwd_ms"].amount(kMaxMs);
  m.peak_bytes = f["peak_bytes"].amount(static_cast<double>(kMaxBytes));
  return m;
}

json parse_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(path + ": is a folder, not a profile DB");
  std::string text = read_regular_file(path, kMaxJsonFileBytes, "a profile DB");
  check_json_depth(text, path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(path + ": profile DB is not valid JSON: " + clip(first_line(e.what())));
  } catch (const std::exception& e) {
    throw InputError(path + ": cannot read the profile DB: " + clip(first_line(e.what())));
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
    Field root(j, "");
    auto version = root["version"].count(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
    if (version != kVersion) {
      throw std::invalid_argument("version " + std::to_string(version) + " is not supported (expected 1)");
    }
    for (const auto& [name, device] : root["devices"].members()) db.devices_[name] = device_from_json(device);
    for (const auto& [key, model] : root["models"].members()) db.models_[key] = model_from_json(model);
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
  // Written as null, a NaN would make the DB unreadable: refuse it here instead.
  if (auto field = first_non_finite(j)) throw InputError(path + ": " + *field + " is not a finite number; the DB is left as it was");
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

const DeviceProfile* ProfileDb::device_for_preset(const std::string& preset) const {
  if (const DeviceProfile* same = device(preset)) return same;
  for (const auto& [name, profile] : devices_) {
    if (name != "cpu" && preset_for_device(name) == preset) return &profile;
  }
  return nullptr;
}

}  // namespace rannc::cost
