// Device presets, size parsing and the cluster from flags or JSON, including every error naming its field.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include "cost_model/cluster.h"
#include "emit/plan_builder.h"
#include "plan/plan_json.h"
#include "support/error.h"

using namespace rannc;
using namespace rannc::cost;
using Catch::Contains;
using Catch::StartsWith;
using nlohmann::json;

namespace {

constexpr std::int64_t kGiB = std::int64_t{1} << 30;

std::int64_t size(const std::string& text) { return parse_size(text, "--mem"); }

Cluster from_json_text(const std::string& text) { return cluster_from_json(json::parse(text), "c.json"); }

// What plan.json records of a cluster.
json cluster_json(const Cluster& cluster) {
  plan::Plan plan;
  plan.cluster = emit::plan_cluster(cluster);
  return plan::to_json(plan)["cluster"];
}

// The message of the InputError `f` throws, or "" if it throws none.
template <typename F>
std::string input_error(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// A file in the temp folder with `text`, removed at the end of the test.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& text)
      : path((std::filesystem::temp_directory_path() / ("rannc_cluster_test_" + std::to_string(::getpid()) + ".json"))
                 .string()) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
};

}  // namespace

TEST_CASE("every preset exists with positive figures", "[cluster]") {
  auto names = device_preset_names();
  CHECK(names == std::vector<std::string>{"a100-40g", "a100-80g", "cpu", "h100-80g", "h200", "v100-32g"});
  for (const auto& name : names) {
    INFO(name);
    const DeviceSpec* spec = find_device_preset(name);
    REQUIRE(spec != nullptr);
    CHECK(spec->name == name);
    CHECK(!spec->description.empty());
    CHECK(spec->peak_fp32_flops > 0);
    CHECK(spec->peak_half_flops >= spec->peak_fp32_flops);
    CHECK(spec->mem_bandwidth > 0);
    CHECK(spec->mem_bytes > 0);
    CHECK(spec->op_overhead > 0);
    CHECK(spec->intra_node.bandwidth > spec->inter_node.bandwidth);
    CHECK(spec->intra_node.latency > 0);
    CHECK(spec->inter_node.latency > 0);
  }
  CHECK(find_device_preset("x100") == nullptr);
  CHECK_FALSE(find_device_preset("v100-32g")->has_bf16);
  CHECK(find_device_preset("h200")->mem_bytes == 141'000'000'000);
  CHECK(find_device_preset("h100-80g")->peak_half_flops == 989e12);
  CHECK(find_device_preset("a100-40g")->inter_node.bandwidth == 25e9);
}

TEST_CASE("parse_size: binary and decimal units, fractions", "[cluster]") {
  CHECK(size("32G") == 32 * kGiB);
  CHECK(size("32GiB") == 32 * kGiB);
  CHECK(size("32gib") == 32 * kGiB);
  CHECK(size("32GB") == 32'000'000'000);
  CHECK(size("1.5G") == 3 * kGiB / 2);
  CHECK(size(".5K") == 512);
  CHECK(size("512M") == 512 << 20);
  CHECK(size("512MiB") == 512 << 20);
  CHECK(size("3MB") == 3'000'000);
  CHECK(size("2k") == 2048);
  CHECK(size("2KiB") == 2048);
  CHECK(size("2KB") == 2000);
  CHECK(size("1T") == kGiB * 1024);
  CHECK(size("1TiB") == kGiB * 1024);
  CHECK(size("1TB") == 1'000'000'000'000);
  CHECK(size("100B") == 100);
  CHECK(size("12345b") == 12345);
  CHECK(size("1.9B") == 1);  // rounded down to whole bytes
}

TEST_CASE("parse_size: each bad kind names the flag", "[cluster]") {
  CHECK_THROWS_WITH(size("-5G"), "--mem -5G: must be positive");
  CHECK_THROWS_WITH(size("0B"), "--mem 0B: must be positive");
  CHECK_THROWS_WITH(size("0G"), "--mem 0G: must be positive");
  CHECK_THROWS_WITH(size("0.1B"), "--mem 0.1B: must be positive");
  // A bare number is no size: 80 bytes is never what "--mem 80" means.
  CHECK_THROWS_WITH(size("80"), "--mem 80: a size needs a unit (80G for GiB, 80B for bytes)");
  CHECK_THROWS_WITH(size("1.5"), "--mem 1.5: a size needs a unit (1.5G for GiB, 1.5B for bytes)");
  CHECK_THROWS_WITH(size(""), Contains("--mem: empty size"));
  for (const char* garbage : {"G", "abc", ".", "+5G", " 5G", "inf", "nan", "--5"}) {
    INFO(garbage);
    CHECK_THROWS_WITH(size(garbage), Contains("--mem") && Contains("not a size"));
  }
  for (const char* bad_unit : {"5X", "5GG", "5GiBs", "5 G", "5P", "5Gi", "1e9", "0x10", "5G "}) {
    INFO(bad_unit);
    CHECK_THROWS_WITH(size(bad_unit), Contains("--mem") && Contains("unknown unit"));
  }
  CHECK_THROWS_WITH(size("4194305T"), "--mem 4194305T: too large");  // just over 2^62
  CHECK_THROWS_WITH(size(std::string(400, '9') + "B"), Contains("too large"));
  CHECK_THROWS_WITH(size("0." + std::string(400, '0') + "1G"), Contains("must be positive"));
  CHECK(size("4194304T") == std::int64_t{1} << 62);
  CHECK_THROWS_AS(size("x"), InputError);
  CHECK_THROWS_WITH(size("5\nG"), "--mem 5\\nG: unknown unit (use B, K, M, G, T, KiB..TiB or KB..TB)");  // one line
}

TEST_CASE("cluster from flags: defaults", "[cluster]") {
  Cluster c = cluster_from_flags({});
  const DeviceSpec& a100 = *find_device_preset("a100-80g");
  CHECK(c.gpus() == 1);
  CHECK(c.nodes == 1);
  CHECK(c.gpus_per_node == 1);
  CHECK(c.device.name == "a100-80g");
  CHECK(c.mem_bytes == 80 * kGiB);
  CHECK(c.intra_node.bandwidth == a100.intra_node.bandwidth);
  CHECK(c.inter_node.latency == a100.inter_node.latency);

  ClusterFlags flags;
  flags.gpus = 32;
  flags.device = "v100-32g";
  flags.mem = "30G";
  c = cluster_from_flags(flags);
  CHECK(c.gpus() == 32);
  CHECK(c.gpus_per_node == 8);
  CHECK(c.nodes == 4);
  CHECK(c.mem_bytes == 30 * kGiB);
  CHECK(c.device.name == "v100-32g");
  CHECK(c.inter_node.bandwidth == 12.5e9);

  flags.gpus = 4;
  c = cluster_from_flags(flags);
  CHECK(c.gpus_per_node == 4);  // min(8, gpus)
  CHECK(c.nodes == 1);

  flags.gpus = 12;
  flags.gpus_per_node = 4;
  c = cluster_from_flags(flags);
  CHECK(c.nodes == 3);
  CHECK(c.node_of(5) == 1);
}

TEST_CASE("cluster from flags: each error names the flag", "[cluster]") {
  auto error_of = [](ClusterFlags flags) { return input_error([&] { cluster_from_flags(flags); }); };
  ClusterFlags flags;
  flags.gpus = 0;
  CHECK(error_of(flags) == "--gpus 0: must be at least 1");
  flags.gpus = -3;
  CHECK(error_of(flags) == "--gpus -3: must be at least 1");
  flags.gpus = kMaxDevices + 1;
  CHECK_THAT(error_of(flags), Contains("--gpus") && Contains("at most"));

  flags = {};
  flags.device = "x100";
  CHECK(error_of(flags) ==
        "--device x100: unknown device preset (known: a100-40g, a100-80g, cpu, h100-80g, h200, v100-32g)");

  flags = {};
  flags.gpus = 12;
  CHECK_THAT(error_of(flags), StartsWith("--gpus 12 is not a multiple of --gpus-per-node 8"));
  flags.gpus_per_node = 5;
  CHECK(error_of(flags) == "--gpus 12 is not a multiple of --gpus-per-node 5");
  flags.gpus_per_node = 16;
  CHECK(error_of(flags) == "--gpus-per-node 16 is more than --gpus 12");
  flags.gpus_per_node = 0;
  CHECK(error_of(flags) == "--gpus-per-node 0: must be at least 1");

  flags = {};
  flags.mem = "-5G";
  CHECK(error_of(flags) == "--mem -5G: must be positive");
  flags.mem = "2000T";
  CHECK(error_of(flags) == "--mem 2000T: more than 1 PiB");
}

TEST_CASE("cluster file wins over the flags", "[cluster]") {
  TempFile file(R"({"nodes": 2, "gpus_per_node": 4, "device": "h200"})");
  ClusterFlags flags;
  flags.gpus = 0;  // would be an error, but the file replaces the flags
  flags.device = "v100-32g";
  flags.cluster_file = file.path;
  Cluster c = cluster_from_flags(flags);
  CHECK(c.gpus() == 8);
  CHECK(c.device.name == "h200");
  CHECK(c.mem_bytes == 141'000'000'000);
}

TEST_CASE("cluster JSON: preset with overrides", "[cluster]") {
  Cluster c = from_json_text(R"({"nodes": 4, "gpus_per_node": 8, "device": "h100-80g", "mem": "70G",
                                 "inter_node": {"bandwidth_gbps": 25, "latency_us": 10}})");
  CHECK(c.gpus() == 32);
  CHECK(c.device.name == "h100-80g");
  CHECK(c.mem_bytes == 70 * kGiB);
  CHECK(c.intra_node.bandwidth == 450e9);  // the preset's
  CHECK(c.inter_node.bandwidth == 25e9);
  CHECK(c.inter_node.latency == Approx(10e-6));

  CHECK(from_json_text(R"({"nodes": 1, "gpus_per_node": 2, "device": "cpu", "mem": 1000})").mem_bytes == 1000);
  CHECK(from_json_text(R"({"nodes": 1, "gpus_per_node": 2, "device": "cpu"})").mem_bytes == 24 * kGiB);
}

TEST_CASE("cluster JSON: custom device", "[cluster]") {
  Cluster c = from_json_text(R"({"nodes": 2, "gpus_per_node": 4,
      "device": {"name": "my-gpu", "peak_fp32_tflops": 60, "peak_half_tflops": 900, "bf16": false,
                 "mem_bandwidth_gbps": 3000, "mem": "80G"},
      "intra_node": {"bandwidth_gbps": 450, "latency_us": 3},
      "inter_node": {"bandwidth_gbps": 50, "latency_us": 0}})");
  CHECK(c.device.name == "my-gpu");
  CHECK(c.device.peak_fp32_flops == 60e12);
  CHECK(c.device.peak_half_flops == 900e12);
  CHECK_FALSE(c.device.has_bf16);
  CHECK(c.device.mem_bandwidth == 3000e9);
  CHECK(c.device.op_overhead == Approx(5e-6));  // default
  CHECK(c.mem_bytes == 80 * kGiB);               // the device's
  CHECK(c.intra_node.bandwidth == 450e9);
  CHECK(c.inter_node.latency == 0);
  CHECK(c.device.inter_node.bandwidth == 50e9);

  json expected = json::parse(R"({"gpus": 8, "nodes": 2, "gpus_per_node": 4, "mem_bytes": 85899345920,
      "device": "my-gpu", "intra_node": {"bandwidth_gbps": 450, "latency_us": 3},
      "inter_node": {"bandwidth_gbps": 50, "latency_us": 0}})");
  CHECK(cluster_json(c) == expected);
  CHECK(cluster_json(c).dump() == expected.dump());  // integers, not 450.0 or 2.9999999999999996
}

