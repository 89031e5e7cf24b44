// The stage search against brute-force enumeration of every pipeline on random small instances,
// against itself without a beat to stay below, and against RaNNC's separable dynamic program; the
// planner's search of configs on any count of threads.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <memory>
#include <random>

#include "cost_model/comm.h"
#include "cost_model/device.h"
#include "partitioner/planner.h"
#include "partitioner/stage_search.h"

namespace rannc::partition {
namespace {

// A random chain of blocks with skip tensors, optional tied weights and costs that grow with the
// microbatch (with a fixed overhead, so splitting a microbatch never saves work).
BlockCosts random_blocks(std::mt19937& rng, int count, const std::vector<int>& samples) {
  std::uniform_real_distribution<double> unit(0, 1);
  BlockCosts blocks;
  blocks.evaluated_batch = 8;
  blocks.samples = samples;
  for (int b = 0; b < count; ++b) {
    double base = 1 + 9 * unit(rng), backward_ratio = 1.5 + unit(rng), workspace = 1e8 * unit(rng);
    std::vector<double> fwd, bwd, ws;
    for (int s : samples) {
      fwd.push_back(0.2 + base * s / 8);
      bwd.push_back(backward_ratio * fwd.back());
      ws.push_back(workspace * s);
    }
    blocks.fwd_ms.push_back(fwd);
    blocks.bwd_ms.push_back(bwd);
    blocks.workspace_bytes.push_back(ws);
    blocks.kept_bytes.push_back(2e9 * unit(rng));
    blocks.weights.push_back({2e8 * unit(rng), 0, {b}, {}});
    if (b > 0) blocks.tensors.push_back({2e8 * unit(rng), b - 1, {b}, false});
    if (b > 1 && unit(rng) < 0.3) blocks.tensors.push_back({1e8 * unit(rng), b - 2, {b}, false});
  }
  blocks.tensors.push_back({1e7, -1, {0}, false});
  blocks.tensors.push_back({1e6, count - 1, {}, true});
  if (count > 2 && unit(rng) < 0.5) blocks.weights.push_back({1e8 * unit(rng), 0, {0, count - 1}, {0, count - 1}});  // tied
  return blocks;
}

// Gives the blocks host times to issue their passes (a GPU profile's), independent of the
// microbatch: some blocks host-bound, others not, so stages differ in which of their sums counts.
void add_host_times(std::mt19937& rng, BlockCosts& blocks) {
  std::uniform_real_distribution<double> ms(0, 12);
  blocks.fwd_host_ms.assign(blocks.fwd_ms.size(), {});
  blocks.bwd_host_ms.assign(blocks.bwd_ms.size(), {});
  for (std::size_t b = 0; b < blocks.fwd_ms.size(); ++b) {
    double fwd = ms(rng), bwd = 2 * ms(rng);
    blocks.fwd_host_ms[b].assign(blocks.samples.size(), fwd);
    blocks.bwd_host_ms[b].assign(blocks.samples.size(), bwd);
  }
}

// Attention cores in some blocks (selective recomputation): a share of the block's forward and
// of its kept activations, the largest core a part of that.
void add_cores(std::mt19937& rng, BlockCosts& blocks) {
  std::uniform_real_distribution<double> unit(0, 1);
  for (std::size_t b = 0; b < blocks.fwd_ms.size(); ++b) {
    double share = unit(rng) < 0.4 ? 0 : 0.1 + 0.3 * unit(rng), kept_share = share > 0 ? 0.3 + 0.6 * unit(rng) : 0;
    std::vector<double> fwd;
    for (double ms : blocks.fwd_ms[b]) fwd.push_back(share * ms);
    blocks.cores.fwd_ms.push_back(fwd);
    blocks.cores.kept_bytes.push_back(kept_share * blocks.kept_bytes[b]);
    blocks.cores.largest_bytes.push_back(blocks.cores.kept_bytes.back() * (unit(rng) < 0.5 ? 1 : 0.5));
  }
  // Some cores span two blocks: no selective stage starts or ends between them.
  blocks.cuts_core_before.assign(blocks.fwd_ms.size() + 1, false);
  for (std::size_t b = 1; b < blocks.fwd_ms.size(); ++b)
    blocks.cuts_core_before[b] = blocks.cores.kept_bytes[b - 1] > 0 && blocks.cores.kept_bytes[b] > 0 && unit(rng) < 0.5;
}

// Tensor parallelism of degrees 2 and 4 over the blocks: a random share of each block's work,
// activations and weights splits (1/t each, plus a fixed overhead per split op), and the group
// all-reduces a block's output in each pass.
void add_splits(std::mt19937& rng, BlockCosts& blocks) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<double> share(blocks.fwd_ms.size());
  for (auto& x : share) x = unit(rng) < 0.3 ? 0 : 0.5 + 0.5 * unit(rng);
  // Some boundaries between blocks cut a region: no split stage starts or ends there.
  std::vector<bool> cuts(share.size() + 1, false);
  for (std::size_t b = 1; b < share.size(); ++b) cuts[b] = unit(rng) < 0.2;
  for (int degree : {2, 4}) {
    BlockCosts::Split split;
    split.degree = degree;
    split.cuts_region_before = cuts;
    for (std::size_t b = 0; b < share.size(); ++b) {
      auto scale = [&](const std::vector<double>& whole) {
        std::vector<double> out;
        for (double x : whole) out.push_back(x * (1 - share[b] + share[b] / degree) + (share[b] > 0 ? 0.05 : 0));
        return out;
      };
      split.fwd_ms.push_back(scale(blocks.fwd_ms[b]));
      split.bwd_ms.push_back(scale(blocks.bwd_ms[b]));
      split.workspace_bytes.push_back(scale(blocks.workspace_bytes[b]));
      split.kept_bytes.push_back(blocks.kept_bytes[b] * (1 - share[b] + share[b] / degree));
      if (!blocks.cores.fwd_ms.empty()) {  // the cores are in the split part of the block
        auto split_share = [&](double x) { return x * (share[b] > 0 ? 1.0 / degree : 1.0); };
        std::vector<double> fwd;
        for (double ms : blocks.cores.fwd_ms[b]) fwd.push_back(split_share(ms));
        split.cores.fwd_ms.push_back(fwd);
        split.cores.kept_bytes.push_back(split_share(blocks.cores.kept_bytes[b]));
        split.cores.largest_bytes.push_back(split_share(blocks.cores.largest_bytes[b]));
      }
      bool reduces = share[b] > 0;
      split.fwd_reduced_bytes.push_back(reduces ? 1e8 * unit(rng) : 0);
      split.bwd_reduced_bytes.push_back(reduces ? 1e8 * unit(rng) : 0);
      split.fwd_collectives.push_back(reduces ? 1 : 0);
      split.bwd_collectives.push_back(reduces ? 1 : 0);
    }
    blocks.splits.push_back(split);
  }
  for (auto& weight : blocks.weights)
    if (share[weight.blocks.front()] > 0 && unit(rng) < 0.8) weight.split_divisor = 4;
}

// Context parallelism of degree c with each tensor degree costed (1 too): each device runs 1/c of
// the positions, a little more than 1/c of the work, and the group passes keys and values in the
// blocks with attention; some boundaries cut an attention core.
void add_context_splits(std::mt19937& rng, BlockCosts& blocks, int context) {
  std::uniform_real_distribution<double> unit(0, 1);
  std::vector<BlockCosts::Split> added;
  std::vector<bool> cuts(blocks.fwd_ms.size() + 1, false);
  std::vector<double> exchanged;
  std::vector<int> exchanges;
  for (std::size_t b = 0; b < blocks.fwd_ms.size(); ++b) {
    exchanges.push_back(unit(rng) < 0.5 ? 0 : 1 + static_cast<int>(rng() % 2));
    exchanged.push_back(exchanges.back() > 0 ? 1e8 * unit(rng) : 0);
  }
  for (std::size_t b = 1; b < blocks.fwd_ms.size(); ++b) cuts[b] = unit(rng) < 0.15;
  BlockCosts::Split whole;
  whole.degree = 1;
  whole.fwd_ms = blocks.fwd_ms, whole.bwd_ms = blocks.bwd_ms, whole.workspace_bytes = blocks.workspace_bytes;
  whole.kept_bytes = blocks.kept_bytes, whole.cores = blocks.cores;
  for (auto& table : {&whole.fwd_reduced_bytes, &whole.bwd_reduced_bytes})
    table->assign(blocks.fwd_ms.size(), 0);
  whole.fwd_collectives.assign(blocks.fwd_ms.size(), 0), whole.bwd_collectives.assign(blocks.fwd_ms.size(), 0);
  whole.cuts_region_before.assign(blocks.fwd_ms.size() + 1, false);
  std::vector<BlockCosts::Split> sources{whole};
  for (const auto& split : blocks.splits) sources.push_back(split);
  for (auto split : sources) {
    auto share = [&](std::vector<std::vector<double>>& table) {
      for (auto& row : table)
        for (auto& x : row) x = x / context + 0.02;
    };
    share(split.fwd_ms), share(split.bwd_ms), share(split.workspace_bytes), share(split.cores.fwd_ms);
    split.context = context;
    split.exchanged_bytes = exchanged;
    split.exchanges = exchanges;
    for (std::size_t b = 0; b < cuts.size(); ++b) split.cuts_region_before[b] = split.cuts_region_before[b] || cuts[b];
    added.push_back(split);
  }
  blocks.splits.insert(blocks.splits.end(), added.begin(), added.end());
}

cost::Cluster small_cluster(int devices, double mem_bytes) {
  cost::Cluster cluster;
  cluster.device = *cost::find_device_preset("a100-80g");
  cluster.gpus_per_node = std::min(devices, 4);
  cluster.nodes = (devices + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
  cluster.mem_bytes = static_cast<std::int64_t>(mem_bytes);
  cluster.intra_node = cluster.device.intra_node;
  cluster.inter_node = cluster.device.inter_node;
  return cluster;
}

// One pipeline of `devices` devices running `microbatches` microbatches of `size` samples.
SearchConfig one_pipeline(int devices, int microbatches, int size) {
  SearchConfig config;
  config.pipeline_devices = devices;
  config.microbatches = microbatches;
  config.microbatch_size = size;
  return config;
}

void enumerate(const StageOptions& options, int begin, int devices_left, std::vector<StageOption>& stages,
               std::optional<PipelineSolution>& best, long& pipelines) {
  if (begin == options.block_count()) {
    ++pipelines;
    auto solution = evaluate_pipeline(options, stages);
    if (solution && (!best || solution->objective_ms() < best->objective_ms())) best = solution;
    return;
  }
  for (int end = begin + 1; end <= options.block_count(); ++end) {
    for (int degree : options.tensor_degrees()) {
      for (int replicas : options.replica_choices()) {
        if (replicas * degree * options.config().context_degree > devices_left) continue;
        for (auto recompute : {plan::Recompute::kNone, plan::Recompute::kSelective, plan::Recompute::kFull}) {
          for (auto sharding : {plan::StateSharding::kNone, plan::StateSharding::kOptimizer}) {
            for (bool offload : {false, true}) {
              auto option = options.evaluate(begin, end, replicas, recompute, sharding, offload, degree);
              if (!option) continue;
              stages.push_back(*option);
              enumerate(options, end, devices_left - option->devices(), stages, best, pipelines);
              stages.pop_back();
            }
          }
        }
      }
    }
  }
}

std::optional<PipelineSolution> brute_force(const StageOptions& options, long& pipelines) {
  std::optional<PipelineSolution> best;
  std::vector<StageOption> stages;
  enumerate(options, 0, options.config().pipeline_devices, stages, best, pipelines);
  return best;
}

struct RandomCase {
  int blocks, devices, microbatches, microbatch_size;
  plan::Schedule schedule;
  std::optional<int> stages;
  double mem_gb;
  plan::Precision precision = plan::Precision::kFp32;
};

RandomCase random_case(std::mt19937& rng, int index) {
  static const int kSizes[] = {1, 2, 4, 6, 8};
  static const int kMicrobatches[] = {1, 2, 3, 4, 8};
  RandomCase c;
  c.devices = 1 + index % 8;
  // Up to 12 blocks on few devices, up to 8 devices on fewer blocks: brute force stays fast.
  c.blocks = c.devices <= 3 ? 6 + index % 7 : c.devices <= 5 ? 4 + index % 6 : 3 + index % 5;
  c.microbatches = kMicrobatches[rng() % 5];
  c.microbatch_size = kSizes[rng() % 5];
  c.schedule = rng() % 4 == 0 ? plan::Schedule::kGPipe : plan::Schedule::k1F1B;
  if (rng() % 5 == 0) c.stages = 1 + static_cast<int>(rng() % std::min(c.devices, c.blocks));
  c.mem_gb = 3 + static_cast<double>(rng() % 40);
  // Mixed precision gathers 16-bit weights: sharded state is then faster as well as smaller.
  if (index % 3 == 2) c.precision = plan::Precision::kBf16Mixed;
  return c;
}

// A random case with its blocks (host times, attention cores and tensor-parallel splits on some)
// and cluster, and what a search of it refers to.
struct Instance {
  RandomCase c;
  BlockCosts blocks;
  std::unique_ptr<RangeTable> ranges;
  cost::Cluster cluster;
  SearchContext context() const {
    return {&blocks, ranges.get(), &cluster, plan::Optimizer::kAdam, c.precision, {}, {}};
  }
  SearchConfig config() const {
    return {1, c.devices, c.microbatches, c.microbatch_size, c.schedule, c.stages, {}, {}};
  }
};

// Blocks 1 to n - 2 made alike, as a model's repeated layers are: pipelines that cut them
// differently tie, and the search must keep the same one of them whatever it leaves out.
void repeat_middle_blocks(BlockCosts& blocks) {
  auto repeat = [&](auto& by_block) {
    for (int b = 2; b + 1 < static_cast<int>(by_block.size()); ++b) by_block[b] = by_block[1];
  };
  for (auto* table : {&blocks.fwd_ms, &blocks.bwd_ms, &blocks.workspace_bytes, &blocks.fwd_host_ms, &blocks.bwd_host_ms,
                      &blocks.cores.fwd_ms})
    repeat(*table);
  repeat(blocks.kept_bytes), repeat(blocks.cores.kept_bytes), repeat(blocks.cores.largest_bytes);
  for (auto& split : blocks.splits) {
    repeat(split.fwd_ms), repeat(split.bwd_ms), repeat(split.workspace_bytes), repeat(split.kept_bytes);
    repeat(split.cores.fwd_ms), repeat(split.cores.kept_bytes), repeat(split.cores.largest_bytes);
    repeat(split.fwd_reduced_bytes), repeat(split.bwd_reduced_bytes), repeat(split.fwd_collectives), repeat(split.bwd_collectives);
  }
  for (int b = 2; b + 1 < blocks.count(); ++b) {
    blocks.weights[b].param_elements = blocks.weights[1].param_elements;
    blocks.weights[b].split_divisor = blocks.weights[1].split_divisor;
  }
  for (auto& tensor : blocks.tensors)
    if (tensor.producer >= 1 && tensor.producer + 2 < blocks.count() && tensor.consumers == std::vector<int>{tensor.producer + 1})
      tensor.bytes = 1e8;
}

// `larger`: up to 24 blocks on up to 16 devices, too many to enumerate.
Instance random_instance(std::mt19937& rng, int index, bool larger = false, bool repeated = false) {
  Instance instance;
  RandomCase& c = instance.c;
  c = random_case(rng, index);
  if (larger) {
    c.devices = 4 + index % 13;
    c.blocks = 8 + index % 17;
    if (c.stages) c.stages = 1 + *c.stages % std::min(c.devices, c.blocks);
  }
  std::vector<int> samples;
  for (int r = 1; r <= c.microbatch_size; ++r)
    if (c.microbatch_size % r == 0) samples.push_back(c.microbatch_size / r);
  std::sort(samples.begin(), samples.end());
  instance.blocks = random_blocks(rng, c.blocks, samples);
  std::mt19937 host_rng(index);
  if (index % 3 == 1) add_host_times(host_rng, instance.blocks);
  if (index % 4 != 3) add_cores(host_rng, instance.blocks);
  if ((index / 8) % 2 == 0) add_splits(host_rng, instance.blocks);
  if (repeated) repeat_middle_blocks(instance.blocks);
  instance.ranges = std::make_unique<RangeTable>(instance.blocks);
  instance.cluster = small_cluster(c.devices, c.mem_gb * 1e9);
  // Host memory per node: none (nothing offloads), little, or plenty.
  static const double kHostGb[] = {0, 24, 96, 1024};
  instance.cluster.host = instance.cluster.device.host;
  instance.cluster.host.mem_bytes = static_cast<std::int64_t>(kHostGb[index % 4] * 1e9);
  return instance;
}

// The same stages, bit for bit.
bool same_stages(const PipelineSolution& a, const PipelineSolution& b) {
  auto same = [](const StageOption& x, const StageOption& y) {
    return x.begin == y.begin && x.end == y.end && x.replicas == y.replicas && x.tensor_degree == y.tensor_degree &&
           x.recompute == y.recompute && x.sharding == y.sharding && x.offload == y.offload && x.t_ms == y.t_ms &&
           x.term_ms == y.term_ms && x.max_in_flight == y.max_in_flight;
  };
  return std::equal(a.stages.begin(), a.stages.end(), b.stages.begin(), b.stages.end(), same);
}

}  // namespace

TEST_CASE("the stage search finds the brute-force optimum on random small instances", "[stage_search]") {
  std::mt19937 rng(20261121);
  int feasible = 0, with_recompute = 0, selective = 0, multi_stage = 0, replicated = 0, sharded = 0, offloaded = 0, tensor_split = 0;
  for (int index = 0; index < 320; ++index) {
    Instance instance = random_instance(rng, index);
    const RandomCase& c = instance.c;
    const cost::Cluster& cluster = instance.cluster;
    SearchContext context = instance.context();
    SearchConfig config = instance.config();
    StageOptions options(context, config);
    long pipelines = 0;
    auto expected = brute_force(options, pipelines);
    auto found = search_pipeline(options, std::numeric_limits<double>::infinity());
    INFO("case " << index << ": " << c.blocks << " blocks, " << c.devices << " devices, M=" << c.microbatches
                 << ", b=" << c.microbatch_size << ", " << plan::schedule_name(c.schedule) << ", "
                 << (c.stages ? std::to_string(*c.stages) + " stages forced" : "stages free") << ", " << c.mem_gb
                 << " GB, host " << cluster.host.mem_bytes / 1e9 << " GB, " << plan::precision_name(c.precision) << "; "
                 << pipelines << " pipelines enumerated");
    REQUIRE(found.has_value() == expected.has_value());
    if (!expected) continue;
    ++feasible;
    CHECK(found->objective_ms() == Approx(expected->objective_ms()).epsilon(1e-12));
    // The solution is a real pipeline whose own evaluation gives the objective reported.
    auto again = evaluate_pipeline(options, found->stages);
    REQUIRE(again);
    CHECK(again->objective_ms() == Approx(found->objective_ms()).epsilon(1e-12));
    multi_stage += found->stages.size() > 1;
    for (const auto& stage : found->stages) {
      with_recompute += stage.recompute == plan::Recompute::kFull;
      selective += stage.recompute == plan::Recompute::kSelective;
      if (stage.recompute == plan::Recompute::kSelective) {
        CHECK_FALSE(instance.blocks.cuts_core(stage.begin));
        CHECK_FALSE(instance.blocks.cuts_core(stage.end));
      }
      replicated += stage.replicas > 1;
      sharded += stage.sharding != plan::StateSharding::kNone;
      offloaded += stage.offload;
      tensor_split += stage.tensor_degree > 1;
    }
  }
  // The instances exercise what the search decides: not only trivial answers.
  CHECK(feasible >= 160);
  CHECK(multi_stage >= 40);
  CHECK(with_recompute >= 10);
  CHECK(selective >= 10);
  CHECK(replicated >= 40);
  CHECK(sharded >= 20);
  CHECK(offloaded >= 10);
  CHECK(tensor_split >= 20);
}

TEST_CASE("with context parallelism the stage search finds the brute-force optimum", "[stage_search][context]") {
  std::mt19937 rng(20261129);
  int feasible = 0, split_groups = 0, multi_stage = 0;
  for (int index = 0; index < 240; ++index) {
    Instance instance = random_instance(rng, index);
    if (instance.c.devices % 2 != 0) continue;
    add_context_splits(rng, instance.blocks, 2);
    instance.ranges = std::make_unique<RangeTable>(instance.blocks);
    SearchConfig config = instance.config();
    config.context_degree = 2;
    StageOptions options(instance.context(), config);
    long pipelines = 0;
    auto expected = brute_force(options, pipelines);
    auto found = search_pipeline(options, std::numeric_limits<double>::infinity());
    INFO("case " << index << ": " << instance.c.blocks << " blocks, " << instance.c.devices << " devices, M="
                 << instance.c.microbatches << ", b=" << instance.c.microbatch_size << "; " << pipelines << " pipelines");
    REQUIRE(found.has_value() == expected.has_value());
    if (!expected) continue;
    ++feasible;
    CHECK(found->objective_ms() == Approx(expected->objective_ms()).epsilon(1e-12));
    multi_stage += found->stages.size() > 1;
    for (const auto& stage : found->stages) {
      CHECK(stage.context_degree == 2);
      CHECK(stage.devices() == stage.replicas * stage.tensor_degree * 2);
      split_groups += stage.tensor_degree > 1;
      // A stage runs the blocks' context tables, and waits for the keys and values in each pass.
      const BlockCosts::Split* split = instance.blocks.split(stage.tensor_degree, 2);
      REQUIRE(split != nullptr);
      CHECK_FALSE(split->cuts_region_before[stage.begin]);
      CHECK_FALSE(split->cuts_region_before[stage.end]);
    }
  }
  CHECK(feasible >= 60);
  CHECK(multi_stage >= 15);
  CHECK(split_groups >= 5);
}

TEST_CASE("a context group runs a share of the positions: half the samples' time, twice the replicas' copies",
          "[stage_search][context]") {
  std::mt19937 rng(7);
  BlockCosts blocks = random_blocks(rng, 4, {1, 2, 4});
  std::mt19937 extra(8);
  add_context_splits(extra, blocks, 2);
  for (auto& split : blocks.splits)  // two attention cores in the first block, one in the third
    if (split.context == 2) split.exchanges = {2, 0, 1, 0}, split.exchanged_bytes = {4e7, 0, 2e7, 0};
  RangeTable ranges(blocks);
  cost::Cluster cluster = small_cluster(4, 80e9);
  SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}, {}};
  SearchConfig plain = one_pipeline(4, 4, 4), split = plain;
  split.context_degree = 2;
  StageOptions whole_options(context, plain), context_options(context, split);
  // One stage of all blocks on 2 replicas of 2 samples: plainly on 2 devices, or on 2 groups of 2.
  auto a = whole_options.evaluate(0, 4, 2, plan::Recompute::kNone);
  auto b = context_options.evaluate(0, 4, 2, plan::Recompute::kNone);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->devices() == 2);
  CHECK(b->devices() == 4);
  const BlockCosts::Split* table = blocks.split(1, 2);
  REQUIRE(table);
  const int sample = blocks.sample_index(2);
  double fwd = 0, exchanged = 0;
  int rings = 0;
  for (int block = 0; block < 4; ++block)
    fwd += table->fwd_ms[block][sample], exchanged += table->exchanged_bytes[block], rings += table->exchanges[block];
  REQUIRE(rings == 3);
  // Forward: the context table, and an all-gather of the keys and values of the group's samples,
  // with each further ring's latency.
  const double gather_ms = (cost::allgather_seconds(exchanged * 2 / blocks.evaluated_batch, 2, cluster.intra_node) +
                            (rings - 1) * cost::allgather_seconds(0, 2, cluster.intra_node)) * 1e3;
  CHECK(b->fwd_ms == Approx(fwd + gather_ms).epsilon(1e-12));
  // Each device keeps half of what a replica of 2 samples keeps (its positions), and the group's
  // devices hold the whole weights, their gradients synchronised over the 4 of them.
  auto kept = [&](const StageOptions& options, const StageOption& option) {
    return options.memory(option, 1).activations;
  };
  CHECK(kept(context_options, *b) == Approx(kept(whole_options, *a) / 2).epsilon(1e-12));
  CHECK(context_options.memory(*b, 1).weights == whole_options.memory(*a, 1).weights);
}

