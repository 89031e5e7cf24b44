// The cluster from CLI flags or a JSON file; the JSON form is described in cluster.h and
// docs/user-guide.md. Unknown fields are errors so that typos cannot pass.
#include "cost_model/cluster.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <vector>

#include "support/error.h"
#include "support/format.h"
#include "support/input_file.h"

namespace rannc::cost {
namespace {

using nlohmann::json;

constexpr double kGiga = 1e9;
constexpr double kTera = 1e12;
constexpr double kMicro = 1e-6;
constexpr double kMaxSizeBytes = 4611686018427387904.0;  // 2^62: far beyond any device, well inside int64

[[noreturn]] void fail(const std::string& message) { throw InputError(message); }

// `text` with control characters escaped (JSON style) and cut short, so that an error message
// stays one short line.
std::string one_line(const std::string& text) { return text_excerpt(text); }

// The figures a description may give, wide enough for any real machine, narrow enough that no
// predicted time or size overflows (a latency of 1e308 us would make every time infinite).
struct Range {
  double min, max;  // min applies to positive figures; zero passes where allowed
};
constexpr Range kBandwidthGbps{1e-6, 1e6};  // 1 kB/s .. 1 PB/s
constexpr Range kLatencyUs{0, 1e7};         // up to 10 s
constexpr Range kTflops{1e-6, 1e6};         // 1 MFLOP/s .. 1 EFLOP/s
constexpr Range kOverheadUs{0, 1e7};        // up to 10 s

std::string figure(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", x);
  return text;
}

// Bytes per unit of a size suffix ("", "B", "K", "KiB", "KB", ... in any case), or 0 if unknown.
double unit_bytes(std::string_view unit) {
  std::string upper(unit);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (upper == "B") return 1;
  auto power = std::string_view("KMGT").find(upper[0]);
  if (power == std::string_view::npos) return 0;
  std::string rest = upper.substr(1);
  if (rest.empty() || rest == "IB") return std::pow(1024.0, power + 1);  // G and GiB are binary
  if (rest == "B") return std::pow(1000.0, power + 1);                    // GB is decimal
  return 0;
}

// Length of the leading unsigned decimal number ("12", "1.5", ".5"), 0 if there is none.
std::size_t number_length(std::string_view text) {
  auto digits_from = [&](std::size_t i) {
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    return i;
  };
  std::size_t end = digits_from(0);
  bool has_digits = end > 0;
  if (end < text.size() && text[end] == '.') {
    std::size_t frac_end = digits_from(end + 1);
    has_digits = has_digits || frac_end > end + 1;
    end = frac_end;
  }
  return has_digits ? end : 0;
}

std::int64_t checked_mem(std::int64_t bytes, const std::string& what) {
  if (bytes > kMaxMemBytes) fail(what + ": more than 1 PiB");
  return bytes;
}

const DeviceSpec& preset_or_fail(const std::string& name, const std::string& what) {
  if (const DeviceSpec* spec = find_device_preset(name)) return *spec;
  fail(what + " " + one_line(name) + ": unknown device preset (known: " + join(device_preset_names()) + ")");
}

// A count of nodes or devices: 1 .. kMaxDevices.
void check_count(std::int64_t value, const std::string& what) {
  if (value < 1) fail(what + ": must be at least 1");
  if (value > kMaxDevices) fail(what + ": must be at most " + std::to_string(kMaxDevices));
}

// The fields of one JSON object, with errors that name the file and the dotted field path.
class Fields {
 public:
  Fields(const json& object, const std::string& source, std::string path, std::initializer_list<const char*> known)
      : object_(object), source_(source), path_(std::move(path)) {
    if (!object.is_object()) {
      fail(path_.empty() ? source_ + ": must be a JSON object" : label("") + ": must be an object");
    }
    for (const auto& item : object.items()) {
      if (std::none_of(known.begin(), known.end(), [&](const char* k) { return item.key() == k; })) {
        std::vector<std::string> names(known.begin(), known.end());
        std::sort(names.begin(), names.end());
        fail(source_ + ": unknown field '" + one_line(qualified(item.key())) + "' (known: " + join(names) + ")");
      }
    }
  }

  // "FILE: field 'device.mem'"; an empty name labels the object itself.
  std::string label(const std::string& name) const { return source_ + ": field '" + qualified(name) + "'"; }

  const json* find(const std::string& name) const {
    auto it = object_.find(name);
    return it == object_.end() ? nullptr : &*it;
  }

  const json& need(const std::string& name) const {
    if (const json* value = find(name)) return *value;
    fail(source_ + ": missing field '" + qualified(name) + "'");
  }

