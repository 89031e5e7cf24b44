// Plan quality on real sample models, in two checks:
//
// splits GPT_MODEL
//   Plans of the GPT-style sample, whose embedding and tied LM head (vocabulary 8192, hidden 128)
//   outweigh its transformer layers, against the splits users get today:
//     uniform layers  Megatron-LM's split: the same number of transformer layers per stage, the
//                     embedding with the first stage and the head with the last;
//     by parameters   DeepSpeed's default (partition_method="parameters"): contiguous stages with
//                     the most balanced parameter counts (the tied weight counted where it is read).
//   All three are costed by the same model on the same config (S stages of one device each, one
//   pipeline, M microbatches) and simulated; ours must be strictly faster than both.
//
// repeats MODEL.onnx BLOCKS
//   Repeated layers must come out of coarsening as equal blocks: 90% of the blocks repeat with a
//   period of at most 16 blocks (same unit count, same time).
//
// layouts MODEL.onnx GPUS BATCH DEVICE PRECISION
//   The layouts a person writes for Megatron-LM or DeepSpeed without tensor parallelism, against
//   our plan of the same request, all under the same cost model and simulation: S pipeline
//   stages of equal transformer layers (S a power of two dividing the layer count; the embedding
//   with the first stage, the head with the last), D = GPUS / S data-parallel pipelines, every
//   microbatch size m (a power of two) that divides the batch, recomputation on every stage or
//   none, sharded optimizer state or not. Prints the best of them per S and ours; exits 1 if one
//   is faster than ours.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <regex>
#include <string>

#include "compiler/model.h"
#include "cost_model/cluster.h"
#include "cost_model/cost_model.h"
#include "cost_model/device.h"
#include "partitioner/planner.h"
#include "sharding/embedding_tables.h"
#include "sharding/sharding_planner.h"
#include "support/format.h"

namespace rannc::partition {
namespace {

struct Loaded {
  Model model;
  cost::Cluster cluster;  // one A100-80GB; the checks set the device count
  std::unique_ptr<cost::CostModel> costs;
  UnitGraph units;
  std::vector<double> unit_ms;
};

Loaded load(const std::string& path, std::int64_t batch) {
  LoadOptions options;
  options.batch = batch;
  Loaded loaded{load_model(path, options), {}, nullptr, {}, {}};
  auto& cluster = loaded.cluster;
  cluster.device = *cost::find_device_preset("a100-80g");
  cluster.mem_bytes = cluster.device.mem_bytes;
  cluster.intra_node = cluster.device.intra_node;
  cluster.inter_node = cluster.device.inter_node;
  loaded.costs = std::make_unique<cost::CostModel>(loaded.model.graph, cluster.device, plan::Precision::kFp32, nullptr);
  loaded.units = build_units(loaded.model.graph);
  loaded.unit_ms = unit_step_ms(loaded.units, *loaded.costs);
  return loaded;
}

constexpr int kBatch = 64, kMicrobatches = 8;

// The transformer layer of each unit from its output's name ("/blocks.3/..."), -1 outside layers.
std::vector<int> unit_layers(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking) {
  static const std::regex layer(R"(blocks\.(\d+))");
  std::vector<int> layers;
  for (int unit : blocking.order) {
    const auto& op = graph.op(units.units[unit].anchor);
    std::smatch match;
    std::string name = graph.value(op.outputs.front()).name;
    layers.push_back(std::regex_search(name, match, layer) ? std::stoi(match[1]) : -1);
  }
  return layers;
}

// Megatron: stage k starts at the first unit of layer k * L / S.
std::vector<int> uniform_layer_cuts(const std::vector<int>& layers, int stages) {
  int count = *std::max_element(layers.begin(), layers.end()) + 1;
  std::vector<int> cuts{0};
  for (int k = 1; k < stages; ++k) {
    int first_layer = k * count / stages;
    cuts.push_back(static_cast<int>(std::find(layers.begin(), layers.end(), first_layer) - layers.begin()));
  }
  cuts.push_back(static_cast<int>(layers.size()));
  return cuts;
}

// DeepSpeed: contiguous stages minimising the largest parameter count (exact, by DP).
std::vector<int> balanced_param_cuts(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking, int stages) {
  int n = blocking.count();
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    double params = 0;
    for (auto op : units.units[blocking.order[i]].ops)
      for (auto input : graph.op(op).inputs)
        if (graph.value(input).role == ir::ValueRole::kParam) params += static_cast<double>(graph.value(input).type.numel());
    prefix[i + 1] = prefix[i] + params;
  }
  const double kInf = 1e300;
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int end = 1; end <= n; ++end)
      for (int begin = 0; begin < end; ++begin) {
        double value = std::max(best[s - 1][begin], prefix[end] - prefix[begin]);
        if (value < best[s][end]) best[s][end] = value, from[s][end] = begin;
      }
  std::vector<int> cuts(stages + 1, n);
  for (int s = stages; s > 0; --s) cuts[s - 1] = from[s][cuts[s]];
  return cuts;
}