TEST_CASE("a context group that spans nodes passes its keys and values over the nodes' link", "[stage_search][context]") {
  std::mt19937 rng(12);
  BlockCosts blocks = random_blocks(rng, 4, {1, 2, 4});
  add_splits(rng, blocks);
  add_context_splits(rng, blocks, 2);
  for (auto& split : blocks.splits)  // two attention cores in the first block, one in the third
    if (split.context == 2) split.exchanges = {2, 0, 1, 0}, split.exchanged_bytes = {4e7, 0, 2e7, 0};
  RangeTable ranges(blocks);
  cost::Cluster two_nodes = small_cluster(8, 80e9), one_node = two_nodes;
  one_node.gpus_per_node = 8, one_node.nodes = 1;
  REQUIRE(two_nodes.gpus_per_node == 4);
  SearchConfig config = one_pipeline(8, 4, 4);
  config.context_degree = 2;
  auto stage = [&](const cost::Cluster& cluster, int degree) {
    SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}, {}};
    StageOptions options(context, config);
    auto option = options.evaluate(0, 4, 1, plan::Recompute::kNone, plan::StateSharding::kNone, false, degree);
    REQUIRE(option);
    return *option;
  };
  // 2 context ranks of 4 tensor ranks: one in each node of 4. Each tensor rank's ring passes its
  // heads' share of its sample's keys and values (a quarter of 1/2 of 4 samples of 8 evaluated).
  auto spanning = stage(two_nodes, 4), inside = stage(one_node, 4);
  CHECK(spanning.devices() == 8);
  const double bytes = 6e7 * (4.0 / 8 / 2) * 2 / 4;
  auto ring_ms = [&](const cost::Link& link) {
    return (cost::allgather_seconds(bytes, 2, link) + 2 * cost::allgather_seconds(0, 2, link)) * 1e3;
  };
  CHECK(spanning.fwd_ms - inside.fwd_ms ==
        Approx(ring_ms(two_nodes.inter_node) - ring_ms(two_nodes.intra_node)).epsilon(1e-9));
  CHECK(spanning.fwd_ms > inside.fwd_ms);
  // Groups of 2 x 2 stay in a node of 4: the same ring either way.
  CHECK(stage(two_nodes, 2).fwd_ms == Approx(stage(one_node, 2).fwd_ms).epsilon(1e-12));
}

