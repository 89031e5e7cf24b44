// The interleaved-1F1B search: equal chunks of equal blocks, its objective against the simulated
// step, and each group's recomputation chosen by the memory its chunks keep at the schedule's peak.
#include <catch2/catch.hpp>

#include <limits>

#include "cost_model/device.h"
#include "partitioner/interleave.h"
#include "partitioner/simulate.h"

namespace rannc::partition {
namespace {

// `count` equal blocks, each with its own weight and kept activations, passing each other
// tensors of no bytes (no transfer time, so the formula and the simulation agree exactly).
BlockCosts equal_blocks(int count, double kept_bytes) {
  BlockCosts blocks;
  blocks.evaluated_batch = 1;
  blocks.samples = {1};
  for (int b = 0; b < count; ++b) {
    blocks.fwd_ms.push_back({1.0});
    blocks.bwd_ms.push_back({2.0});
    blocks.workspace_bytes.push_back({1e6});
    blocks.kept_bytes.push_back(kept_bytes);
    blocks.weights.push_back({1e6, 0, {b}, {b}});
    if (b > 0) blocks.tensors.push_back({0, b - 1, {b}, false});
  }
  blocks.tensors.push_back({0, -1, {0}, false});
  blocks.tensors.push_back({0, count - 1, {}, true});
  return blocks;
}

cost::Cluster one_node(int devices, double mem_bytes) {
  cost::Cluster cluster;
  cluster.device = *cost::find_device_preset("a100-80g");
  cluster.gpus_per_node = devices;
  cluster.nodes = 1;
  cluster.mem_bytes = static_cast<std::int64_t>(mem_bytes);
  cluster.intra_node = cluster.device.intra_node;
  cluster.inter_node = cluster.device.inter_node;
  return cluster;
}

// 4 groups of one device, v chunks each, M = 8 microbatches of one sample.
SearchConfig four_groups(int chunks) {
  SearchConfig config;
  config.pipeline_devices = 4;
  config.microbatches = 8;
  config.microbatch_size = 1;
  config.tensor_degree = 1;
  config.stages = 4;
  config.chunks = chunks;
  return config;
}

}  // namespace

TEST_CASE("interleaving equal blocks cuts equal chunks whose objective is the simulated step", "[interleave]") {
  BlockCosts blocks = equal_blocks(24, 1e6);
  RangeTable ranges(blocks);
  cost::Cluster cluster = one_node(4, 1e12);
  SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kSgd, plan::Precision::kFp32, {}, {}};
  for (int chunks : {2, 3, 6}) {
    INFO(chunks << " chunks");
    StageOptions options(context, four_groups(chunks));
    auto solution = search_interleaved(options, std::numeric_limits<double>::infinity());
    REQUIRE(solution);
    REQUIRE(solution->stages.size() == static_cast<std::size_t>(4 * chunks));
    std::vector<SimulatedStage> simulated;
    for (const auto& chunk : solution->stages) {
      CHECK(chunk.end - chunk.begin == 24 / (4 * chunks));
      CHECK(chunk.recompute == plan::Recompute::kNone);
      simulated.push_back({chunk.fwd_ms, chunk.bwd_ms, chunk.p2p_ms / 2, chunk.allreduce_ms});
    }
    // (M v + p - 1) chunk times: Narayanan et al.'s bubble of (p - 1) / v group times.
    const double chunk_ms = solution->stages[0].t_ms;
    CHECK(solution->objective_ms() == Approx((8 * chunks + 4 - 1) * chunk_ms));
    auto step = simulate(simulated, std::vector<int>(simulated.size(), 1), 8, plan::Schedule::k1F1B, chunks);
    CHECK(step.iteration_ms == Approx(solution->objective_ms()));
    // Fewer chunks, a longer fill and drain.
    CHECK(solution->objective_ms() < (8 + 4 - 1) * chunks * chunk_ms);
  }
  // Microbatches that are no multiple of the groups, or more chunks than blocks, find none.
  SearchConfig odd = four_groups(2);
  odd.microbatches = 6;
  CHECK_FALSE(search_interleaved(StageOptions(context, odd), std::numeric_limits<double>::infinity()));
  CHECK_FALSE(search_interleaved(StageOptions(context, four_groups(8)), std::numeric_limits<double>::infinity()));
}

TEST_CASE("each interleaved group recomputes only where its chunks' peak does not fit", "[interleave]") {
  BlockCosts blocks = equal_blocks(16, 4e8);
  RangeTable ranges(blocks);
  cost::Cluster roomy = one_node(4, 1e13);
  SearchContext context{&blocks, &ranges, &roomy, plan::Optimizer::kSgd, plan::Precision::kFp32, {}, {}};
  auto solution = search_interleaved(StageOptions(context, four_groups(2)), std::numeric_limits<double>::infinity());
  REQUIRE(solution);
  // The first group keeps 11 chunk-microbatches at its peak, the last 5: a limit between their
  // memories makes the first recompute and leaves the last alone.
  StageOptions roomy_options(context, four_groups(2));
  auto memory_of = [&](const StageOptions& options, const PipelineSolution& s, int group) {
    std::vector<StageOption> chunks{s.stages[group], s.stages[group + 4]};
    return group_memory(options, chunks, plan::chunks_in_flight_at_peak(4, group, 2, 8)).total();
  };
  const double first = memory_of(roomy_options, *solution, 0), last = memory_of(roomy_options, *solution, 3);
  REQUIRE(first > last);
  cost::Cluster tight = one_node(4, (first + last) / 2);
  context.cluster = &tight;
  StageOptions tight_options(context, four_groups(2));
  auto fitted = search_interleaved(tight_options, std::numeric_limits<double>::infinity());
  REQUIRE(fitted);
  CHECK(fitted->stages[0].recompute == plan::Recompute::kFull);
  CHECK(fitted->stages[4].recompute == plan::Recompute::kFull);
  CHECK(fitted->stages[3].recompute == plan::Recompute::kNone);
  CHECK(fitted->stages[7].recompute == plan::Recompute::kNone);
  for (int group = 0; group < 4; ++group) CHECK(memory_of(tight_options, *fitted, group) <= tight.mem_bytes);
  CHECK(fitted->objective_ms() > solution->objective_ms());
}

}  // namespace rannc::partition