TEST_CASE("cluster_to_json of the presets is plain", "[cluster]") {
  ClusterFlags flags;
  flags.gpus = 16;
  flags.device = "v100-32g";
  CHECK(cluster_json(cluster_from_flags(flags)).dump() ==
        R"({"device":"v100-32g","gpus":16,"gpus_per_node":8,)"
        R"("host":{"link":{"bandwidth_gbps":12,"latency_us":10},"mem_bandwidth_gbps":154,"mem_bytes":549755813888},)"
        R"("inter_node":{"bandwidth_gbps":12.5,"latency_us":5},)"
        R"("intra_node":{"bandwidth_gbps":150,"latency_us":3},"mem_bytes":34359738368,"nodes":2})");
}

TEST_CASE("the host where state is offloaded: the preset's node, --host-mem, or the JSON's host", "[cluster]") {
  ClusterFlags flags;
  flags.gpus = 8;
  CHECK(cluster_from_flags(flags).host.mem_bytes == std::int64_t{1024} << 30);  // DGX A100
  flags.host_mem = "64G";
  CHECK(cluster_from_flags(flags).host.mem_bytes == std::int64_t{64} << 30);
  CHECK(cluster_from_flags(flags).host.link.bandwidth == 25e9);
  flags.host_mem = "0G";
  CHECK(input_error([&] { cluster_from_flags(flags); }) == "--host-mem 0G: must be positive");

  auto preset = from_json_text(R"({"nodes": 1, "gpus_per_node": 8, "device": "h100-80g", "host": {"mem": "512G"}})");
  CHECK(preset.host.mem_bytes == std::int64_t{512} << 30);
  CHECK(preset.host.link.bandwidth == 50e9);  // the other fields stay the preset's
  const std::string custom = R"({"nodes": 1, "gpus_per_node": 2, "intra_node": {"bandwidth_gbps": 1, "latency_us": 1},
      "inter_node": {"bandwidth_gbps": 1, "latency_us": 1}, "device": {"name": "g", "peak_fp32_tflops": 1,
      "peak_half_tflops": 2, "mem_bandwidth_gbps": 3, "mem": "8G"})";
  CHECK(from_json_text(custom + "}").host.mem_bytes == 0);  // no host: nothing offloads
  auto hosted = from_json_text(custom + R"(, "host": {"mem": "1T", "link": {"bandwidth_gbps": 20, "latency_us": 4},
      "mem_bandwidth_gbps": 100}})");
  CHECK(hosted.host.mem_bandwidth == 100e9);
  CHECK(input_error([&] { from_json_text(custom + R"(, "host": {"mem": "1T"}})"); }) == "c.json: missing field 'host.link'");
  CHECK(input_error([&] { from_json_text(custom + R"(, "host": {"mem": "1T", "link": {"bandwidth_gbps": 20, "latency_us": 4},
      "mem_bandwidth_gbps": 0}})"); }) == "c.json: field 'host.mem_bandwidth_gbps': must be a positive number");
}