TEST_CASE("a tensor-parallel stage's replicas synchronise at the group's stride, across nodes where it takes them",
          "[stage_search][tensor]") {
  std::mt19937 rng(11);
  BlockCosts blocks = random_blocks(rng, 4, {1, 2, 4});
  add_splits(rng, blocks);
  RangeTable ranges(blocks);
  cost::Cluster cluster = small_cluster(8, 80e9);  // 2 nodes of 4
  REQUIRE(cluster.gpus_per_node == 4);
  SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}, {}};
  StageOptions options(context, one_pipeline(8, 4, 4));
  // Each device synchronises its slice with the same tensor rank of the other replica: the
  // devices 0 and 4 (one in each node) for 2 groups of 4, 0 and 2 (one node) for 2 groups of 2.
  for (auto [degree, ranks] : {std::pair{4, std::vector<int>{0, 4}}, std::pair{2, std::vector<int>{0, 2}}}) {
    auto option = options.evaluate(0, 4, 2, plan::Recompute::kNone, plan::StateSharding::kNone, false, degree);
    REQUIRE(option);
    double elements = ranges.param_elements(0, 4, degree);
    REQUIRE(elements > 0);
    INFO("tensor degree " << degree);
    CHECK(option->allreduce_ms ==
          Approx(cost::gradient_sync_seconds(cluster, ranks, elements, plan::StateSharding::kNone, context.precision) * 1e3)
              .epsilon(1e-12));
  }
  // Replicas side by side in one node would synchronise faster: the stride is what costs.
  auto across = options.evaluate(0, 4, 2, plan::Recompute::kNone, plan::StateSharding::kNone, false, 4);
  REQUIRE(across);
  double side_by_side = cost::gradient_sync_seconds(cluster, {0, 1}, ranges.param_elements(0, 4, 4),
                                                    plan::StateSharding::kNone, context.precision) * 1e3;
  CHECK(across->allreduce_ms > side_by_side);
}