  int count(const std::string& name) const {
    const json& value = need(name);
    bool positive = value.is_number_unsigned() ? value.get<std::uint64_t>() > 0
                                               : value.is_number_integer() && value.get<std::int64_t>() > 0;
    if (!positive) fail(label(name) + ": must be a positive integer");
    if (value.get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxDevices)) {
      fail(label(name) + ": must be at most " + std::to_string(kMaxDevices));
    }
    return value.get<int>();
  }

  // A finite number in `range`, > 0 or, with allow_zero, >= 0; `fallback` when absent and given.
  double number(const std::string& name, Range range, bool allow_zero = false, std::optional<double> fallback = {}) const {
    const json* value = fallback ? find(name) : &need(name);
    if (!value) return *fallback;
    double x = value->is_number() ? value->get<double>() : -1;
    if (!std::isfinite(x) || x < 0 || (x == 0 && !allow_zero)) {
      fail(label(name) + (allow_zero ? ": must be a non-negative number" : ": must be a positive number"));
    }
    if (x > range.max) fail(label(name) + ": " + figure(x) + " is more than " + figure(range.max));
    if (x != 0 && x < range.min) fail(label(name) + ": " + figure(x) + " is less than " + figure(range.min));
    return x;
  }

  std::string name_string(const std::string& name) const {
    const json& value = need(name);
    if (!value.is_string() || value.get<std::string>().empty()) fail(label(name) + ": must be a non-empty string");
    return value.get<std::string>();
  }

  bool flag(const std::string& name, bool fallback) const {
    const json* value = find(name);
    if (!value) return fallback;
    if (!value->is_boolean()) fail(label(name) + ": must be true or false");
    return value->get<bool>();
  }

  // Memory per device: a size string as for --mem, or a byte count.
  std::int64_t mem(const std::string& name) const {
    const json& value = need(name);
    std::int64_t bytes = 0;
    if (value.is_string()) {
      bytes = parse_size(value.get<std::string>(), label(name));
    } else if (value.is_number_unsigned() && value.get<std::uint64_t>() > 0) {
      bytes = static_cast<std::int64_t>(std::min<std::uint64_t>(value.get<std::uint64_t>(), kMaxMemBytes + 1));
    } else {
      fail(label(name) + ": must be a size such as \"80G\" or a positive byte count");
    }
    return checked_mem(bytes, label(name));
  }

 private:
  std::string qualified(const std::string& name) const {
    if (path_.empty()) return name;
    return name.empty() ? path_ : path_ + "." + name;
  }