TEST_CASE("cluster JSON: each error names the field", "[cluster]") {
  auto error_of = [](const std::string& text) { return input_error([&] { from_json_text(text); }); };
  const std::string size = R"("nodes": 2, "gpus_per_node": 4)";
  const std::string custom = R"("name": "g", "peak_fp32_tflops": 1, "peak_half_tflops": 2, "mem_bandwidth_gbps": 3)";
  const std::string links = R"("intra_node": {"bandwidth_gbps": 1, "latency_us": 1},
                               "inter_node": {"bandwidth_gbps": 1, "latency_us": 1})";

  CHECK(error_of("[1, 2]") == "c.json: must be a JSON object");
  CHECK_THAT(error_of("{" + size + R"(, "device": "h200", "nodse": 1})"),
             StartsWith("c.json: unknown field 'nodse' (known: device, gpus_per_node, host, inter_node, intra_node"));
  CHECK(error_of(R"({"gpus_per_node": 4, "device": "h200"})") == "c.json: missing field 'nodes'");
  CHECK(error_of(R"({"nodes": 0, "gpus_per_node": 4, "device": "h200"})") ==
        "c.json: field 'nodes': must be a positive integer");
  CHECK(error_of(R"({"nodes": -1, "gpus_per_node": 4, "device": "h200"})") ==
        "c.json: field 'nodes': must be a positive integer");
  CHECK(error_of(R"({"nodes": "4", "gpus_per_node": 4, "device": "h200"})") ==
        "c.json: field 'nodes': must be a positive integer");
  CHECK(error_of(R"({"nodes": 2.5, "gpus_per_node": 4, "device": "h200"})") ==
        "c.json: field 'nodes': must be a positive integer");
  CHECK(error_of(R"({"nodes": 1, "gpus_per_node": 99999999999, "device": "h200"})") ==
        "c.json: field 'gpus_per_node': must be at most 1048576");
  CHECK_THAT(error_of(R"({"nodes": 2048, "gpus_per_node": 1024, "device": "h200"})"),
             StartsWith("c.json: fields 'nodes' x 'gpus_per_node'"));
  CHECK(error_of("{" + size + "}") == "c.json: missing field 'device'");
  CHECK_THAT(error_of("{" + size + R"(, "device": "x100"})"),
             StartsWith("c.json: field 'device' x100: unknown device preset (known: a100-40g"));
  CHECK(error_of("{" + size + R"(, "device": 7})") ==
        "c.json: field 'device': must be a preset name or a device object");
  CHECK(error_of("{" + size + R"(, "device": "h200", "mem": "-5G"})") == "c.json: field 'mem' -5G: must be positive");
  CHECK(error_of("{" + size + R"(, "device": "h200", "mem": "2P"})") ==
        "c.json: field 'mem' 2P: unknown unit (use B, K, M, G, T, KiB..TiB or KB..TB)");
  CHECK(error_of("{" + size + R"(, "device": "h200", "mem": "2000T"})") ==
        "c.json: field 'mem': more than 1 PiB");
  CHECK(error_of("{" + size + R"(, "device": "h200", "mem": -1})") ==
        R"(c.json: field 'mem': must be a size such as "80G" or a positive byte count)");
  CHECK(error_of("{" + size + R"(, "device": "h200", "intra_node": 5})") ==
        "c.json: field 'intra_node': must be an object");
  CHECK(error_of("{" + size + R"(, "device": "h200", "intra_node": {"bandwidth_gbps": 0, "latency_us": 1}})") ==
        "c.json: field 'intra_node.bandwidth_gbps': must be a positive number");
  CHECK(error_of("{" + size + R"(, "device": "h200", "inter_node": {"bandwidth_gbps": 1, "latency_us": -1}})") ==
        "c.json: field 'inter_node.latency_us': must be a non-negative number");
  CHECK(error_of("{" + size + R"(, "device": "h200", "inter_node": {"bandwidth_gbps": 1}})") ==
        "c.json: missing field 'inter_node.latency_us'");
  CHECK_THAT(error_of("{" + size + R"(, "device": "h200", "x\ny": 1})"), StartsWith("c.json: unknown field 'x\\ny'"));
  CHECK_THAT(error_of("{" + size + R"(, "device": "h200", "inter_node": {"bandwidth": 1, "latency_us": 1}})"),
             StartsWith("c.json: unknown field 'inter_node.bandwidth' (known: bandwidth_gbps, latency_us)"));

  // Custom devices: every field checked, and the links are required.
  CHECK(error_of("{" + size + R"(, "device": {"name": "g", "peak_fp32_tflops": 1, "peak_half_tflops": 2,
                 "mem_bandwidth_gbps": 3}, )" + links + "}") == "c.json: missing field 'device.mem'");
  CHECK(error_of("{" + size + R"(, "device": {)" + custom + R"(, "mem": "1G", "bf16": "yes"}, )" + links + "}") ==
        "c.json: field 'device.bf16': must be true or false");
  CHECK(error_of("{" + size + R"(, "device": {)" + custom + R"(, "mem": "1G", "op_overhead_us": "5"}, )" + links +
                 "}") == "c.json: field 'device.op_overhead_us': must be a non-negative number");
  CHECK_THAT(error_of("{" + size + R"(, "device": {)" + custom + R"(, "mem": "1G", "colour": 1}, )" + links + "}"),
             StartsWith("c.json: unknown field 'device.colour'"));
  CHECK(error_of("{" + size + R"(, "device": {"name": "", "peak_fp32_tflops": 1}})") ==
        "c.json: field 'device.name': must be a non-empty string");
  CHECK(error_of("{" + size + R"(, "device": {"name": "g", "peak_fp32_tflops": -1}})") ==
        "c.json: field 'device.peak_fp32_tflops': must be a positive number");
  CHECK(error_of("{" + size + R"(, "device": {)" + custom + R"(, "mem": "1G"}})") ==
        "c.json: field 'intra_node': required with a custom device");
  CHECK(error_of("{" + size + R"(, "device": {)" + custom + R"(, "mem": "1G"},
                 "intra_node": {"bandwidth_gbps": 1, "latency_us": 1}})") ==
        "c.json: field 'inter_node': required with a custom device");
  CHECK_NOTHROW(from_json_text("{" + size + R"(, "device": {)" + custom + R"(, "mem": "1G"}, )" + links + "}"));
}