TEST_CASE("below a beat the stage search finds the pipeline it finds without one, stage for stage", "[stage_search]") {
  // What the search leaves out below a beat (stages and suffixes that cannot be part of a pipeline
  // below it, rounds that could not beat it, configs whose optimistic stages cannot) must never
  // change the pipeline it finds, down to the tie it keeps among equal ones: plans stay
  // byte-identical. Beats from half the best objective to twice it, the tightest ones the best
  // itself and the next double above it.
  // The instances of the brute-force test, then larger ones, half of them of repeated blocks.
  std::mt19937 rng(20261121);
  constexpr double kNoBeat = std::numeric_limits<double>::infinity();
  int found_again = 0, none_below = 0, ruled_out_early = 0;
  for (int index = 0; index < 1280; ++index) {
    Instance instance = random_instance(rng, index, index >= 320, index >= 320 && index % 2 == 0);
    SearchConfig config = instance.config();
    // Some with context parallelism, whose key and value rings the bounds count block by block.
    if (index % 5 == 4 && instance.c.devices % 2 == 0) {
      std::mt19937 context_rng(index);
      add_context_splits(context_rng, instance.blocks, 2);
      instance.ranges = std::make_unique<RangeTable>(instance.blocks);
      config.context_degree = 2;
    }
    SearchContext context = instance.context();
    auto unbounded = search_pipeline(StageOptions(context, config), kNoBeat);
    if (!unbounded) continue;
    const double best = unbounded->objective_ms();
    for (double beat : {best / 2, best * 0.999, best, std::nextafter(best, kNoBeat), best * (1 + 1e-9), best * 1.01,
                        best * 1.1, best * 2}) {
      INFO("case " << index << ", beat " << beat / best << " x the best");
      auto found = search_pipeline(StageOptions(context, config, beat), beat);
      const bool possible = may_beat(context, config, beat);
      if (best >= beat) {
        CHECK_FALSE(found);
        none_below += 1;
        ruled_out_early += !possible;
        continue;
      }
      CHECK(possible);
      REQUIRE(found);
      CHECK(found->objective_ms() == best);
      CHECK(same_stages(*found, *unbounded));
      ++found_again;
    }
  }
  INFO(found_again << " found again, " << none_below << " with none below the beat, " << ruled_out_early
                    << " of those by the optimistic stages");
  CHECK(found_again >= 3000);
  CHECK(none_below >= 1500);
  CHECK(ruled_out_early >= 500);  // the optimistic stages rule out configs, not only the full search
}

