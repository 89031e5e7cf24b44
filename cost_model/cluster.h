// The cluster a plan targets: how many devices, how they are grouped into nodes, how much
// memory each has and how fast they talk. Built from the CLI flags of docs/contract.md or from a
// cluster JSON file (--cluster); every malformed or impossible description is an InputError
// that names the flag or the JSON field at fault.
//
// The cluster JSON file (--cluster), also described in docs/user-guide.md, "Cluster description":
//
//   {"nodes": 4,                 // required, positive integer
//    "gpus_per_node": 8,         // required, positive integer
//    "device": "h100-80g",       // required: a preset name, or a custom device object:
//        // {"name": "my-gpu", "peak_fp32_tflops": 60, "peak_half_tflops": 900, "bf16": true,
//        //  "mem_bandwidth_gbps": 3000, "mem": "80G", "op_overhead_us": 5}
//        // every field required except bf16 (default true) and op_overhead_us (default 5)
//    "mem": "80G",               // optional: memory per device, default the device's
//    "intra_node": {"bandwidth_gbps": 450, "latency_us": 3},  // optional: default the device's
//    "inter_node": {"bandwidth_gbps": 50, "latency_us": 5},   // optional: default the device's
//    "host": {"mem": "1T",                                    // optional: per node
//             "link": {"bandwidth_gbps": 25, "latency_us": 10},  // host <-> each device
//             "mem_bandwidth_gbps": 410}}                     // the host optimizer's, per node
//        // host and each of its fields default to the preset's; a custom device has no host
//        // unless given (then all three fields are required), and without one nothing is offloaded
//
// A mixed cluster gives "node_groups" in place of "nodes", "device", "mem", "intra_node" and "host":
//
//   {"gpus_per_node": 8,         // required: the same in every group
//    "node_groups": [            // two or more, ranks numbered group after group
//      {"nodes": 2, "device": "a100-40g"},
//      {"nodes": 2, "device": "h100-80g", "mem": "80G", "intra_node": {...}, "host": {...}}],
//    "inter_node": {"bandwidth_gbps": 25, "latency_us": 5}}   // optional: default the slowest group's
//
// Each group takes "nodes", "device", "mem", "intra_node" and "host" as the uniform form does.
//
// gbps is GB/s (10^9 bytes per second, per direction and per device), not Gb/s. A link object
// needs both of its fields. With a custom device both links are required (it has no defaults).
// Sizes are strings as for --mem or integer byte counts. Bandwidths, peaks and sizes must be
// positive; latencies and op_overhead_us may be 0. Unknown fields anywhere are errors, so a typo
// never passes silently.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cost_model/device.h"

namespace rannc::cost {

// One kind of device in a mixed cluster: whole nodes of it.
struct NodeGroup {
  DeviceSpec device;
  int nodes = 1;
  std::int64_t mem_bytes = 0;  // per device
  Link intra_node;
  HostSpec host;
};

struct Cluster {
  // A uniform cluster's device, memory, links and host; a mixed cluster's are its first group's
  // (its kind views below give each group's).
  DeviceSpec device;            // the preset, or a custom device from the JSON file
  int nodes = 1;
  int gpus_per_node = 1;
  std::int64_t mem_bytes = 0;   // memory per device usable by the plan
  Link intra_node;              // between devices of one node
  Link inter_node;              // between devices of different nodes
  HostSpec host;                // where offloaded state lives (host.mem_bytes 0: nowhere)
  bool host_stated = false;     // the host came from --host-mem or a cluster file's "host", not a preset's guess

  // A mixed cluster's node groups, its ranks numbered group after group; empty when uniform.
  std::vector<NodeGroup> groups{};