  const json& object_;
  const std::string& source_;
  std::string path_;
};

Link link_from_json(const json& object, const std::string& source, const std::string& path) {
  Fields fields(object, source, path, {"bandwidth_gbps", "latency_us"});
  return Link{fields.number("bandwidth_gbps", kBandwidthGbps) * kGiga, fields.number("latency_us", kLatencyUs, true) * kMicro};
}

// `name` within the object at `path` ("" for the top level): "node_groups[1].device".
std::string field_path(const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; }

// The optional link `name`; a custom device has no default, so there it is required.
Link link_field(const Fields& fields, const std::string& source, const std::string& path, const std::string& name,
                const Link* fallback) {
  if (const json* value = fields.find(name)) return link_from_json(*value, source, field_path(path, name));
  if (!fallback) fail(fields.label(name) + ": required with a custom device");
  return *fallback;
}

// The host of the JSON's "host" object; each field defaults to `fallback`'s (a preset's host),
// and without one (a custom device) all are required.
HostSpec host_from_json(const json& object, const std::string& source, const std::string& path, const HostSpec* fallback) {
  Fields fields(object, source, path, {"mem", "link", "mem_bandwidth_gbps"});
  HostSpec host = fallback ? *fallback : HostSpec{};
  if (fields.find("mem") || !fallback) host.mem_bytes = fields.mem("mem");
  if (fields.find("link") || !fallback) host.link = link_from_json(fields.need("link"), source, field_path(path, "link"));
  if (fields.find("mem_bandwidth_gbps") || !fallback)
    host.mem_bandwidth = fields.number("mem_bandwidth_gbps", kBandwidthGbps) * kGiga;
  return host;
}

DeviceSpec custom_device(const json& object, const std::string& source, const std::string& path) {
  Fields fields(object, source, path,
                {"name", "peak_fp32_tflops", "peak_half_tflops", "bf16", "mem_bandwidth_gbps", "mem",
                 "op_overhead_us"});
  DeviceSpec device;
  device.name = fields.name_string("name");
  device.description = "custom device from " + source;
  device.peak_fp32_flops = fields.number("peak_fp32_tflops", kTflops) * kTera;
  device.peak_half_flops = fields.number("peak_half_tflops", kTflops) * kTera;
  device.has_bf16 = fields.flag("bf16", true);
  device.mem_bandwidth = fields.number("mem_bandwidth_gbps", kBandwidthGbps) * kGiga;
  device.mem_bytes = fields.mem("mem");
  device.op_overhead = fields.number("op_overhead_us", kOverheadUs, true, 5.0) * kMicro;
  return device;
}

// What the uniform form and each node group describe alike: the device with its links, the
// memory per device and the host. `path` names the object in errors ("" or "node_groups[1]").
struct KindFields {
  DeviceSpec device;
  std::int64_t mem_bytes = 0;
  HostSpec host;
  bool host_stated = false;
};

KindFields kind_from_json(const Fields& fields, const std::string& source, const std::string& path, bool has_inter_node) {
  const json& device_field = fields.need("device");
  KindFields kind;
  if (device_field.is_string()) {
    kind.device = preset_or_fail(device_field.get<std::string>(), fields.label("device"));
  } else if (device_field.is_object()) {
    kind.device = custom_device(device_field, source, field_path(path, "device"));
  } else {
    fail(fields.label("device") + ": must be a preset name or a device object");
  }
  const bool custom = device_field.is_object();
  kind.device.intra_node = link_field(fields, source, path, "intra_node", custom ? nullptr : &kind.device.intra_node);
  if (has_inter_node)
    kind.device.inter_node = link_field(fields, source, path, "inter_node", custom ? nullptr : &kind.device.inter_node);
  kind.mem_bytes = fields.find("mem") ? fields.mem("mem") : kind.device.mem_bytes;
  kind.host = custom ? HostSpec{} : kind.device.host;
  const json* host_field = fields.find("host");
  if (host_field) kind.host = host_from_json(*host_field, source, field_path(path, "host"), custom ? nullptr : &kind.device.host);
  kind.host_stated = host_field != nullptr;
  return kind;
}

// The "node_groups" form: each group a kind of its own, sharing gpus_per_node and the network.
Cluster mixed_cluster_from_json(const Fields& fields, const std::string& source) {
  const int per_node = fields.count("gpus_per_node");
  const json& list = fields.need("node_groups");
  if (!list.is_array() || list.size() < 2)
    fail(fields.label("node_groups") + ": must be a list of two or more node groups (one group: give its fields at the top level)");
  if (list.size() > kMaxNodeGroups)
    fail(fields.label("node_groups") + ": more than " + std::to_string(kMaxNodeGroups) + " node groups");
  std::vector<NodeGroup> groups;
  bool host_stated = true;
  std::int64_t devices = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = "node_groups[" + std::to_string(i) + "]";
    Fields group_fields(list[i], source, path, {"nodes", "device", "mem", "intra_node", "host"});
    const int nodes = group_fields.count("nodes");
    devices += std::int64_t{nodes} * per_node;
    if (devices > kMaxDevices) fail(source + ": field 'node_groups': more than " + std::to_string(kMaxDevices) + " devices");
    KindFields kind = kind_from_json(group_fields, source, path, false);
    host_stated = host_stated && kind.host_stated;
    groups.push_back({kind.device, nodes, kind.mem_bytes, kind.device.intra_node, kind.host});
  }
  std::optional<Link> inter_node;
  if (const json* value = fields.find("inter_node")) inter_node = link_from_json(*value, source, "inter_node");
  for (const auto& group : groups)
    if (!inter_node && group.device.inter_node.bandwidth == 0) fail(fields.label("inter_node") + ": required with a custom device");
  Cluster cluster = mixed_cluster(std::move(groups), per_node, inter_node);
  cluster.host_stated = host_stated;
  return cluster;
}

json read_json_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(path + ": no such file");
  if (std::filesystem::is_directory(path, ec)) fail(path + ": is a directory, not a JSON file");
  // Only a regular file, and a small one: --cluster /dev/zero would be read forever.
  std::string text = read_regular_file(path, std::uint64_t{16} << 20, "a cluster description");
  check_json_depth(text, path);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    fail(path + ": not valid JSON: " + clip(first_line(e.what())));
  }
}

}  // namespace