TEST_CASE("the configs of a request are searched alike on any count of threads", "[planner]") {
  // Rounds of configs, each searched against the best of the rounds before, decide the outcome:
  // the threads that share a round must change nothing, neither the pipelines kept nor the counts.
  std::mt19937 rng(31);
  BlockCosts blocks = random_blocks(rng, 10, {1, 2, 4, 8, 16, 32});
  std::mt19937 extra(32);
  add_cores(extra, blocks);
  add_splits(extra, blocks);
  RangeTable ranges(blocks);
  PlanRequest request;
  request.cluster = small_cluster(16, 12e9);  // 4 nodes of 4 devices
  request.global_batch = 32;
  request.max_tensor_degree = 4;
  request.max_interleave = 4;
  auto configs = candidate_configs(request, blocks.count(), {1, 2, 4});
  SearchContext context{&blocks, &ranges, &request.cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}, {}};
  for (bool explain : {false, true}) {
    auto search = [&](std::size_t threads, SearchCensus& census) {
      census.explain = explain;
      return search_configs(context, configs, &census, nullptr, threads);
    };
    SearchCensus one;
    auto serial = search(1, one);
    INFO((explain ? "with" : "without") << " explain: " << one.candidates << " configs, " << one.bounded_out
                                        << " bounded out, " << one.searched << " searched, " << one.failed << " failed");
    REQUIRE(serial.size() >= 2);
    CHECK(one.failed > 0);
    for (std::size_t threads : {2, 3, 8}) {
      SearchCensus census;
      auto choices = search(threads, census);
      REQUIRE(choices.size() == serial.size());
      for (std::size_t i = 0; i < choices.size(); ++i) {
        const SearchConfig &a = choices[i].config, &b = serial[i].config;
        CHECK((a.pipelines == b.pipelines && a.microbatches == b.microbatches && a.tensor_degree == b.tensor_degree &&
               a.chunks == b.chunks && a.stages == b.stages));
        CHECK(same_stages(choices[i].solution, serial[i].solution));
      }
      CHECK(census.bounded_out == one.bounded_out);
      CHECK(census.searched == one.searched);
      CHECK(census.failed == one.failed);
      CHECK(census.no_fit == one.no_fit);
      CHECK(census.slower == one.slower);
      CHECK(census.near == one.near);
      CHECK(census.beyond_slack.size() == one.beyond_slack.size());
    }
  }
}