std::optional<PipelineSolution> pipeline_from_cuts(const StageOptions& options, const std::vector<int>& cuts) {
  std::vector<StageOption> stages;
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
    auto option = options.evaluate(cuts[s], cuts[s + 1], 1, plan::Recompute::kNone);
    if (!option) return std::nullopt;
    stages.push_back(*option);
  }
  return evaluate_pipeline(options, stages);
}

std::string describe(const PipelineSolution& solution) {
  std::string text;
  for (const auto& stage : solution.stages)
    text += (text.empty() ? "" : " / ") + std::to_string(stage.end - stage.begin) + " units " +
            std::to_string(stage.t_ms).substr(0, 5) + " ms";
  return text;
}

int compare_splits(const std::string& path) {
  Loaded loaded = load(path, kBatch);
  const Model& model = loaded.model;
  const UnitGraph& units = loaded.units;
  const cost::CostModel& costs = *loaded.costs;
  cost::Cluster& cluster = loaded.cluster;
  const auto& unit_ms = loaded.unit_ms;
  // One block per unit, so every split below can be expressed.
  Blocking blocking = coarsen(model.graph, units, unit_ms, static_cast<int>(units.units.size()));
  auto activations = cost::activation_memory(model.graph, costs.requires_grad(), plan::Precision::kFp32);
  BlockCosts blocks = block_costs(model.graph, units, blocking, costs, activations, model.batch, {1, 2, 4, 8});
  RangeTable ranges(blocks);
  auto layers = unit_layers(model.graph, units, blocking);
  bool ok = true;
  std::printf("| stages | split | stage times per microbatch | search objective | simulated step | ours faster by |\n"
              "|---|---|---|---|---|---|\n");
  for (int stages : {2, 3, 4}) {
    cluster.gpus_per_node = stages;
    cluster.nodes = 1;
    SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}, {}};
    SearchConfig config{1, stages, kMicrobatches, kBatch / kMicrobatches, plan::Schedule::k1F1B, stages, {}, {}};
    StageOptions options(context, config);
    auto ours = search_pipeline(options, 1e300);
    std::map<std::string, std::optional<PipelineSolution>> splits{
        {"uniform layers", pipeline_from_cuts(options, uniform_layer_cuts(layers, stages))},
        {"by parameters", pipeline_from_cuts(options, balanced_param_cuts(model.graph, units, blocking, stages))}};
    auto step = [&](const PipelineSolution& solution) {
      return place_and_simulate(context, {config, solution}, kBatch, {}).predicted.iteration_ms;
    };
    double our_step = step(*ours);
    std::printf("| %d | ours | %s | %.3f ms | %.3f ms | |\n", stages, describe(*ours).c_str(), ours->objective_ms(), our_step);
    for (const auto& [name, split] : splits) {
      double their_step = step(*split);
      double gain = their_step / our_step - 1;
      std::printf("| %d | %s | %s | %.3f ms | %.3f ms | %.1f%% |\n", stages, name.c_str(), describe(*split).c_str(),
                  split->objective_ms(), their_step, 100 * gain);
      ok = ok && split->objective_ms() > ours->objective_ms() && gain > 0.01;
    }
  }
  if (!ok) std::fprintf(stderr, "plan_quality: a naive split was not beaten by more than 1%%\n");
  return ok ? 0 : 1;
}

