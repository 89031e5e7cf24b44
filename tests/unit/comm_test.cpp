// Communication times against hand-computed latency + bytes / bandwidth sums.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "cost_model/comm.h"

using namespace rannc::cost;

namespace {

const Link kFast{100e9, 1e-6};  // 100 GB/s, 1 us
const Link kSlow{10e9, 10e-6};  // 10 GB/s, 10 us

// Two nodes of four devices, fast inside a node, slow between nodes.
Cluster two_nodes() {
  Cluster c;
  c.nodes = 2;
  c.gpus_per_node = 4;
  c.intra_node = kFast;
  c.inter_node = kSlow;
  return c;
}

}  // namespace

TEST_CASE("p2p and wire bytes", "[comm]") {
  CHECK(p2p_seconds(1e9, kFast) == Approx(1e-6 + 1e9 / 100e9));
  CHECK(wire_bytes(1e9, false) == 1e9);
  CHECK(wire_bytes(1e9, true) == 0.5e9);
}

TEST_CASE("ring collectives against the formulas", "[comm]") {
  // 1 GB on 8 ranks: 2*7 steps of 1 us, and 2*7/8 of the buffer through each link.
  CHECK(ring_allreduce_seconds(1e9, 8, kFast) == Approx(14e-6 + 1.75e9 / 100e9));
  CHECK(allgather_seconds(1e9, 8, kFast) == Approx(7e-6 + 0.875e9 / 100e9));
  CHECK(alltoall_seconds(1e9, 4, kSlow) == Approx(3 * 10e-6 + 0.75e9 / 10e9));
  CHECK(ring_allreduce_seconds(1e9, 2, kSlow) == Approx(2 * 10e-6 + 1e9 / 10e9));
}

TEST_CASE("groups of one cost nothing", "[comm]") {
  CHECK(ring_allreduce_seconds(1e9, 1, kFast) == 0);
  CHECK(ring_allreduce_seconds(1e9, 0, kFast) == 0);
  CHECK(allgather_seconds(1e9, 1, kFast) == 0);
  CHECK(alltoall_seconds(1e9, 1, kFast) == 0);
  Cluster c = two_nodes();
  CHECK(allreduce_seconds(c, {5}, 1e9) == 0);
  CHECK(allgather_seconds(c, {5}, 1e9) == 0);
  CHECK(alltoall_seconds(c, {}, 1e9) == 0);
  CHECK(p2p_seconds(c, 3, 3, 1e9) == 0);
}

TEST_CASE("compression halves the bandwidth term", "[comm]") {
  Link no_latency{100e9, 0};
  double full = ring_allreduce_seconds(wire_bytes(1e9, false), 8, no_latency);
  double half = ring_allreduce_seconds(wire_bytes(1e9, true), 8, no_latency);
  CHECK(half == Approx(full / 2));
  // With latency, only the bandwidth term halves.
  double with_latency = ring_allreduce_seconds(wire_bytes(1e9, true), 8, kFast);
  CHECK(with_latency == Approx(14e-6 + 1.75e9 / 100e9 / 2));
}

TEST_CASE("hierarchical allreduce", "[comm]") {
  // 4 per node on 2 nodes: reduce-scatter and all-gather inside (3 steps, 3/4 of the buffer each),
  // allreduce of the 1/4 shards between the 2 nodes (2 steps, 1/4 of the buffer in all).
  double intra_pass = 3 * 1e-6 + 0.75e9 / 100e9;
  double inter = 2 * 10e-6 + 0.25e9 / 10e9;
  CHECK(hierarchical_allreduce_seconds(1e9, 4, 2, kFast, kSlow) == Approx(2 * intra_pass + inter));
  // One node, or one device per node, falls back to the plain ring on the one link used.
  CHECK(hierarchical_allreduce_seconds(1e9, 4, 1, kFast, kSlow) == Approx(ring_allreduce_seconds(1e9, 4, kFast)));
  CHECK(hierarchical_allreduce_seconds(1e9, 1, 4, kFast, kSlow) == Approx(ring_allreduce_seconds(1e9, 4, kSlow)));
}