TEST_CASE("a stage's pass takes the longer of its blocks' device and host sums", "[stage_search]") {
  std::mt19937 rng(11);
  BlockCosts blocks = random_blocks(rng, 3, {4});
  // Block 0 runs long kernels that hide the host; blocks 1 and 2 are issued more slowly than they run.
  blocks.fwd_ms = {{6}, {1}, {1}}, blocks.bwd_ms = {{12}, {2}, {2}};
  blocks.fwd_host_ms = {{1}, {3}, {3}}, blocks.bwd_host_ms = {{2}, {5}, {5}};
  RangeTable ranges(blocks);
  cost::Cluster cluster = small_cluster(1, 1e13);
  SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kSgd, plan::Precision::kFp32, {}, {}};
  SearchConfig config = one_pipeline(1, 1, 4);
  StageOptions options(context, config);
  auto whole = options.evaluate(0, 3, 1, plan::Recompute::kNone);
  REQUIRE(whole);
  CHECK(whole->fwd_ms == 8);   // kernels 8 against issuing 7
  CHECK(whole->bwd_ms == 16);  // 16 against 12
  auto tail = options.evaluate(1, 3, 1, plan::Recompute::kNone);
  REQUIRE(tail);
  CHECK(tail->fwd_ms == 6);    // issuing 6 against kernels 2
  CHECK(tail->bwd_ms == 10);
  auto recomputed = options.evaluate(1, 3, 1, plan::Recompute::kFull);
  REQUIRE(recomputed);
  CHECK(recomputed->bwd_ms == 16);  // the forward again: issuing 10 + 6
  CHECK(balanced_ms(context, config) == 24);
}

TEST_CASE("a stage that sends a value without a batch dim keeps one replica", "[stage_search]") {
  // Block 0 sends block 2 a batch-reduced value (x.mean()): replicas of block 0 would each send
  // their own partial mean, so any range that sends it runs unreplicated.
  std::mt19937 rng(7);
  BlockCosts blocks = random_blocks(rng, 4, {1, 2, 4});
  blocks.tensors.push_back({4, 0, {2}, false, /*batch_free=*/true});
  RangeTable ranges(blocks);
  CHECK(ranges.sends_batch_free(0, 1));
  CHECK(ranges.sends_batch_free(0, 2));
  CHECK_FALSE(ranges.sends_batch_free(0, 3));  // the consumer is inside: nothing sent
  CHECK_FALSE(ranges.sends_batch_free(1, 2));
  cost::Cluster cluster = small_cluster(4, 1e12);
  SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kSgd, plan::Precision::kFp32, {}, {}};
  StageOptions options(context, one_pipeline(4, 2, 4));
  CHECK_FALSE(options.evaluate(0, 1, 2, plan::Recompute::kNone));
  CHECK_FALSE(options.evaluate(0, 2, 4, plan::Recompute::kFull));
  CHECK(options.evaluate(0, 1, 1, plan::Recompute::kNone));
  CHECK(options.evaluate(0, 3, 2, plan::Recompute::kNone));
  for (int begin = 0; begin < 2; ++begin)
    for (const auto& option : options.from(begin))
      if (option.end <= 2 && begin == 0) CHECK(option.replicas == 1);
  auto best = search_pipeline(options, std::numeric_limits<double>::infinity());
  REQUIRE(best);
  for (const auto& stage : best->stages)
    if (stage.begin == 0 && stage.end <= 2) CHECK(stage.replicas == 1);
}

TEST_CASE("ranges tell what they receive and send from the model outputs the loss takes in place", "[stage_search]") {
  std::mt19937 rng(11);
  BlockCosts blocks = random_blocks(rng, 4, {1, 2, 4, 8});
  blocks.tensors.clear();
  blocks.tensors.push_back({100, 0, {1, 3}});                  // block 0 to blocks 1 and 3
  blocks.tensors.push_back({20, 1, {}, /*model_output=*/true});  // the logits: read by the loss only
  blocks.tensors.push_back({7, 2, {3}, /*model_output=*/true});  // an output a later block reads too
  RangeTable ranges(blocks);
  CHECK(ranges.sent_bytes(0, 1) == 100);
  CHECK(ranges.final_output_bytes(0, 1) == 0);
  CHECK(ranges.sent_bytes(0, 2) == 100 + 20);
  CHECK(ranges.final_output_bytes(0, 2) == 20);
  CHECK(ranges.received_bytes(1, 3) == 100);
  CHECK(ranges.sent_bytes(1, 3) == 20 + 7);
  CHECK(ranges.final_output_bytes(1, 3) == 20);  // the output block 3 reads is sent
  CHECK(ranges.final_output_bytes(3, 4) == 0);
  CHECK(ranges.saved_sent_bytes(0, 2) == 0);
  // A sent tensor an op keeps for backward is in kept_bytes already: not held twice.
  blocks.tensors.push_back({60, 0, {1}, false, false, /*saved=*/true});
  RangeTable with_saved(blocks);
  CHECK(with_saved.sent_bytes(0, 1) == 160);
  CHECK(with_saved.saved_sent_bytes(0, 1) == 60);
  CHECK(with_saved.saved_sent_bytes(0, 2) == 0);  // read inside the range: not sent
  blocks.tensors.pop_back();
  // Send and receive buffers, twice each, and the next pass's receive, which starts early: the
  // larger of the inputs from earlier stages and the gradients of what goes to later ones,
  // never of the outputs the loss takes in place.
  cost::Cluster cluster = small_cluster(4, 1e12);
  SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kSgd, plan::Precision::kFp32, {}, {}};
  SearchConfig config;
  config.pipeline_devices = 4;
  config.microbatches = 2;
  config.microbatch_size = 8;  // the evaluated batch: bytes as stored
  StageOptions options(context, config);
  auto memory = [&](int begin, int end) { return options.memory(*options.evaluate(begin, end, 1, plan::Recompute::kNone), 1); };
  auto comm_buffers = [&](int begin, int end) { return memory(begin, end).comm_buffers; };
  CHECK(comm_buffers(0, 1) == 2 * 100 + 100);
  CHECK(comm_buffers(1, 2) == 2 * 100 + 100);            // the logits are not sent: the loss reads them
  CHECK(comm_buffers(2, 4) == 2 * (100 + 7) + 100);
  CHECK(comm_buffers(0, 2) == 2 * 100 + 100);            // the gradient of what block 3 reads comes back
  CHECK(comm_buffers(3, 4) == 2 * (100 + 7) + 107);      // both its inputs come from earlier stages
  // The logits are held until backward, beside the loss's log-probabilities (fp32 here).
  CHECK(memory(1, 2).activations == 100 + ranges.kept_bytes(1, 2) + 20 + 20);
  CHECK(memory(0, 1).activations == ranges.kept_bytes(0, 1) + 100);  // what it sends, held as backward's root
}