struct BlockShape {
  int units = 0;
  double ms = 0;
  bool operator==(const BlockShape& other) const {
    return units == other.units && std::abs(ms - other.ms) <= 1e-9 * std::max(1.0, ms);
  }
};

int check_repeats(const std::string& path, int target) {
  Loaded loaded = load(path, 8);
  const auto& unit_ms = loaded.unit_ms;
  Blocking blocking = coarsen(loaded.model.graph, loaded.units, unit_ms, target);
  std::vector<BlockShape> shapes;
  for (int b = 0; b < blocking.count(); ++b) {
    BlockShape shape{blocking.end(b) - blocking.begin(b), 0};
    for (int i = blocking.begin(b); i < blocking.end(b); ++i) shape.ms += unit_ms[blocking.order[i]];
    shapes.push_back(shape);
  }
  // Some period p (at most 16 blocks) must repeat for at least 90% of the blocks: the embedding,
  // the head and a layer merged to meet the block count may differ.
  for (int period = 1; period <= 16; ++period) {
    int repeating = 0;
    for (int b = 0; b + period < blocking.count(); ++b) repeating += shapes[b] == shapes[b + period];
    if (repeating >= 0.9 * blocking.count()) {
      std::printf("ok: %d of %d blocks repeat every %d block(s):", repeating, blocking.count(), period);
      for (int b = blocking.count() / 2; b < blocking.count() / 2 + period; ++b)
        std::printf(" %d units %.3f ms", shapes[b].units, shapes[b].ms);
      std::printf("\n");
      return 0;
    }
  }
  std::fprintf(stderr, "plan_quality: the blocks of %s do not repeat:", path.c_str());
  for (const auto& shape : shapes) std::fprintf(stderr, " %d/%.3f", shape.units, shape.ms);
  std::fprintf(stderr, "\n");
  return 1;
}

// The transformer layer each unit belongs to: the highest "layers.N" among the weights its ops read;
// units that read none follow the unit before them (the embedding counts as layer 0).
std::vector<int> unit_layers_by_weights(const ir::Graph& graph, const UnitGraph& units) {
  static const std::regex layer(R"(layers\.(\d+)\.)");
  std::vector<int> layers;
  int current = 0;
  for (const auto& unit : units.units) {
    for (auto op : unit.ops) {
      for (auto input : graph.op(op).inputs) {
        std::smatch match;
        const auto& value = graph.value(input);
        if (value.role == ir::ValueRole::kParam && std::regex_search(value.name, match, layer))
          current = std::max(current, std::stoi(match[1]));
      }
    }
    layers.push_back(current);
  }
  return layers;
}

// One block per transformer layer, in the units' own (topological) order.
Blocking layer_blocking(const std::vector<int>& layers) {
  Blocking blocking;
  for (int u = 0; u < static_cast<int>(layers.size()); ++u) {
    blocking.order.push_back(u);
    if (u == 0 || layers[u] != layers[u - 1]) blocking.starts.push_back(u);
  }
  return blocking;
}

struct Layout {
  int stages = 0, pipelines = 0, microbatch = 0, microbatches = 0;
  plan::Recompute recompute = plan::Recompute::kNone;
  plan::StateSharding sharding = plan::StateSharding::kNone;
  double step_ms = 0;
};

std::string layout_text(const Layout& l) {
  char text[160];
  std::string recompute = l.recompute == plan::Recompute::kNone ? "" : ", recompute " + std::string(plan::recompute_name(l.recompute));
  std::snprintf(text, sizeof text, "%d stages x %d pipelines, %d x %d samples%s%s", l.stages, l.pipelines,
                l.microbatches, l.microbatch, recompute.c_str(),
                l.sharding != plan::StateSharding::kNone ? ", sharded state" : "");
  return text;
}

