#include "cost_model/comm.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "cost_model/memory.h"

namespace rannc::cost {
namespace {

// One pass around a ring of n ranks: n-1 steps, each moving 1/n of `bytes` through every link.
// All-gather, reduce-scatter and all-to-all are one pass; an allreduce is two (reduce-scatter
// then all-gather).
double ring_pass_seconds(double bytes, int n, const Link& link) {
  if (n <= 1) return 0;
  double steps = n - 1;
  return steps * link.latency + steps / n * bytes / link.bandwidth;
}

// How a group of ranks lies on the cluster's nodes.
struct GroupSpan {
  int nodes = 0;     // distinct nodes
  int per_node = 0;  // most ranks on one node
  int fewest_per_node = 0;  // fewest ranks on one of those nodes
};

GroupSpan span_of(const Cluster& cluster, const std::vector<int>& ranks) {
  std::map<int, int> ranks_per_node;
  for (int rank : ranks) {
    // Ranks come from the planner, so one outside the cluster is a bug, not bad input.
    if (rank < 0 || rank >= cluster.gpus()) {
      throw std::out_of_range("rank " + std::to_string(rank) + " outside a cluster of " +
                              std::to_string(cluster.gpus()) + " devices");
    }
    ++ranks_per_node[cluster.node_of(rank)];
  }
  GroupSpan span;
  span.nodes = static_cast<int>(ranks_per_node.size());
  span.fewest_per_node = ranks_per_node.begin()->second;
  for (const auto& [node, count] : ranks_per_node) {
    span.per_node = std::max(span.per_node, count);
    span.fewest_per_node = std::min(span.fewest_per_node, count);
  }
  return span;
}

// The link a one-pass collective of the group runs over: across nodes the inter-node link bounds
// every step of the ring, so the whole group is costed on it (conservative).
const Link& group_link(const Cluster& cluster, const GroupSpan& span) {
  return span.nodes > 1 ? cluster.inter_node : cluster.intra_node;
}

}  // namespace

double wire_bytes(double bytes, bool compress_16bit) { return compress_16bit ? bytes / 2 : bytes; }

double p2p_seconds(double bytes, const Link& link) { return link.latency + bytes / link.bandwidth; }

double ring_allreduce_seconds(double bytes, int n, const Link& link) { return 2 * ring_pass_seconds(bytes, n, link); }

double hierarchical_allreduce_seconds(double bytes, int per_node, int nodes, const Link& intra, const Link& inter) {
  return hierarchical_allreduce_seconds(bytes, per_node, per_node, nodes, intra, inter);
}

double hierarchical_allreduce_seconds(double bytes, int per_node, int fewest_per_node, int nodes, const Link& intra,
                                      const Link& inter) {
  double reduce_scatter = ring_pass_seconds(bytes, per_node, intra);
  double shard_allreduce = ring_allreduce_seconds(bytes / fewest_per_node, nodes, inter);
  double all_gather = ring_pass_seconds(bytes, per_node, intra);
  return reduce_scatter + shard_allreduce + all_gather;
}

double allgather_seconds(double bytes_total, int n, const Link& link) {
  return ring_pass_seconds(bytes_total, n, link);
}

double alltoall_seconds(double bytes_per_rank, int n, const Link& link) {
  return ring_pass_seconds(bytes_per_rank, n, link);
}

double allreduce_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes) {
  GroupSpan span = span_of(cluster, ranks);
  if (span.nodes <= 1) return ring_allreduce_seconds(bytes, static_cast<int>(ranks.size()), cluster.intra_node);
  return hierarchical_allreduce_seconds(bytes, span.per_node, span.fewest_per_node, span.nodes, cluster.intra_node,
                                        cluster.inter_node);
}

double allgather_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes_total) {
  return allgather_seconds(bytes_total, static_cast<int>(ranks.size()), group_link(cluster, span_of(cluster, ranks)));
}

double alltoall_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes_per_rank) {
  return alltoall_seconds(bytes_per_rank, static_cast<int>(ranks.size()), group_link(cluster, span_of(cluster, ranks)));
}

double reduce_scatter_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes) {
  GroupSpan span = span_of(cluster, ranks);
  if (span.nodes <= 1) return ring_pass_seconds(bytes, static_cast<int>(ranks.size()), cluster.intra_node);
  return ring_pass_seconds(bytes, span.per_node, cluster.intra_node) +
         ring_pass_seconds(bytes / span.fewest_per_node, span.nodes, cluster.inter_node);
}

double gradient_sync_seconds(const Cluster& cluster, const std::vector<int>& ranks, double param_elements,
                             plan::StateSharding sharding, plan::Precision precision) {
  const double grad_bytes = param_elements * kGradientElementBytes;
  if (sharding == plan::StateSharding::kNone) return allreduce_seconds(cluster, ranks, grad_bytes);
  return reduce_scatter_seconds(cluster, ranks, grad_bytes) +
         reduce_scatter_seconds(cluster, ranks, param_elements * working_weight_bytes(precision));
}

double offload_seconds(const Cluster& cluster, double param_elements, plan::Optimizer optimizer,
                       plan::Precision precision) {
  const HostSpec& host = cluster.host;
  double transfers = p2p_seconds(param_elements * working_weight_bytes(precision), host.link) +
                     p2p_seconds(param_elements * kGradientElementBytes, host.link);
  double touched = param_elements * (4 + 4 + 4 + 2 * optimizer_state_bytes(optimizer));
  double bandwidth = host.mem_bandwidth / cluster.gpus_per_node;
  return transfers + (bandwidth > 0 ? touched / bandwidth : 0);
}

double p2p_seconds(const Cluster& cluster, int from_rank, int to_rank, double bytes) {
  if (from_rank == to_rank) return 0;
  return p2p_seconds(bytes, group_link(cluster, span_of(cluster, {from_rank, to_rank})));
}

}  // namespace rannc::cost