TEST_CASE("a range counts a tied weight's waiting gradient only when it holds two of its reads", "[stage_search]") {
  std::mt19937 rng(5);
  BlockCosts blocks = random_blocks(rng, 4, {1, 2, 4});
  blocks.weights.push_back({100, 0, {0, 2}, {0, 2}});     // read in blocks 0 and 2 (tied embedding)
  blocks.weights.push_back({10, 0, {3}, {3, 3}});         // read by two ops of block 3
  RangeTable ranges(blocks);
  CHECK(ranges.largest_tied_grad_bytes(0, 2) == 0);
  CHECK(ranges.largest_tied_grad_bytes(0, 3) == 400);
  CHECK(ranges.largest_tied_grad_bytes(1, 3) == 0);
  CHECK(ranges.largest_tied_grad_bytes(1, 4) == 40);
  CHECK(ranges.largest_tied_grad_bytes(0, 4) == 400);
  CHECK(ranges.largest_tied_grad_bytes(3, 4) == 40);
  // The tie's gradient is summed between the stages holding a part of its reads, from a flat copy.
  CHECK(ranges.shared_param_elements(0, 1, 1) == 100);
  CHECK(ranges.shared_param_elements(1, 4, 1) == 100);
  CHECK(ranges.shared_param_elements(0, 3, 1) == 0);  // both reads: summed in place by autograd
  CHECK(ranges.shared_param_elements(1, 2, 1) == 0);  // neither
  CHECK(ranges.shared_param_elements(3, 4, 1) == 0);  // the weight only block 3 reads
}

namespace {

// RaNNC's stage DP (Tanaka et al., IPDPS 2021) keeps, per state (blocks covered, stages used),
// the one partial plan whose max forward + max backward is least. That is not separable: a
// partial plan with a worse sum now can combine better with the stages still to come.
std::optional<std::vector<StageOption>> separable_dp(const StageOptions& options, int stages) {
  struct State {
    bool reached = false;
    double max_fwd = 0, max_bwd = 0;
    int from = -1;
    std::optional<StageOption> stage;
  };
  int n = options.block_count();
  std::vector<std::vector<State>> state(static_cast<std::size_t>(stages + 1), std::vector<State>(n + 1));
  state[0][0].reached = true;
  for (int s = 1; s <= stages; ++s) {
    for (int end = 1; end <= n; ++end) {
      for (int begin = 0; begin < end; ++begin) {
        const State& before = state[s - 1][begin];
        auto option = options.evaluate(begin, end, 1, plan::Recompute::kNone);
        if (!before.reached || !option) continue;
        double fwd = std::max(before.max_fwd, option->fwd_ms + option->p2p_ms / 2);
        double bwd = std::max(before.max_bwd, option->bwd_ms + option->p2p_ms / 2);
        State& here = state[s][end];
        if (!here.reached || fwd + bwd < here.max_fwd + here.max_bwd) here = {true, fwd, bwd, begin, option};
      }
    }
  }
  if (!state[stages][n].reached) return std::nullopt;
  std::vector<StageOption> plan(static_cast<std::size_t>(stages));
  for (int s = stages, end = n; s > 0; end = state[s][end].from, --s) plan[s - 1] = *state[s][end].stage;
  return plan;
}

}  // namespace

TEST_CASE("the exact search beats RaNNC's separable dynamic program", "[stage_search]") {
  std::mt19937 rng(7);
  int strictly_better = 0;
  double best_gain = 0;
  for (int index = 0; index < 60; ++index) {
    int blocks_count = 6 + index % 7, stages = 2 + index % 3, microbatches = 1 + index % 8;
    BlockCosts blocks = random_blocks(rng, blocks_count, {1});
    // Forward-heavy and backward-heavy blocks side by side, as attention and loss layers are.
    for (int b = 0; b < blocks_count; ++b) std::swap(blocks.fwd_ms[b][0], b % 3 == 0 ? blocks.bwd_ms[b][0] : blocks.fwd_ms[b][0]);
    RangeTable ranges(blocks);
    cost::Cluster cluster = small_cluster(stages, 1e15);
    SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}, {}};
    SearchConfig config{1, stages, microbatches, 1, plan::Schedule::k1F1B, stages, {}, {}};
    StageOptions options(context, config);
    auto theirs = separable_dp(options, stages);
    auto ours = search_pipeline(options, std::numeric_limits<double>::infinity());
    REQUIRE(theirs);
    REQUIRE(ours);
    auto theirs_solution = evaluate_pipeline(options, *theirs);
    REQUIRE(theirs_solution);
    INFO("case " << index);
    CHECK(ours->objective_ms() <= theirs_solution->objective_ms() * (1 + 1e-12));
    double gain = theirs_solution->objective_ms() / ours->objective_ms() - 1;
    if (gain > 1e-6) ++strictly_better;
    best_gain = std::max(best_gain, gain);
  }
  INFO("separable DP worse on " << strictly_better << " of 60 instances, by up to " << 100 * best_gain << "%");
  CHECK(strictly_better >= 5);
  CHECK(best_gain > 0.02);
}

}  // namespace rannc::partition

