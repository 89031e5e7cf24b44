// Communication time: latency + bytes / bandwidth on the links a group of ranks spans.
//
// Collectives use the bandwidth-optimal ring algorithms NCCL and Gloo use: an allreduce moves
// 2(n-1)/n of the buffer through every rank's link in 2(n-1) steps; across nodes it is
// hierarchical (reduce-scatter inside each node, allreduce of the shards between nodes,
// all-gather inside each node), so only 1/k of the bytes cross the slow link.
#pragma once

#include <vector>

#include "cost_model/cluster.h"
#include "plan/options.h"

namespace rannc::cost {

// Bytes on the wire for `bytes` of fp32 (or wider) data: halved by 16-bit compression.
double wire_bytes(double bytes, bool compress_16bit);

// One message of `bytes` from one rank to another over `link`.
double p2p_seconds(double bytes, const Link& link);

// Allreduce of a `bytes` buffer among n ranks over one kind of link (ring).
double ring_allreduce_seconds(double bytes, int n, const Link& link);

// Allreduce among `per_node` ranks on each of `nodes` nodes: intra-node reduce-scatter,
// inter-node ring allreduce of the 1/per_node shards, intra-node all-gather.
double hierarchical_allreduce_seconds(double bytes, int per_node, int nodes, const Link& intra, const Link& inter);
// Uneven groups: the node with the fewest ranks pushes the largest shards (bytes / fewest)
// through each of its links; the intra-node passes take as long as on the fullest node.
double hierarchical_allreduce_seconds(double bytes, int per_node, int fewest_per_node, int nodes, const Link& intra,
                                      const Link& inter);

// All-gather where every rank ends with `bytes_total` (each contributes bytes_total / n).
double allgather_seconds(double bytes_total, int n, const Link& link);

// All-to-all where every rank sends bytes_per_rank in all, split evenly over the n ranks.
double alltoall_seconds(double bytes_per_rank, int n, const Link& link);

// The same collectives for a concrete group of ranks of the cluster: ring on the intra-node
// link when the group fits in one node, otherwise hierarchical (allreduce) or over the
// inter-node link (all-gather, all-to-all). Groups of one rank cost nothing. A rank outside the
// cluster is a planner bug and throws std::out_of_range.
double allreduce_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes);
double allgather_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes_total);
double alltoall_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes_per_rank);
double p2p_seconds(const Cluster& cluster, int from_rank, int to_rank, double bytes);

// Reduce-scatter of `bytes` among a group (each rank ends with bytes / n of the sum), or its
// mirror the all-gather: one ring pass in a node; across nodes the first (or last) half of the
// hierarchical allreduce, so that reduce-scatter plus all-gather is exactly an allreduce.
double reduce_scatter_seconds(const Cluster& cluster, const std::vector<int>& ranks, double bytes);

// A stage's gradient synchronisation each step among its ranks, for `param_elements` trainable
// elements: an allreduce of the fp32 gradients; with sharded state a reduce-scatter of them and
// an all-gather of the updated working weights (16-bit under mixed precision).
double gradient_sync_seconds(const Cluster& cluster, const std::vector<int>& ranks, double param_elements,
                             plan::StateSharding sharding, plan::Precision precision);

// What offloading a stage of `param_elements` trainable elements costs each step, per device:
// the working weights copied to the device and the gradients back over the host link, and the
// optimizer step on the host, which reads and writes the weights, reads the gradients and
// reads and writes the optimizer state at the host's memory bandwidth shared by the node's devices.
double offload_seconds(const Cluster& cluster, double param_elements, plan::Optimizer optimizer,
                       plan::Precision precision);

}  // namespace rannc::cost