TEST_CASE("group collectives pick the links the group spans", "[comm]") {
  Cluster c = two_nodes();
  std::vector<int> node0{0, 1, 2, 3};
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  CHECK(allreduce_seconds(c, node0, 1e9) == Approx(ring_allreduce_seconds(1e9, 4, kFast)));
  CHECK(allgather_seconds(c, node0, 1e9) == Approx(allgather_seconds(1e9, 4, kFast)));
  CHECK(alltoall_seconds(c, node0, 1e9) == Approx(alltoall_seconds(1e9, 4, kFast)));

  double hierarchical = allreduce_seconds(c, all, 1e9);
  CHECK(hierarchical == Approx(hierarchical_allreduce_seconds(1e9, 4, 2, kFast, kSlow)));
  CHECK(hierarchical < ring_allreduce_seconds(1e9, 8, kSlow));
  // Uneven groups use the fullest node: 3 ranks on node 0, 1 on node 1.
  // Node 1 holds one rank of {0, 1, 2, 4}: it exchanges the whole buffer over its one link.
  CHECK(allreduce_seconds(c, {0, 1, 2, 4}, 1e9) == Approx(hierarchical_allreduce_seconds(1e9, 3, 1, 2, kFast, kSlow)));
  CHECK(allreduce_seconds(c, {0, 1, 2, 4}, 1e9) > hierarchical_allreduce_seconds(1e9, 3, 2, kFast, kSlow));
  // All-gather and all-to-all across nodes run on the slow link throughout.
  CHECK(allgather_seconds(c, all, 1e9) == Approx(allgather_seconds(1e9, 8, kSlow)));
  CHECK(alltoall_seconds(c, {3, 4}, 1e9) == Approx(alltoall_seconds(1e9, 2, kSlow)));
}

TEST_CASE("p2p inside a node and across nodes", "[comm]") {
  Cluster c = two_nodes();
  CHECK(p2p_seconds(c, 0, 3, 1e9) == Approx(p2p_seconds(1e9, kFast)));
  CHECK(p2p_seconds(c, 3, 4, 1e9) == Approx(p2p_seconds(1e9, kSlow)));
  CHECK(p2p_seconds(c, 3, 0, 1e9) < p2p_seconds(c, 3, 4, 1e9));
  CHECK_THROWS_AS(p2p_seconds(c, 0, 8, 1e9), std::out_of_range);
  CHECK_THROWS_AS(allreduce_seconds(c, {-1, 0}, 1e9), std::out_of_range);
}

TEST_CASE("sharded state: reduce-scatter plus all-gather is an allreduce, 16-bit weights gather faster", "[comm]") {
  Cluster c = two_nodes();
  std::vector<int> node0{0, 1, 2, 3};
  std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  for (const auto& ranks : {node0, all}) {
    // One pass each way: together exactly the allreduce of the same bytes, in a node and across.
    CHECK(2 * reduce_scatter_seconds(c, ranks, 1e9) == Approx(allreduce_seconds(c, ranks, 1e9)));
    double plain = gradient_sync_seconds(c, ranks, 1e8, rannc::plan::StateSharding::kNone, rannc::plan::Precision::kFp32);
    CHECK(plain == Approx(allreduce_seconds(c, ranks, 4e8)));  // fp32 gradients
    double sharded_fp32 =
        gradient_sync_seconds(c, ranks, 1e8, rannc::plan::StateSharding::kOptimizer, rannc::plan::Precision::kFp32);
    CHECK(sharded_fp32 == Approx(plain));
    double sharded_bf16 =
        gradient_sync_seconds(c, ranks, 1e8, rannc::plan::StateSharding::kOptimizer, rannc::plan::Precision::kBf16Mixed);
    CHECK(sharded_bf16 == Approx(reduce_scatter_seconds(c, ranks, 4e8) + reduce_scatter_seconds(c, ranks, 2e8)));
    CHECK(sharded_bf16 < plain);
  }
}

TEST_CASE("offload: the host link both ways and the optimizer step at the host's shared bandwidth", "[comm]") {
  Cluster c = two_nodes();
  c.host.link = Link{25e9, 10e-6};
  c.host.mem_bandwidth = 400e9;  // shared by the node's 4 devices: 100 GB/s each
  // 1e8 elements of fp32 Adam: weights in (4e8 B) and gradients out (4e8 B), then the step reads
  // and writes the weights (8 B), reads the gradients (4 B) and reads and writes both moments (16 B).
  double expected = 2 * (10e-6 + 4e8 / 25e9) + 1e8 * 28 / 100e9;
  CHECK(offload_seconds(c, 1e8, rannc::plan::Optimizer::kAdam, rannc::plan::Precision::kFp32) == Approx(expected));
  // Mixed precision sends 16-bit weights in; SGD has no state to touch.
  double sgd_bf16 = 10e-6 + 2e8 / 25e9 + 10e-6 + 4e8 / 25e9 + 1e8 * 12 / 100e9;
  CHECK(offload_seconds(c, 1e8, rannc::plan::Optimizer::kSgd, rannc::plan::Precision::kBf16Mixed) == Approx(sgd_bf16));
}
