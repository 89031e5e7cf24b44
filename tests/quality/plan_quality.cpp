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
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <regex>
#include <string>

#include "compiler/model.h"
#include "cost_model/cost_model.h"
#include "cost_model/device.h"
#include "partitioner/planner.h"

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
    auto option = options.evaluate(cuts[s], cuts[s + 1], 1, false);
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
    SearchContext context{&blocks, &ranges, &cluster, plan::Optimizer::kAdam, plan::Precision::kFp32, {}};
    SearchConfig config{1, stages, kMicrobatches, kBatch / kMicrobatches, plan::Schedule::k1F1B, stages};
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

}  // namespace
}  // namespace rannc::partition

int main(int argc, char** argv) {
  std::string check = argc > 1 ? argv[1] : "";
  try {
    if (check == "splits" && argc == 3) return rannc::partition::compare_splits(argv[2]);
    if (check == "repeats" && argc == 4) return rannc::partition::check_repeats(argv[2], std::stoi(argv[3]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan_quality: %s\n", e.what());
    return 2;
  }
  std::fprintf(stderr, "usage: plan_quality splits GPT_MODEL | plan_quality repeats MODEL.onnx BLOCKS\n");
  return 2;
}