TEST_CASE("cluster file: missing, not JSON, and read", "[cluster]") {
  CHECK(input_error([] { load_cluster_file("/nonexistent/cluster.json"); }) ==
        "/nonexistent/cluster.json: no such file");
  CHECK_THAT(input_error([] { load_cluster_file(std::filesystem::temp_directory_path().string()); }),
             Contains("is a directory"));
  {
    TempFile file("{\"nodes\": 2,\n oops}");
    std::string message = input_error([&] { load_cluster_file(file.path); });
    CHECK_THAT(message, StartsWith(file.path + ": not valid JSON: [json.exception.parse_error"));
    CHECK(message.find('\n') == std::string::npos);
  }
  {
    TempFile file("");
    CHECK_THAT(input_error([&] { load_cluster_file(file.path); }), StartsWith(file.path + ": not valid JSON"));
  }
  {
    TempFile file(R"({"nodes": 1, "gpus_per_node": 8, "device": "a100-40g", "extra": true})");
    CHECK_THAT(input_error([&] { load_cluster_file(file.path); }),
               StartsWith(file.path + ": unknown field 'extra'"));
  }
  {
    TempFile file(R"({"nodes": 1, "gpus_per_node": 8, "device": "a100-40g"})");
    CHECK(load_cluster_file(file.path).mem_bytes == 40 * kGiB);
  }
}

