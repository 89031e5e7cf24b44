// Plan quality against the splits users get today, on the GPT-style sample whose embedding and
// tied LM head (vocabulary 8192, hidden 128) outweigh its transformer layers:
//
//   uniform layers  Megatron-LM's split: the same number of transformer layers per stage, the
//                   embedding with the first stage and the head with the last;
//   by parameters   DeepSpeed's default (partition_method="parameters"): contiguous stages with
//                   the most balanced parameter counts (the tied weight counted where it is read).
//
// All three are costed by the same model on the same config (S stages of one device each, one
// pipeline, M microbatches) and simulated; ours must be strictly faster than both.
//
// usage: baseline_splits GPT_MODEL
#include <cstdio>
#include <map>
#include <regex>
#include <string>

#include "compiler/model.h"
#include "cost_model/cost_model.h"
#include "cost_model/device.h"
#include "partitioner/planner.h"
#include "support/error.h"

namespace rannc::partition {
namespace {

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

int compare(const std::string& path) {
  LoadOptions load;
  load.batch = kBatch;
  Model model = load_model(path, load);
  cost::Cluster cluster;
  cluster.device = *cost::find_device_preset("a100-80g");
  cluster.mem_bytes = cluster.device.mem_bytes;
  cluster.intra_node = cluster.device.intra_node;
  cluster.inter_node = cluster.device.inter_node;
  cost::CostModel costs(model.graph, cluster.device, cost::Precision::kFp32, nullptr);
  UnitGraph units = build_units(model.graph);
  std::vector<double> unit_ms;
  for (const auto& unit : units.units) {
    double ms = 0;
    for (auto op : unit.ops) ms += costs.op_cost(op).fwd_ms + costs.op_cost(op).bwd_ms;
    unit_ms.push_back(ms);
  }
  // One block per unit, so every split below can be expressed.
  Blocking blocking = coarsen(model.graph, units, unit_ms, static_cast<int>(units.units.size()));
  auto activations = cost::activation_memory(model.graph, costs.requires_grad(), cost::Precision::kFp32);
  BlockCosts blocks = block_costs(model.graph, units, blocking, costs, activations, model.batch, {1, 2, 4, 8});
  RangeTable ranges(blocks);
  auto layers = unit_layers(model.graph, units, blocking);
  bool ok = true;
  std::printf("| stages | split | stage times per microbatch | search objective | simulated step | ours faster by |\n"
              "|---|---|---|---|---|---|\n");
  for (int stages : {2, 3, 4}) {
    cluster.gpus_per_node = stages;
    cluster.nodes = 1;
    SearchContext context{&blocks, &ranges, &cluster, cost::Optimizer::kAdam, cost::Precision::kFp32};
    SearchConfig config{1, stages, kMicrobatches, kBatch / kMicrobatches, cost::Schedule::k1F1B, stages};
    StageOptions options(context, config);
    auto ours = search_pipeline(options, 1e300);
    std::map<std::string, std::optional<PipelineSolution>> splits{
        {"uniform layers", pipeline_from_cuts(options, uniform_layer_cuts(layers, stages))},
        {"by parameters", pipeline_from_cuts(options, balanced_param_cuts(model.graph, units, blocking, stages))}};
    auto step = [&](const PipelineSolution& solution) {
      return place_and_simulate(context, {config, solution}, kBatch, 0).predicted.iteration_ms;
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
  if (!ok) std::fprintf(stderr, "baseline_splits: a naive split was not beaten by more than 1%%\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace rannc::partition

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: baseline_splits GPT_MODEL\n");
    return 2;
  }
  try {
    return rannc::partition::compare(argv[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baseline_splits: %s\n", e.what());
    return 2;
  }
}