  int gpus() const { return nodes * gpus_per_node; }
  int node_of(int rank) const { return rank / gpus_per_node; }
  // Whether groups of `devices` consecutive ranks, laid from a node's first rank, each lie in one
  // node or over whole nodes (a context group may span nodes; a tensor-parallel group may not).
  bool tiles_nodes(int devices) const {
    return devices > 0 && (gpus_per_node % devices == 0 || devices % gpus_per_node == 0);
  }
  bool mixed() const { return !groups.empty(); }
  // Device kinds: a mixed cluster's groups, or 1.
  int kinds() const { return mixed() ? static_cast<int>(groups.size()) : 1; }
  // The devices of kind k (all of them when uniform) and the first rank of them.
  int kind_gpus(int kind) const { return mixed() ? groups[static_cast<std::size_t>(kind)].nodes * gpus_per_node : gpus(); }
  int first_rank_of_kind(int kind) const;
  int kind_of_rank(int rank) const;
  // Kind k's nodes as a uniform cluster (the cluster itself when uniform): what a search on that
  // kind's devices, or a plan that uses only them, sees.
  Cluster kind_view(int kind) const;
  // "a100-40g" or "a100-40g+h100-80g": the device kinds, for a plan's cluster and messages.
  std::string device_names() const;
  // The least memory of a device: the limit of a plan that does not tell the kinds apart.
  std::int64_t least_mem_bytes() const;
};

// The flags of docs/contract.md; unset ones take the defaults there.
struct ClusterFlags {
  std::optional<int> gpus;              // --gpus, default 1
  std::optional<std::string> mem;       // --mem, default the device's memory
  std::optional<int> gpus_per_node;     // --gpus-per-node, default min(8, gpus)
  std::optional<std::string> device;    // --device, default a100-80g
  std::optional<std::string> host_mem;  // --host-mem, default the device preset's host
  std::optional<std::string> cluster_file;  // --cluster: a JSON file that overrides the four above
  // A mixed cluster of presets, in place of gpus and device: (preset, devices) per kind, in rank
  // order (sweep's --gpus a100-40g:16,h100-80g:16); each count a whole number of nodes.
  std::vector<std::pair<std::string, int>> mix{};
};

inline constexpr std::string_view kDefaultDevice = "a100-80g";

// Sanity bounds of a description: more would be a typo, and keeps nodes * gpus_per_node in an int.
inline constexpr int kMaxDevices = 1 << 20;
inline constexpr std::int64_t kMaxMemBytes = std::int64_t{1} << 50;  // 1 PiB per device
// Device kinds of a mixed cluster: each is costed and searched on its own.
inline constexpr std::size_t kMaxNodeGroups = 16;

// A memory size: "32G" and "32GiB" are 32 * 2^30 bytes, "32GB" is 32 * 10^9; K, M, G, T
// likewise (unit letters in any case; "B" or no unit is bytes); fractions are allowed ("1.5G")
// and rounded down to whole bytes. Rejects empty, negative, zero, garbage and more than 2^62
// bytes with an InputError that reads "WHAT TEXT: reason", e.g. "--mem -5G: must be positive".
std::int64_t parse_size(std::string_view text, std::string_view what);

// "a100-40g:16": a preset and its devices in a mix (ClusterFlags::mix); `what` names the flag in errors.
std::pair<std::string, int> parse_mix_entry(std::string_view text, std::string_view what);

// With cluster_file set, the file alone describes the cluster and the other flags are ignored
// (the file wins; docs/contract.md: --cluster "overrides the four above").
Cluster cluster_from_flags(const ClusterFlags& flags);

// A mixed cluster of two or more node groups (ranks numbered group after group) sharing the
// devices per node and `inter_node`, by default the slowest of the groups' devices' networks.
Cluster mixed_cluster(std::vector<NodeGroup> groups, int gpus_per_node, std::optional<Link> inter_node = std::nullopt);

// The JSON form above; `source` names the file in errors. load_cluster_file also turns a missing
// or unreadable file and invalid JSON into InputErrors.
Cluster cluster_from_json(const nlohmann::json& json, const std::string& source);
Cluster load_cluster_file(const std::string& path);

}  // namespace rannc::cost
