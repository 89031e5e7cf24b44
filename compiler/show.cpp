#include "compiler/show.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "ir/module_path.h"
#include "support/format.h"
#include "support/stable_number.h"

namespace rannc {
namespace {

using plan::Plan;
using plan::Stage;

// Of a memory limit: rounded down, so a stage just under its limit never shows 100%.
std::string percent_of_limit(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", std::floor(100 * fraction + 1e-9));
  return text;
}

// A share as a whole percentage: 0.2 is "20%".
std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", 100 * fraction);
  return text;
}

// A stage's ranks by the node they sit on (rank r is on node r / K).
std::map<int, std::vector<int>> ranks_by_node(const std::vector<int>& ranks, int gpus_per_node) {
  std::map<int, std::vector<int>> nodes;
  for (int rank : ranks) nodes[rank / gpus_per_node].push_back(rank);
  return nodes;
}

// "node 0: 0-3; node 1: 8-11"
std::string node_ranks_text(const std::vector<int>& ranks, int gpus_per_node) {
  std::string text;
  for (const auto& [node, on_node] : ranks_by_node(ranks, gpus_per_node))
    text += (text.empty() ? "" : "; ") + ("node " + std::to_string(node) + ": " + ranges_text(on_node));
  return text;
}

std::string blocks_text(const plan::Stage& stage) {
  if (stage.blocks.size() != 2) return "-";
  return std::to_string(stage.blocks[0]) + "-" + std::to_string(stage.blocks[1] - 1);
}

// The ops column: the model's blocks the stage computes and its op count ("layers.0-5 (212 ops)")
// when the plan names them, else its first and last op.
std::string ops_text(const plan::Stage& stage) {
  if (stage.modules.empty()) return stage.op_range;
  auto text = ir::modules_summary(stage.modules);
  if (!stage.ops.empty()) text += " (" + plural(static_cast<std::int64_t>(stage.ops.size()), "op") + ")";
  return text;
}

double fraction_of(double bytes, std::int64_t limit) { return limit > 0 ? bytes / static_cast<double>(limit) : 0; }

std::int64_t stage_mem_limit(const plan::Plan& plan, const plan::Stage& stage) { return plan.mem_limit_of(stage); }

double memory_fraction(const plan::Plan& plan, const plan::Stage& stage) {
  return fraction_of(stage.predicted.mem_bytes, stage_mem_limit(plan, stage));
}

// The peak's share of its device's memory: on a mixed cluster, the fullest stage's.
double peak_memory_fraction(const plan::Plan& plan) {
  if (plan.cluster.node_groups.empty()) return fraction_of(plan.predicted.peak_mem_bytes, plan.cluster.mem_bytes);
  double fullest = 0;
  for (const auto& stage : plan.stages) fullest = std::max(fullest, memory_fraction(plan, stage));
  return fullest;
}

// "2 nodes of a100-40g (40.00 GiB), 2 nodes of h100-80g (80.00 GiB)" on a mixed cluster.
std::string node_groups_text(const plan::Cluster& cluster) {
  std::string text;
  for (const auto& group : cluster.node_groups)
    text += (text.empty() ? "" : ", ") + plural(group.nodes, "node") + " of " + group.device + " (" +
            human_bytes(static_cast<double>(group.mem_bytes)) + ")";
  return text;
}

// A table whose columns are as wide as their widest cell; the last column is left ragged.
class Table {
 public:
  explicit Table(std::vector<std::string> header, std::string right_aligned)
      : right_(std::move(right_aligned)) { rows_.push_back(std::move(header)); }
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  std::string text() const {
    std::vector<std::size_t> widths(rows_.front().size(), 0);
    for (const auto& row : rows_)
      for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
    std::ostringstream out;
    for (const auto& row : rows_) {
      std::string line;
      for (std::size_t c = 0; c < row.size(); ++c) {
        std::string pad(widths[c] - row[c].size(), ' ');
        bool last = c + 1 == row.size();
        line += (c ? "  " : "") + (right_[c] == 'r' ? pad + row[c] : row[c] + (last ? "" : pad));
      }
      out << line << "\n";
    }
    return out.str();
  }