TEST_CASE("cluster JSON: node groups of different device kinds", "[cluster][mixed]") {
  Cluster c = from_json_text(R"({"gpus_per_node": 8, "node_groups": [
      {"nodes": 2, "device": "a100-40g"},
      {"nodes": 3, "device": "h100-80g", "mem": "64G", "host": {"mem": "2T"}}]})");
  REQUIRE(c.mixed());
  CHECK(c.kinds() == 2);
  CHECK(c.nodes == 5);
  CHECK(c.gpus() == 40);
  CHECK(c.kind_gpus(0) == 16);
  CHECK(c.kind_gpus(1) == 24);
  CHECK(c.first_rank_of_kind(1) == 16);
  CHECK(c.kind_of_rank(15) == 0);
  CHECK(c.kind_of_rank(16) == 1);
  CHECK(c.kind_of_rank(39) == 1);
  CHECK(c.device_names() == "a100-40g+h100-80g");
  CHECK(c.least_mem_bytes() == 40 * kGiB);
  // Each kind's view: its nodes, device, memory, links and host; the network is the slower one.
  Cluster h100 = c.kind_view(1);
  CHECK_FALSE(h100.mixed());
  CHECK(h100.device.name == "h100-80g");
  CHECK(h100.nodes == 3);
  CHECK(h100.gpus_per_node == 8);
  CHECK(h100.mem_bytes == 64 * kGiB);
  CHECK(h100.host.mem_bytes == std::int64_t{2} << 40);
  CHECK(h100.intra_node.bandwidth == find_device_preset("h100-80g")->intra_node.bandwidth);
  CHECK(c.inter_node.bandwidth == find_device_preset("a100-40g")->inter_node.bandwidth);
  CHECK(c.inter_node.bandwidth < find_device_preset("h100-80g")->inter_node.bandwidth);
  CHECK(c.kind_view(0).mem_bytes == 40 * kGiB);
  // A uniform cluster is its own view.
  Cluster uniform = from_json_text(R"({"nodes": 2, "gpus_per_node": 8, "device": "h200"})");
  CHECK(uniform.kinds() == 1);
  CHECK(uniform.kind_view(0).gpus() == 16);
  CHECK(uniform.device_names() == "h200");
}