// The simulated step of a hand-written layout, or nullopt when it does not fit in memory.
std::optional<double> layout_step(const SearchContext& context, const Layout& layout, int layers, std::int64_t batch) {
  SearchConfig config{layout.pipelines, layout.stages, layout.microbatches, layout.microbatch, plan::Schedule::k1F1B,
                      layout.stages, std::nullopt, std::nullopt};
  StageOptions options(context, config);
  std::vector<StageOption> stages;
  for (int k = 0; k < layout.stages; ++k) {
    auto option = options.evaluate(k * layers / layout.stages, (k + 1) * layers / layout.stages, 1, layout.recompute,
                                   layout.sharding);
    if (!option) return std::nullopt;
    stages.push_back(*option);
  }
  auto solution = evaluate_pipeline(options, stages);
  if (!solution) return std::nullopt;
  return place_and_simulate(context, {config, *solution}, batch, {}).predicted.iteration_ms;
}

int compare_layouts(const std::string& path, int gpus, std::int64_t batch, const std::string& device,
                    const std::string& precision_name) {
  LoadOptions load_options;
  load_options.batch = batch;
  Model model = load_model(path, load_options);
  cost::ClusterFlags flags;
  flags.gpus = gpus;
  flags.device = device;
  PlanRequest request;
  request.cluster = cost::cluster_from_flags(flags);
  request.global_batch = batch;
  request.precision = plan::parse_precision(precision_name, "precision");
  cost::CostModel costs(model.graph, request.cluster.device, request.precision, nullptr);
  PlanResult ours = plan_model(model.graph, model.batch, costs, request);
  const double our_step = ours.pipeline.predicted.iteration_ms;
  const double our_tflops = ours.pipeline.predicted.model_tflops_per_device;

  UnitGraph units = build_units(model.graph);
  auto layers = unit_layers_by_weights(model.graph, units);
  Blocking blocking = layer_blocking(layers);
  std::vector<int> sizes;
  for (int m = 1; m <= batch; m *= 2) sizes.push_back(m);
  auto activations = cost::activation_memory(model.graph, costs.requires_grad(), request.precision);
  BlockCosts blocks = block_costs(model.graph, units, blocking, costs, activations, model.batch, sizes);
  RangeTable ranges(blocks);
  SearchContext context{&blocks, &ranges, &request.cluster, request.optimizer, request.precision, {}, {}};

  std::printf("%s on %d x %s, batch %lld, %s: %d layers\n", path.c_str(), gpus, device.c_str(),
              static_cast<long long>(batch), precision_name.c_str(), blocking.count());
  std::printf("| layout | step | model TFLOP/s per device | ours faster by |\n|---|---|---|---|\n");
  std::optional<Layout> best;
  for (int stages = 1; stages <= blocking.count() && stages <= gpus; stages *= 2) {
    if (blocking.count() % stages != 0 || gpus % stages != 0 || batch % (gpus / stages) != 0) continue;
    std::optional<Layout> best_here;
    int pipelines = gpus / stages;
    for (int microbatch = 1; microbatch <= batch / pipelines; microbatch *= 2) {
      if ((batch / pipelines) % microbatch != 0) continue;
      for (auto recompute : {plan::Recompute::kNone, plan::Recompute::kSelective, plan::Recompute::kFull}) {
        for (auto sharding : {plan::StateSharding::kNone, plan::StateSharding::kOptimizer}) {
          if (sharding != plan::StateSharding::kNone && pipelines == 1) continue;
          Layout layout{stages, pipelines, microbatch, static_cast<int>(batch / pipelines / microbatch), recompute, sharding};
          auto step = layout_step(context, layout, blocking.count(), batch);
          if (!step) continue;
          layout.step_ms = *step;
          if (!best_here || layout.step_ms < best_here->step_ms) best_here = layout;
        }
      }
    }
    if (!best_here) {
      std::printf("| %d stages: none fits | | | |\n", stages);
      continue;
    }
    std::printf("| %s | %.3f s | %.1f | %.1f%% |\n", layout_text(*best_here).c_str(), best_here->step_ms / 1e3,
                our_tflops * our_step / best_here->step_ms, 100 * (best_here->step_ms / our_step - 1));
    if (!best || best_here->step_ms < best->step_ms) best = best_here;
  }
  const auto& config = ours.pipeline.config;
  std::printf("| ours: %zu stages x %d pipelines, %d x %d samples | %.3f s | %.1f | |\n", ours.pipeline.stages.size(),
              config.pipelines, config.microbatches, config.microbatch_size, our_step / 1e3, our_tflops);
  if (best) {
    std::printf("best hand-written: %s, %.3f s; ours %.3f s (%.1f%% faster)\n", layout_text(*best).c_str(),
                best->step_ms / 1e3, our_step / 1e3, 100 * (best->step_ms / our_step - 1));
  }
  bool ok = !best || best->step_ms >= our_step;
  if (!ok) std::fprintf(stderr, "plan_quality: a hand-written layout is faster than our plan\n");
  return ok ? 0 : 1;
}