 private:
  std::vector<std::vector<std::string>> rows_;
  std::string right_;  // per column: 'r' right-aligned, 'l' left
};

// "2 x 8", or with tensor and context parallelism "2 x 8 x tp 4 x cp 2": replicas per pipeline,
// pipelines, group.
std::string replicas_text(const plan::Plan& plan, const plan::Stage& stage) {
  std::string text = std::to_string(stage.replicas_per_pipeline) + " x " + std::to_string(plan.batch.pipelines);
  // Unequal shares of a microbatch: "2 x 2 (3/1 samples)".
  if (!stage.replica_samples.empty()) {
    std::string shares;
    for (int samples : stage.replica_samples) shares += (shares.empty() ? "" : "/") + std::to_string(samples);
    text += " (" + shares + " samples)";
  }
  if (stage.tensor_parallel.degree > 1) text += " x tp " + std::to_string(stage.tensor_parallel.degree);
  if (stage.context_degree > 1) text += " x cp " + std::to_string(stage.context_degree);
  return text;
}

// What tensor parallelism splits and leaves whole, over all stages: one line each, the reasons
// counted ("left whole: 24 x the split reaches ...").
std::string tensor_parallel_text(const plan::Plan& plan) {
  std::size_t regions = 0, weights = 0;
  std::map<std::string, int> unsplit;
  std::vector<std::string> vocabulary;  // "embedding", "output layer" where the vocabulary splits
  for (const auto& stage : plan.stages) {
    regions += stage.tensor_parallel.regions.size();
    weights += stage.tensor_parallel.weights.size();
    for (const auto& left : stage.tensor_parallel.unsplit) ++unsplit[left.reason];
    for (const auto& region : stage.tensor_parallel.regions) {
      if (region.kind == plan::RegionKind::kVocabularyEmbedding) vocabulary.push_back("embedding");
      if (region.kind == plan::RegionKind::kVocabularyHead) vocabulary.push_back("output layer (parallel cross entropy)");
    }
  }
  if (regions == 0 && unsplit.empty()) return "";
  std::string text = "tensor     " + plural(static_cast<std::int64_t>(regions), "region") + " split, " +
                     plural(static_cast<std::int64_t>(weights), "weight") + " sliced";
  for (std::size_t i = 0; i < vocabulary.size(); ++i) text += (i == 0 ? "; vocabulary split in the " : " and the ") + vocabulary[i];
  text += "\n";
  for (const auto& [reason, count] : unsplit) text += "           left whole: " + std::to_string(count) + " x " + reason + "\n";
  return text + "\n";
}

// " on h100-80g" on a mixed cluster (" on a100-40g+h100-80g" for a stage its kinds share).
std::string stage_device_text(const plan::Plan& plan, const plan::Stage& stage) {
  std::vector<std::string> kinds;
  for (int rank : stage.ranks)
    if (const plan::NodeGroup* group = plan.cluster.group_of_rank(rank);
        group && std::find(kinds.begin(), kinds.end(), group->device) == kinds.end())
      kinds.push_back(group->device);
  std::string text;
  for (const auto& kind : kinds) text += (text.empty() ? " on " : "+") + kind;
  return text;
}

std::string stage_table(const plan::Plan& plan) {
  // Interleaved, a rank holds its group's chunks: each row shows its chunk's part (the peak line
  // the sum).
  Table table({"stage", "blocks", "replicas", "ranks", "recompute", "sharded", "offload", "fwd / mb", "bwd / mb",
               plan.interleave > 1 ? "memory / chunk vs limit" : "memory / rank vs limit", "ops"},
              "rrlllllrrll");
  for (const auto& stage : plan.stages) {
    table.add({std::to_string(stage.id), blocks_text(stage),
               replicas_text(plan, stage),
               node_ranks_text(stage.ranks, plan.cluster.gpus_per_node) + stage_device_text(plan, stage), stage.recompute == plan::Recompute::kNone ? "no" : std::string(plan::recompute_name(stage.recompute)),
               stage.state_sharding == plan::StateSharding::kNone ? "no" : std::string(plan::state_sharding_name(stage.state_sharding)),
               stage.offload ? "yes" : "no",
               human_ms(stage.predicted.fwd_ms), human_ms(stage.predicted.bwd_ms),
               human_bytes(stage.predicted.mem_bytes) + " / " + human_bytes(static_cast<double>(stage_mem_limit(plan, stage))) + " (" +
                   percent_of_limit(memory_fraction(plan, stage)) + ")",
               ops_text(stage)});
  }
  return table.text();
}

std::string unused_text(const plan::Plan& plan) {
  if (plan.unused.ranks.empty()) return "none";
  return plural(static_cast<std::int64_t>(plan.unused.ranks.size()), "device") + " (" +
         node_ranks_text(plan.unused.ranks, plan.cluster.gpus_per_node) + "): " + plan.unused.reason;
}

nlohmann::json stage_json(const plan::Plan& plan, const plan::Stage& stage) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const auto& [node, ranks] : ranks_by_node(stage.ranks, plan.cluster.gpus_per_node))
    nodes.push_back({{"node", node}, {"ranks", ranks}});
  nlohmann::json entry = {{"id", stage.id},
                          {"replicas", stage.replicas()},
                          {"replicas_per_pipeline", stage.replicas_per_pipeline},
                          {"nodes", nodes},
                          {"recompute", stage.recompute},
                          {"state_sharding", stage.state_sharding},
                          {"offload", stage.offload},
                          {"fwd_ms", stable_number(stage.predicted.fwd_ms)},
                          {"bwd_ms", stable_number(stage.predicted.bwd_ms)},
                          {"mem_bytes", stable_number(stage.predicted.mem_bytes)},
                          {"mem_fraction", stable_number(memory_fraction(plan, stage))}};
  if (!plan.cluster.node_groups.empty()) entry["device"] = stage_device_text(plan, stage).substr(4);  // " on " left out
  if (!stage.replica_samples.empty()) entry["replica_samples"] = stage.replica_samples;
  if (!stage.op_range.empty()) entry["op_range"] = stage.op_range;
  if (!stage.modules.empty()) entry["modules"] = stage.modules;
  if (stage.blocks.size() == 2) entry["blocks"] = stage.blocks;
  if (stage.tensor_parallel.degree > 1) {
    const auto& split = stage.tensor_parallel;
    entry["tensor_parallel"] = {{"degree", split.degree}, {"regions", split.regions.size()},
                                {"weights", split.weights.size()}, {"unsplit", split.unsplit.size()}};
  }
  if (stage.context_degree > 1) entry["context_parallel"] = {{"degree", stage.context_degree}};
  return entry;
}