TEST_CASE("cluster JSON: each error of a node group names it", "[cluster][mixed]") {
  auto error_of = [](const std::string& text) { return input_error([&] { from_json_text(text); }); };
  const std::string custom = R"({"name": "g", "peak_fp32_tflops": 1, "peak_half_tflops": 2, "mem_bandwidth_gbps": 3,
                                 "mem": "8G"})";
  const std::string link = R"({"bandwidth_gbps": 1, "latency_us": 1})";
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "h200"}]})") ==
        "c.json: field 'node_groups': must be a list of two or more node groups (one group: give its fields at the top level)");
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": {"nodes": 1}})") ==
        "c.json: field 'node_groups': must be a list of two or more node groups (one group: give its fields at the top level)");
  CHECK_THAT(error_of(R"({"nodes": 2, "gpus_per_node": 8, "node_groups": []})"),
             StartsWith("c.json: unknown field 'nodes' (known: gpus_per_node, inter_node, node_groups)"));
  CHECK(error_of(R"({"node_groups": [{"nodes": 1, "device": "h200"}, {"nodes": 1, "device": "h200"}]})") ==
        "c.json: missing field 'gpus_per_node'");
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "h200"}, 7]})") ==
        "c.json: field 'node_groups[1]': must be an object");
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "h200"}, {"device": "h200"}]})") ==
        "c.json: missing field 'node_groups[1].nodes'");
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 0, "device": "h200"}, {"nodes": 1, "device": "h200"}]})") ==
        "c.json: field 'node_groups[0].nodes': must be a positive integer");
  CHECK_THAT(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "x100"}, {"nodes": 1, "device": "h200"}]})"),
             StartsWith("c.json: field 'node_groups[0].device' x100: unknown device preset"));
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "h200", "mem": "-1G"},
                    {"nodes": 1, "device": "h200"}]})") == "c.json: field 'node_groups[0].mem' -1G: must be positive");
  CHECK_THAT(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "h200", "inter_node": {}},
                         {"nodes": 1, "device": "h200"}]})"),
             StartsWith("c.json: unknown field 'node_groups[0].inter_node' (known: device, host, intra_node, mem, nodes)"));
  CHECK(error_of(R"({"gpus_per_node": 8, "node_groups": [{"nodes": 1, "device": "h200"},
                    {"nodes": 1, "device": "h200", "host": {"mem": "0G"}}]})") ==
        "c.json: field 'node_groups[1].host.mem' 0G: must be positive");
  CHECK_THAT(error_of(R"({"gpus_per_node": 1024, "node_groups": [{"nodes": 1000, "device": "h200"},
                         {"nodes": 1000, "device": "h200"}]})"),
             StartsWith("c.json: field 'node_groups': more than 1048576 devices"));
  {
    std::string many = R"({"gpus_per_node": 1, "node_groups": [)";
    for (int i = 0; i < 17; ++i) many += std::string(i ? "," : "") + R"({"nodes": 1, "device": "h200"})";
    CHECK(error_of(many + "]}") == "c.json: field 'node_groups': more than 16 node groups");
  }
  // A custom device has no links of its own to default to.
  CHECK(error_of(R"({"gpus_per_node": 2, "node_groups": [{"nodes": 1, "device": "h200"},
                    {"nodes": 1, "device": )" + custom + "}]}") ==
        "c.json: field 'node_groups[1].intra_node': required with a custom device");
  CHECK(error_of(R"({"gpus_per_node": 2, "node_groups": [{"nodes": 1, "device": "h200"},
                    {"nodes": 1, "device": )" + custom + R"(, "intra_node": )" + link + "}]}") ==
        "c.json: field 'inter_node': required with a custom device");
  CHECK_NOTHROW(from_json_text(R"({"gpus_per_node": 2, "inter_node": )" + link + R"(, "node_groups": [
      {"nodes": 1, "device": "h200"}, {"nodes": 1, "device": )" + custom + R"(, "intra_node": )" + link + "}]}"));
}