// The embedding-table sharding of a DLRM (sharding/sharding_planner.h): planning time, the
// slowest rank against the mean, and how many tables take each sharding type.
int plan_tables(const std::string& path, int gpus, const std::string& mem, std::int64_t batch_per_rank) {
  LoadOptions load_options;
  load_options.batch = 1;
  Model model = load_model(path, load_options);
  sharding::ShardingProblem problem;
  problem.tables = sharding::find_embedding_tables(model.graph, model.batch);
  cost::ClusterFlags flags;
  flags.gpus = gpus;
  flags.mem = mem;
  problem.cluster = cost::cluster_from_flags(flags);
  problem.batch_per_rank = batch_per_rank;
  auto start = std::chrono::steady_clock::now();
  auto solution = sharding::plan_sharding(problem);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  double total = 0, slowest = 0, mem_max = 0;
  for (const auto& r : solution.ranks) total += r.step_ms(), slowest = std::max(slowest, r.step_ms()), mem_max = std::max(mem_max, r.mem_bytes);
  std::map<std::string, int> types;
  for (const auto& t : solution.tables) ++types[std::string(sharding::sharding_type_name(t.type)) + (t.host ? " (host)" : "")];
  std::printf("%s: %zu tables on %d x %s, batch %lld per rank: planned in %.0f ms; slowest rank %.3f ms, max/mean %.3f, "
              "peak %s per device;",
              path.c_str(), problem.tables.size(), gpus, mem.c_str(), static_cast<long long>(batch_per_rank), ms, slowest,
              slowest / (total / gpus), human_bytes(mem_max).c_str());
  for (const auto& [type, count] : types) std::printf(" %s %d", type.c_str(), count);
  std::printf("\n");
  return 0;
}

}  // namespace
}  // namespace rannc::partition

int main(int argc, char** argv) {
  std::string check = argc > 1 ? argv[1] : "";
  try {
    if (check == "splits" && argc == 3) return rannc::partition::compare_splits(argv[2]);
    if (check == "repeats" && argc == 4) return rannc::partition::check_repeats(argv[2], std::stoi(argv[3]));
    if (check == "sharding" && argc == 6)
      return rannc::partition::plan_tables(argv[2], std::stoi(argv[3]), argv[4], std::stoll(argv[5]));
    if (check == "layouts" && argc == 7)
      return rannc::partition::compare_layouts(argv[2], std::stoi(argv[3]), std::stoll(argv[4]), argv[5], argv[6]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_quality: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr,
               "usage: plan_quality splits GPT_MODEL | plan_quality repeats MODEL.onnx BLOCKS | "
               "plan_quality layouts MODEL.onnx GPUS BATCH DEVICE PRECISION | "
               "plan_quality sharding DLRM.onnx GPUS MEM BATCH_PER_RANK\n");
  return 2;
}