std::int64_t parse_size(std::string_view text, std::string_view what) {
  const std::string prefix = std::string(what) + " " + one_line(std::string(text)) + ": ";
  if (text.empty()) fail(std::string(what) + ": empty size (expected e.g. 32G, 80GiB, 512M)");
  if (text.front() == '-' && number_length(text.substr(1)) > 0) fail(prefix + "must be positive");
  std::size_t length = number_length(text);
  double number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + length, number);
  if (length == 0 || ec == std::errc::invalid_argument || end != text.data() + length) {
    fail(prefix + "not a size (expected e.g. 32G, 80GiB, 512M)");
  }
  if (ec == std::errc::result_out_of_range) {  // over 1e308, or under 1e-308 when the integer part is 0
    std::string_view integer_part = text.substr(0, std::min(length, text.find('.')));
    number = integer_part.find_first_not_of('0') != std::string_view::npos ? HUGE_VAL : 0;
  }
  // A bare number is refused, not taken as bytes: "--mem 80" means 80 GB far more often than 80 bytes.
  if (length == text.size()) {
    std::string number_text(text);
    fail(prefix + "a size needs a unit (" + number_text + "G for GiB, " + number_text + "B for bytes)");
  }
  double unit = unit_bytes(text.substr(length));
  if (unit == 0) fail(prefix + "unknown unit (use B, K, M, G, T, KiB..TiB or KB..TB)");
  double bytes = std::floor(number * unit);
  if (bytes > kMaxSizeBytes) fail(prefix + "too large");
  if (bytes < 1) fail(prefix + "must be positive");
  return static_cast<std::int64_t>(bytes);
}

std::pair<std::string, int> parse_mix_entry(std::string_view text, std::string_view what) {
  const std::string entry(text);
  const std::string label = std::string(what) + " " + one_line(entry);
  const auto colon = entry.rfind(':');
  if (colon == std::string::npos) fail(label + ": expected PRESET:DEVICES, e.g. a100-40g:16");
  const std::string count_text = entry.substr(colon + 1);
  int count = 0;
  auto [end, ec] = std::from_chars(count_text.data(), count_text.data() + count_text.size(), count);
  if (count_text.empty() || ec != std::errc() || end != count_text.data() + count_text.size())
    fail(label + ": the device count after ':' is not a whole number");
  check_count(count, label);
  preset_or_fail(entry.substr(0, colon), std::string(what));
  return {entry.substr(0, colon), count};
}

namespace {

// ClusterFlags::mix as node groups of presets.
Cluster mixed_cluster_from_flags(const ClusterFlags& flags) {
  if (flags.mix.size() < 2) fail("--gpus " + flags.mix.front().first + ":" + std::to_string(flags.mix.front().second) +
                                 ": a mix takes two device kinds or more (one kind: --gpus N --device PRESET)");
  if (flags.mix.size() > kMaxNodeGroups) fail("--gpus: more than " + std::to_string(kMaxNodeGroups) + " device kinds");
  if (flags.mem) fail("--mem: a mix of device kinds takes each preset's memory (a --cluster file sets each kind's)");
  if (flags.device) fail("--device: a mix of device kinds names its presets in --gpus");
  int least = kMaxDevices;
  std::int64_t devices = 0;
  for (const auto& [preset, count] : flags.mix) least = std::min(least, count), devices += count;
  if (devices > kMaxDevices) fail("--gpus: more than " + std::to_string(kMaxDevices) + " devices");
  const int per_node = flags.gpus_per_node.value_or(std::min(8, least));
  check_count(per_node, "--gpus-per-node " + std::to_string(per_node));
  std::vector<NodeGroup> groups;
  for (const auto& [preset, count] : flags.mix) {
    const DeviceSpec device = preset_or_fail(preset, "--gpus");
    if (count % per_node != 0)
      fail("--gpus " + preset + ":" + std::to_string(count) + " is not a whole number of nodes of " + std::to_string(per_node) +
           (flags.gpus_per_node ? "" : " (the default; set --gpus-per-node)"));
    HostSpec host = device.host;
    if (flags.host_mem)
      host.mem_bytes = checked_mem(parse_size(*flags.host_mem, "--host-mem"), "--host-mem " + one_line(*flags.host_mem));
    groups.push_back({device, count / per_node, device.mem_bytes, device.intra_node, host});
  }
  Cluster cluster = mixed_cluster(std::move(groups), per_node);
  cluster.host_stated = flags.host_mem.has_value();
  return cluster;
}

}  // namespace