std::vector<int> shard_ranks(const plan::ShardedTable& table) {
  std::vector<int> ranks;
  for (const auto& shard : table.shards) ranks.push_back(shard.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

// Max over mean of the ranks' step and memory: 1.0 is perfect balance.
struct Imbalance {
  double step = 1, memory = 1;
};

Imbalance imbalance(const plan::Sharding& sharding) {
  double step_max = 0, step_sum = 0, mem_max = 0, mem_sum = 0;
  for (const auto& r : sharding.ranks) {
    step_max = std::max(step_max, r.step_ms), step_sum += r.step_ms;
    mem_max = std::max(mem_max, r.mem_bytes), mem_sum += r.mem_bytes;
  }
  const double n = static_cast<double>(sharding.ranks.size());
  return {step_sum > 0 ? step_max / (step_sum / n) : 1, mem_sum > 0 ? mem_max / (mem_sum / n) : 1};
}

// Per table and per rank, like the stats table of TorchRec's planner.
std::string sharding_text(const plan::Plan& plan) {
  const auto& sharding = *plan.sharding;
  std::ostringstream out;
  out << "tables     " << plural(static_cast<std::int64_t>(sharding.tables.size()), "embedding table") << ", "
      << sharding.batch_per_rank << " samples per rank, " << sharding.sparse_optimizer << ", all-to-all " << sharding.comm_dtype
      << " forward / " << sharding.comm_dtype_bwd << " backward\n\n";
  Table tables({"table", "rows x dim", "pooling", "type", "tier", "ranks", "lookup", "all-to-all", "allreduce", "memory / rank"},
               "lrrllrrrrr");
  for (const auto& t : sharding.tables) {
    const auto& l = t.per_rank;
    // A host table's tier says its cache: "host, cache 20%, 96% hits".
    std::string tier = t.tier == "host" ? "host, cache " + percent(t.cache_fraction) + ", " + percent(t.hit_rate) + " hits" : t.tier;
    tables.add({t.name, with_commas(t.rows) + " x " + std::to_string(t.dim), fixed(t.pooling, 1) + " " + t.pooling_mode, t.type,
                tier, ranges_text(shard_ranks(t)), human_ms(l.lookup_ms), human_ms(l.all_to_all_ms), human_ms(l.allreduce_ms),
                human_bytes(t.tier == "host" ? l.mem_bytes + l.host_mem_bytes : l.mem_bytes) + (t.tier == "host" ? " (host)" : "")});
  }
  out << tables.text() << "\n";
  Table ranks({"rank", "node", "lookup", "all-to-all", "allreduce", "dense", "step", "memory vs limit", "host"}, "rrrrrrrrr");
  for (const auto& r : sharding.ranks) {
    ranks.add({std::to_string(r.rank), std::to_string(r.rank / plan.cluster.gpus_per_node), human_ms(r.lookup_ms),
               human_ms(r.all_to_all_ms), human_ms(r.allreduce_ms), human_ms(r.dense_ms), human_ms(r.step_ms),
               human_bytes(r.mem_bytes) + " (" + percent_of_limit(fraction_of(r.mem_bytes, plan.cluster.mem_bytes)) + ")",
               human_bytes(r.host_mem_bytes)});
  }
  auto balance = imbalance(sharding);
  out << ranks.text() << "\nimbalance  step max/mean " << fixed(balance.step, 3) << ", memory max/mean " << fixed(balance.memory, 3)
      << "\n";
  return out.str();
}

nlohmann::json sharding_json(const plan::Sharding& sharding) {
  nlohmann::json tables = nlohmann::json::array(), ranks = nlohmann::json::array();
  for (const auto& t : sharding.tables) {
    nlohmann::json table = {{"name", t.name}, {"type", t.type}, {"tier", t.tier}, {"ranks", shard_ranks(t)}};
    if (t.tier == "host") table["cache_fraction"] = stable_number(t.cache_fraction), table["hit_rate"] = stable_number(t.hit_rate);
    tables.push_back(table);
  }
  for (const auto& r : sharding.ranks)
    ranks.push_back({{"rank", r.rank}, {"step_ms", stable_number(r.step_ms)}, {"mem_bytes", stable_number(r.mem_bytes)}});
  auto balance = imbalance(sharding);
  return {{"tables", tables},
          {"ranks", ranks},
          {"comm_dtype", sharding.comm_dtype},
          {"comm_dtype_bwd", sharding.comm_dtype_bwd},
          {"imbalance", {{"step", stable_number(balance.step)}, {"memory", stable_number(balance.memory)}}}};
}

}  // namespace

std::string show_text(const plan::Plan& plan) {
  std::ostringstream out;
  out << "plan       " << plan.path << "\n";
  if (plan.generator) out << "command    " << plan.generator->command << "\n";
  out << "model      " << plan.model.path << " (" << plan.model.format << ", " << with_commas(plan.model.params)
      << " params, sha256 " << plan.model.sha256.substr(0, 12) << ")\n"
      << "cluster    " << plan.cluster.gpus << " x " << plan.cluster.device << " in " << plural(plan.cluster.nodes, "node") << " of "
      << plan.cluster.gpus_per_node << ", "
      << (plan.cluster.node_groups.empty() ? human_bytes(static_cast<double>(plan.cluster.mem_bytes)) + " per device"
                                           : node_groups_text(plan.cluster))
      << "\n"
      << "batch      " << plan.batch.global << " = " << plural(plan.batch.pipelines, "pipeline") << " x "
      << plural(plan.batch.microbatches, "microbatch", "microbatches") << " x " << plural(plan.batch.microbatch_size, "sample") << ", "
      << plan::schedule_label(plan.schedule, plan.interleave)
      << ", " << plan::optimizer_name(plan.optimizer) << ", " << plan::precision_name(plan.precision)
      << plan::fused_kernels_label(plan.attention, plan.elementwise) << "\n"
      << "layout     " << plural(static_cast<std::int64_t>(plan.stages.size()), "stage")
      << (plan.interleave > 1 ? " on " + plural(plan.pipeline_stages(), "device group") : "") << " x "
      << plural(plan.batch.pipelines, "pipeline") << " on " << plural(static_cast<std::int64_t>(plan.ranks.size()), "rank")
      << "\n\n"
      << stage_table(plan) << "\n";
  out << tensor_parallel_text(plan);
  if (plan.sharding) out << sharding_text(plan) << "\n";
  char summary[1024];  // room for any double in %.1f
  std::snprintf(summary, sizeof summary, "predicted  step %s, %.1f samples/s, bubble %.0f%%, lower bound %s, efficiency %.0f%%\n",
                human_ms(plan.predicted.iteration_ms).c_str(), plan.predicted.samples_per_s, 100 * plan.predicted.bubble_fraction,
                human_ms(plan.predicted.lower_bound_ms).c_str(), 100 * plan.predicted.efficiency);
  out << summary;
  if (plan.predicted.flop_bound_ms > 0) {  // plans from before the physical bound lack it
    // human_flops picks the unit: a CPU's 0.02 TFLOP/s reads as 20.00 GFLOP/s, not 0.0.
    std::snprintf(summary, sizeof summary, "flops      %s/s of the model per device, %.0f%% of peak; %s at peak\n",
                  human_flops(plan.predicted.model_tflops_per_device * 1e12).c_str(), 100 * plan.predicted.peak_fraction,
                  human_ms(plan.predicted.flop_bound_ms).c_str());
    out << summary;
  }
  out << "peak       " << human_bytes(plan.predicted.peak_mem_bytes) << " per device"
      << (plan.cluster.node_groups.empty() ? " of " + human_bytes(static_cast<double>(plan.cluster.mem_bytes)) : std::string())
      << " (" << (plan.cluster.node_groups.empty() ? "" : "the fullest stage ")
      << percent_of_limit(peak_memory_fraction(plan)) << ")\n"
      << "unused     " << unused_text(plan) << "\n";
  return out.str();
}

namespace {

// plan.json's prediction, with the peak memory as a share of the limit.
nlohmann::json predicted_json(const plan::Plan& plan) {
  auto predicted = plan::prediction_to_json(plan.predicted);
  predicted["peak_mem_fraction"] = stable_number(peak_memory_fraction(plan));
  return predicted;
}

}  // namespace

nlohmann::json show_json(const plan::Plan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& stage : plan.stages) stages.push_back(stage_json(plan, stage));
  nlohmann::json summary = {{"plan", plan.path},
          {"model", {{"path", plan.model.path}, {"format", plan.model.format}, {"params", plan.model.params}}},
          {"cluster",
           {{"gpus", plan.cluster.gpus}, {"nodes", plan.cluster.nodes}, {"gpus_per_node", plan.cluster.gpus_per_node}, {"device", plan.cluster.device},
            {"mem_bytes", plan.cluster.mem_bytes}}},
          {"batch",
           {{"global", plan.batch.global}, {"pipelines", plan.batch.pipelines}, {"microbatches", plan.batch.microbatches},
            {"microbatch_size", plan.batch.microbatch_size}}},
          {"schedule", plan.schedule},
          {"optimizer", plan.optimizer},
          {"precision", plan.precision},
          {"ranks", plan.ranks.size()},
          {"stages", stages},
          {"predicted", predicted_json(plan)},
          {"unused_devices",
           {{"count", plan.unused.ranks.size()}, {"ranks", plan.unused.ranks}, {"reason", plan.unused.reason}}}};
  if (plan.interleave > 1) summary["interleave"] = plan.interleave;
  for (const auto& group : plan.cluster.node_groups)
    summary["cluster"]["node_groups"].push_back({{"nodes", group.nodes}, {"device", group.device}, {"mem_bytes", group.mem_bytes}});
  plan::add_fused_kernels(summary, plan.attention, plan.elementwise);
  if (plan.sharding) summary["sharding"] = sharding_json(*plan.sharding);
  if (plan.generator) summary["generator"] = plan::generator_to_json(*plan.generator);
  return summary;
}

}  // namespace rannc