namespace rannc::partition {
namespace {

// Times scaled by 1/speed: the same blocks on a faster (or slower) kind of device.
BlockCosts on_faster_kind(BlockCosts blocks, double speed) {
  auto scale = [&](std::vector<std::vector<double>>& table) {
    for (auto& row : table)
      for (double& ms : row) ms /= speed;
  };
  scale(blocks.fwd_ms), scale(blocks.bwd_ms), scale(blocks.fwd_host_ms), scale(blocks.bwd_host_ms), scale(blocks.cores.fwd_ms);
  for (auto& split : blocks.splits) scale(split.fwd_ms), scale(split.bwd_ms), scale(split.cores.fwd_ms);
  return blocks;
}

// A mixed cluster's pipeline of two kinds: the random instance's blocks on kind 0 and the same
// blocks `speed` times faster on kind 1, each kind with its own memory and devices, in either order.
struct MixedInstance {
  Instance first, faster;
  std::vector<SearchContext> kinds;
  SearchConfig config;
};

std::unique_ptr<MixedInstance> mixed_instance(std::mt19937& rng, int index, double speed, int devices0, int devices1) {
  auto mixed = std::make_unique<MixedInstance>();
  mixed->first = random_instance(rng, index);
  mixed->first.cluster = small_cluster(devices0, mixed->first.c.mem_gb * 1e9);
  mixed->faster.blocks = on_faster_kind(mixed->first.blocks, speed);
  mixed->faster.ranges = std::make_unique<RangeTable>(mixed->faster.blocks);
  mixed->faster.cluster = small_cluster(devices1, mixed->first.c.mem_gb * 1e9 * (index % 2 == 0 ? 2 : 0.5));
  mixed->faster.c = mixed->first.c;
  mixed->faster.cluster.host = mixed->first.cluster.host;
  mixed->kinds = {mixed->first.context(), mixed->faster.context()};
  for (int k = 0; k < 2; ++k) mixed->kinds[k].kind = k, mixed->kinds[k].kinds = &mixed->kinds;
  mixed->config = mixed->first.config();
  mixed->config.stages.reset();
  mixed->config.pipeline_devices = devices0 + devices1;
  mixed->config.segments = {{0, devices0}, {1, devices1}};
  if (index % 3 == 0) std::swap(mixed->config.segments[0], mixed->config.segments[1]);
  return mixed;
}

// Every pipeline whose stages each lie within one segment and use every device, each stage
// evaluated on its segment's kind.
void enumerate_mixed(const SegmentOptions& options, int begin, int position, std::vector<StageOption>& stages,
                     std::optional<PipelineSolution>& best, long& pipelines) {
  const int devices = options.config().pipeline_devices;
  if (begin == options.block_count()) {
    if (position != devices) return;
    ++pipelines;
    auto solution = evaluate_pipeline(options.of(0), stages);
    if (solution && (!best || solution->objective_ms() < best->objective_ms())) best = solution;
    return;
  }
  if (position == devices) return;
  int segment = 0;
  while (options.end_position(segment) <= position) ++segment;
  const StageOptions& kind = options.of(segment);
  for (int end = begin + 1; end <= options.block_count(); ++end)
    for (int degree : kind.tensor_degrees())
      for (int replicas : kind.replica_choices()) {
        if (position + replicas * degree > options.end_position(segment)) continue;
        for (auto recompute : kRecomputeChoices)
          for (auto sharding : kShardingChoices)
            for (bool offload : {false, true}) {
              auto option = kind.evaluate(begin, end, replicas, recompute, sharding, offload, degree);
              if (!option) continue;
              stages.push_back(*option);
              enumerate_mixed(options, end, position + option->devices(), stages, best, pipelines);
              stages.pop_back();
            }
      }
}

// Blocks per device of each kind over a pipeline's stages.
std::array<double, 2> blocks_per_device(const PipelineSolution& solution) {
  std::array<double, 2> blocks{}, devices{};
  for (const auto& stage : solution.stages) {
    blocks[static_cast<std::size_t>(stage.kind)] += stage.end - stage.begin;
    devices[static_cast<std::size_t>(stage.kind)] += stage.devices();
  }
  return {blocks[0] / devices[0], blocks[1] / devices[1]};
}

}  // namespace

TEST_CASE("on two kinds of device the stage search finds the brute-force optimum", "[stage_search][mixed]") {
  std::mt19937 rng(20261129);
  int feasible = 0, replicated = 0, tensor_split = 0;
  for (int index = 0; index < 160; ++index) {
    const int devices0 = 1 + index % 3, devices1 = 1 + (index / 3) % 3;
    auto mixed = mixed_instance(rng, index, 1.5 + (index % 5) * 0.5, devices0, devices1);
    if (mixed->first.c.blocks > 7) continue;  // brute force stays fast
    SegmentOptions options(mixed->kinds[0], mixed->config);
    long pipelines = 0;
    std::optional<PipelineSolution> expected;
    std::vector<StageOption> stages;
    enumerate_mixed(options, 0, 0, stages, expected, pipelines);
    auto found = search_pipeline(options, std::numeric_limits<double>::infinity());
    INFO("case " << index << ": " << mixed->first.c.blocks << " blocks on " << devices0 << " + " << devices1 << " devices, "
                 << pipelines << " pipelines enumerated");
    REQUIRE(found.has_value() == expected.has_value());
    if (!expected) continue;
    ++feasible;
    CHECK(found->objective_ms() == Approx(expected->objective_ms()).epsilon(1e-12));
    // Its stages follow the segments, each on its segment's kind, and use every device.
    int position = 0;
    for (const auto& stage : found->stages) {
      int segment = 0;
      while (options.end_position(segment) <= position) ++segment;
      CHECK(stage.kind == mixed->config.segments[static_cast<std::size_t>(segment)].kind);
      CHECK(position + stage.devices() <= options.end_position(segment));
      position += stage.devices();
    }
    CHECK(position == mixed->config.pipeline_devices);
    for (const auto& stage : found->stages) replicated += stage.replicas > 1, tensor_split += stage.tensor_degree > 1;
  }
  // The instances exercise what the search decides: replicas and tensor-parallel groups on a kind.
  CHECK(feasible >= 60);
  CHECK(replicated >= 30);
  CHECK(tensor_split >= 5);
}

TEST_CASE("on two kinds of device the faster kind takes more layers per device", "[stage_search][mixed]") {
  // 24 alike layers on 4 devices of each kind, the second 3x faster: it should take about 3x the
  // layers per device, whichever kind comes first in the pipeline.
  std::mt19937 rng(7);
  for (int order = 0; order < 2; ++order) {
    auto mixed = mixed_instance(rng, 1, 3.0, 4, 4);
    Instance& first = mixed->first;
    first.blocks = random_blocks(rng, 24, {1, 2, 4, 8});
    repeat_middle_blocks(first.blocks);
    first.ranges = std::make_unique<RangeTable>(first.blocks);
    first.cluster = small_cluster(4, 1e12);
    mixed->faster.blocks = on_faster_kind(first.blocks, 3.0);
    mixed->faster.ranges = std::make_unique<RangeTable>(mixed->faster.blocks);
    mixed->faster.cluster = small_cluster(4, 1e12);
    mixed->kinds[0].blocks = &first.blocks, mixed->kinds[0].ranges = first.ranges.get(), mixed->kinds[0].cluster = &first.cluster;
    mixed->kinds[1].ranges = mixed->faster.ranges.get();
    mixed->config.microbatches = 16;
    mixed->config.microbatch_size = 8;
    mixed->config.schedule = plan::Schedule::k1F1B;
    mixed->config.segments = order == 0 ? std::vector<KindSegment>{{0, 4}, {1, 4}} : std::vector<KindSegment>{{1, 4}, {0, 4}};
    auto found = search_pipeline(SegmentOptions(mixed->kinds[0], mixed->config), std::numeric_limits<double>::infinity());
    REQUIRE(found);
    auto per_device = blocks_per_device(*found);
    INFO("order " << order << ": " << per_device[0] << " blocks per slower device, " << per_device[1] << " per faster");
    CHECK(per_device[1] >= 2 * per_device[0]);
  }
}

}  // namespace rannc::partition