Cluster cluster_from_flags(const ClusterFlags& flags) {
  if (flags.cluster_file) return load_cluster_file(*flags.cluster_file);
  if (!flags.mix.empty()) return mixed_cluster_from_flags(flags);
  int gpus = flags.gpus.value_or(1);
  check_count(gpus, "--gpus " + std::to_string(gpus));
  // A copy: GCC 14 warns that a reference would dangle, not knowing the preset outlives the arguments.
  const DeviceSpec device = preset_or_fail(flags.device.value_or(std::string(kDefaultDevice)), "--device");
  int per_node = flags.gpus_per_node.value_or(std::min(8, gpus));
  std::string per_node_flag = "--gpus-per-node " + std::to_string(per_node);
  check_count(per_node, per_node_flag);
  if (per_node > gpus) fail(per_node_flag + " is more than --gpus " + std::to_string(gpus));
  if (gpus % per_node != 0) {
    fail("--gpus " + std::to_string(gpus) + " is not a multiple of " + per_node_flag +
         (flags.gpus_per_node ? "" : " (the default; set --gpus-per-node)"));
  }
  std::int64_t mem = device.mem_bytes;
  if (flags.mem) mem = checked_mem(parse_size(*flags.mem, "--mem"), "--mem " + one_line(*flags.mem));
  HostSpec host = device.host;
  if (flags.host_mem) host.mem_bytes = checked_mem(parse_size(*flags.host_mem, "--host-mem"), "--host-mem " + one_line(*flags.host_mem));
  return Cluster{device, gpus / per_node, per_node, mem, device.intra_node, device.inter_node, host,
                 flags.host_mem.has_value()};
}

Cluster cluster_from_json(const json& object, const std::string& source) {
  if (object.is_object() && object.contains("node_groups"))
    return mixed_cluster_from_json(Fields(object, source, "", {"gpus_per_node", "node_groups", "inter_node"}), source);
  Fields fields(object, source, "", {"nodes", "gpus_per_node", "device", "mem", "intra_node", "inter_node", "host"});
  int nodes = fields.count("nodes");
  int per_node = fields.count("gpus_per_node");
  if (std::int64_t{nodes} * per_node > kMaxDevices) {
    fail(source + ": fields 'nodes' x 'gpus_per_node': more than " + std::to_string(kMaxDevices) + " devices");
  }
  KindFields kind = kind_from_json(fields, source, "", true);
  return Cluster{kind.device, nodes, per_node, kind.mem_bytes, kind.device.intra_node, kind.device.inter_node, kind.host,
                 kind.host_stated};
}

Cluster load_cluster_file(const std::string& path) { return cluster_from_json(read_json_file(path), path); }

Cluster mixed_cluster(std::vector<NodeGroup> groups, int gpus_per_node, std::optional<Link> inter_node) {
  Cluster cluster;
  cluster.gpus_per_node = gpus_per_node;
  cluster.nodes = 0;
  for (const auto& group : groups) cluster.nodes += group.nodes;
  // The network joins every node: without one given, the slowest group's preset bounds it.
  const NodeGroup& first = groups.front();
  cluster.inter_node = inter_node.value_or(first.device.inter_node);
  for (const auto& group : groups) {
    if (inter_node) break;
    cluster.inter_node.bandwidth = std::min(cluster.inter_node.bandwidth, group.device.inter_node.bandwidth);
    cluster.inter_node.latency = std::max(cluster.inter_node.latency, group.device.inter_node.latency);
  }
  cluster.device = first.device;
  cluster.mem_bytes = first.mem_bytes;
  cluster.intra_node = first.intra_node;
  cluster.host = first.host;
  cluster.groups = std::move(groups);
  return cluster;
}

int Cluster::first_rank_of_kind(int kind) const {
  int rank = 0;
  for (int k = 0; k < kind; ++k) rank += kind_gpus(k);
  return rank;
}

int Cluster::kind_of_rank(int rank) const {
  for (int k = 0; k < kinds(); ++k) {
    if (rank < kind_gpus(k)) return k;
    rank -= kind_gpus(k);
  }
  return kinds() - 1;
}

Cluster Cluster::kind_view(int kind) const {
  if (!mixed()) return *this;
  const NodeGroup& group = groups[static_cast<std::size_t>(kind)];
  return Cluster{group.device, group.nodes, gpus_per_node, group.mem_bytes, group.intra_node, inter_node, group.host,
                 host_stated};
}

std::string Cluster::device_names() const {
  if (!mixed()) return device.name;
  std::string names;
  for (const auto& group : groups) names += (names.empty() ? "" : "+") + group.device.name;
  return names;
}

std::int64_t Cluster::least_mem_bytes() const {
  std::int64_t least = mem_bytes;
  for (const auto& group : groups) least = std::min(least, group.mem_bytes);
  return least;
}

}  // namespace rannc::cost
