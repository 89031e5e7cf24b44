#include "partitioner/block_costs.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

namespace rannc::partition {
namespace {

// The distinct ops of each block (glue copied into several of its units counts once).
std::vector<std::vector<ir::OpId>> ops_by_block(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking) {
  std::vector<std::vector<ir::OpId>> ops(blocking.count());
  std::vector<int> stamp(graph.ops().size(), -1);
  for (int block = 0; block < blocking.count(); ++block) {
    for (int i = blocking.begin(block); i < blocking.end(block); ++i) {
      for (auto op : units.units[blocking.order[i]].ops) {
        if (stamp[op] == block) continue;
        stamp[op] = block;
        ops[block].push_back(op);
      }
    }
  }
  return ops;
}

void add_block(std::vector<int>& blocks, int block) {
  if (blocks.empty() || blocks.back() != block) blocks.push_back(block);
}

// [op]: whether it runs split at a degree: it belongs to a region that allows it, or it works
// per position of the sequence and some layer region splits (sequence parallelism).
std::vector<bool> split_ops(std::size_t op_count, const TensorRegions& regions, int degree) {
  std::vector<bool> split(op_count, false);
  if (degree <= 1 || !regions.allows_degree(degree)) return split;
  for (const auto& region : regions.regions) {
    if (!region.allows(degree)) continue;
    for (auto op : region.ops) split[static_cast<std::size_t>(op)] = true;
  }
  for (auto op : regions.sequence_ops) split[static_cast<std::size_t>(op)] = true;
  return split;
}

// [op]: the region of the attention core it belongs to when selective recomputation runs it
// again: every consumer of its outputs is in the same core (not the product with V, whose output
// the output projection keeps), else -1.
std::vector<int> recomputed_core_of_op(const ir::Graph& graph, const TensorRegions& regions) {
  std::vector<int> core(graph.ops().size(), -1);
  for (std::size_t r = 0; r < regions.regions.size(); ++r)
    for (auto op : regions.regions[r].attention_core) core[static_cast<std::size_t>(op)] = static_cast<int>(r);
  std::vector<int> recomputed(graph.ops().size(), -1);
  for (std::size_t op = 0; op < core.size(); ++op) {
    if (core[op] < 0) continue;
    bool inside = true;
    for (auto out : graph.op(static_cast<ir::OpId>(op)).outputs) {
      inside = inside && !graph.value(out).model_output;
      for (auto consumer : graph.value(out).consumers) inside = inside && core[static_cast<std::size_t>(consumer)] == core[op];
    }
    if (inside) recomputed[op] = core[op];
  }
  return recomputed;
}

// [op]: what rannc-run keeps beyond the op's share where a region's column ops read its output
// gathered along the sequence (tp_gather): they keep the gathered whole tensor for backward, not
// the sequence op's 1/t of it. (Megatron-LM keeps the part and gathers it again in backward.)
std::vector<double> gathered_input_bytes(const ir::Graph& graph, const TensorRegions& regions,
                                         const cost::ActivationMemory& activations, const std::vector<bool>& split,
                                         int degree, plan::Precision precision) {
  std::vector<double> extra(graph.ops().size(), 0);
  if (regions.regather_inputs) return extra;
  for (const auto& region : regions.regions) {
    if (!region.allows(degree) || region.input == ir::kNoId) continue;
    ir::OpId producer = graph.value(region.input).producer;
    if (producer == ir::kNoId || !split[static_cast<std::size_t>(producer)]) continue;
    if (std::find(region.ops.begin(), region.ops.end(), producer) != region.ops.end()) continue;
    if (!activations.saved[static_cast<std::size_t>(region.input)]) continue;
    extra[static_cast<std::size_t>(producer)] += cost::stored_bytes(graph.value(region.input), precision) * (degree - 1) / degree;
  }
  return extra;
}

// Each block's times, workspace and kept activations at one tensor-parallel degree (1: none).
struct BlockTables {
  std::vector<std::vector<double>> fwd, bwd, fwd_host, bwd_host, workspace;  // [block][sample]
  std::vector<double> kept;                                                  // [block]
  BlockCosts::Cores cores;
};

// Each device of a context group runs 1/context of each sample's positions: its ops' work and
// workspace are those of 1/context of the samples (the roofline scales tokens, and an attention
// core's scores for 1/c of the queries against every key are 1/c of them); what they keep is
// scaled so by the search.
BlockTables cost_blocks(const ir::Graph& graph, const std::vector<std::vector<ir::OpId>>& ops,
                        const cost::CostModel& costs, const cost::ActivationMemory& activations,
                        const TensorRegions& regions, const std::vector<int>& recomputed_core, int degree,
                        int context, const BlockCosts& result) {
  std::size_t sizes = result.samples.size();
  const std::vector<bool> split = split_ops(graph.ops().size(), regions, degree);
  const std::vector<double> gathered = gathered_input_bytes(graph, regions, activations, split, degree, costs.precision());
  BlockTables tables;
  for (const auto& block_ops : ops) {
    std::vector<double> fwd(sizes, 0), bwd(sizes, 0), fwd_host(sizes, 0), bwd_host(sizes, 0), workspace(sizes, 0);
    std::vector<double> core_fwd(sizes, 0);
    double kept = 0;
    std::map<int, double> kept_by_core;
    for (auto op : block_ops) {
      int ways = split[static_cast<std::size_t>(op)] ? degree : 1;
      int core = recomputed_core[static_cast<std::size_t>(op)];
      kept += activations.kept_bytes[op] / ways + gathered[static_cast<std::size_t>(op)];
      if (core >= 0) kept_by_core[core] += activations.kept_bytes[op] / ways;
      double fixed = activations.weight_grad_bytes[op], scaled = activations.workspace_bytes[op] - fixed;
      for (std::size_t i = 0; i < sizes; ++i) {
        double fraction = result.samples[i] / result.evaluated_batch / context;
        cost::OpCost cost = costs.split_op_cost(op, fraction, ways);
        fwd[i] += cost.fwd_ms;
        bwd[i] += cost.bwd_ms;
        fwd_host[i] += cost.fwd_host_ms;
        bwd_host[i] += cost.bwd_host_ms;
        if (core >= 0) core_fwd[i] += cost.fwd_ms;
        workspace[i] = std::max(workspace[i], (fixed + fraction * scaled) / ways);
      }
    }
    tables.fwd.push_back(fwd);
    tables.bwd.push_back(bwd);
    tables.fwd_host.push_back(fwd_host);
    tables.bwd_host.push_back(bwd_host);
    tables.workspace.push_back(workspace);
    tables.kept.push_back(kept);
    tables.cores.fwd_ms.push_back(core_fwd);
    double core_kept = 0, largest = 0;
    for (const auto& [_, bytes] : kept_by_core) core_kept += bytes, largest = std::max(largest, bytes);
    tables.cores.kept_bytes.push_back(core_kept);
    tables.cores.largest_bytes.push_back(largest);
  }
  return tables;
}

// The bytes of the parallel cross entropy's three all-reduces over the group, in fp32: each
// position's largest logit, its sum of exponentials and its target's logit (Megatron-LM's
// vocab_parallel_cross_entropy).
double cross_entropy_reduced_bytes(const ir::Value& logits) {
  constexpr double kReductions = 3, kFloatBytes = 4;
  const auto& shape = logits.type.shape;
  return kReductions * kFloatBytes * static_cast<double>(logits.type.numel()) / static_cast<double>(shape.back());
}

// Marks the boundaries between blocks that the ops span: no stage that must hold them whole
// starts or ends there. cut_before has one entry per block boundary.
void mark_cuts(const std::vector<ir::OpId>& ops, const std::vector<int>& block_of_op, std::vector<bool>& cut_before) {
  if (ops.empty()) return;
  int low = static_cast<int>(cut_before.size()), high = 0;
  for (auto op : ops) {
    int block = block_of_op[static_cast<std::size_t>(op)];
    low = std::min(low, block), high = std::max(high, block);
  }
  for (int b = low + 1; b <= high; ++b) cut_before[static_cast<std::size_t>(b)] = true;
}

// Each region's all-reduces, in the blocks of the ops that need them: a row op's output in
// forward and the column ops' input gradient in backward; the output layer's cross entropy
// instead of a row op, and no gradient for an embedding's token ids.
void add_collectives(const ir::Graph& graph, const std::vector<int>& block_of_op, const TensorRegions& regions,
                     plan::Precision precision, BlockCosts::Split& split) {
  std::size_t blocks = split.fwd_ms.size();
  split.fwd_reduced_bytes.assign(blocks, 0);
  split.bwd_reduced_bytes.assign(blocks, 0);
  split.fwd_collectives.assign(blocks, 0);
  split.bwd_collectives.assign(blocks, 0);
  split.cuts_region_before.assign(blocks + 1, false);
  split.final_output_saved_bytes.assign(blocks, 0);
  auto block = [&](ir::OpId op) { return block_of_op[static_cast<std::size_t>(op)]; };
  for (const auto& region : regions.regions) {
    if (split.degree == 1 || !region.allows(split.degree)) continue;
    mark_cuts(region.ops, block_of_op, split.cuts_region_before);
    if (region.row_op != ir::kNoId) {
      split.fwd_reduced_bytes[block(region.row_op)] += cost::stored_bytes(graph.value(region.output), precision);
      split.fwd_collectives[block(region.row_op)] += 1;
    }
    if (region.kind == plan::RegionKind::kVocabularyHead) {
      split.fwd_reduced_bytes[block(region.anchor())] += cross_entropy_reduced_bytes(graph.value(region.output));
      split.fwd_collectives[block(region.anchor())] += 3;
      const auto& logits = graph.value(region.output);
      if (logits.consumers.empty())
        split.final_output_saved_bytes[block(region.anchor())] +=
            cost::stored_bytes(logits, precision) * (1 - 1.0 / split.degree);
    }
    if (region.input != ir::kNoId) {
      split.bwd_reduced_bytes[block(region.column_ops.front())] += cost::stored_bytes(graph.value(region.input), precision);
      split.bwd_collectives[block(region.column_ops.front())] += 1;
    }
  }
}

// What a context group's rings pass in the blocks of the attention cores, and the cores a stage
// of the group holds whole.
void add_context_exchange(const ir::Graph& graph, const std::vector<int>& block_of_op, const TensorRegions& regions,
                          const ContextSplit& context_split, plan::Precision precision, BlockCosts::Split& split) {
  split.exchanged_bytes.assign(split.fwd_ms.size(), 0);
  split.exchanges.assign(split.fwd_ms.size(), 0);
  for (const auto& core : context_split.exchanged) {
    const auto block = static_cast<std::size_t>(block_of_op[static_cast<std::size_t>(core.core_op)]);
    split.exchanges[block] += 1;
    for (ir::ValueId value : core.values) split.exchanged_bytes[block] += cost::stored_bytes(graph.value(value), precision);
  }
  for (const auto& region : regions.regions) mark_cuts(region.attention_core, block_of_op, split.cuts_region_before);
}

void collect_weights(const ir::Graph& graph, const std::vector<std::vector<ir::OpId>>& ops, const TensorRegions& regions,
                     BlockCosts& result) {
  // How the region splitting each weight splits it (the last region naming a weight wins).
  struct WeightSplit {
    std::int64_t divisor = 0;
    bool uneven = false;
  };
  std::map<ir::ValueId, WeightSplit> split_by;
  for (const auto& region : regions.regions)
    for (const auto& weight : region.weights) split_by[weight.weight] = {region.divisor, region.is_vocabulary()};
  std::map<ir::ValueId, BlockCosts::Weight> weights;
  for (int block = 0; block < static_cast<int>(ops.size()); ++block) {
    for (auto op : ops[block]) {
      auto inputs = graph.op(op).inputs;  // each weight once per op
      std::sort(inputs.begin(), inputs.end());
      inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
      for (auto input : inputs) {
        const auto& value = graph.value(input);
        if (!value.is_tensor() || !value.is_weight()) continue;
        auto& weight = weights[input];
        auto split = split_by.find(input);
        if (split != split_by.end()) {
          weight.split_divisor = split->second.divisor;
          weight.split_unevenly = split->second.uneven;
        }
        if (value.role == ir::ValueRole::kParam) {
          weight.param_elements = static_cast<double>(value.type.numel());
          weight.reads.push_back(block);
        } else {
          weight.buffer_bytes = static_cast<double>(value.type.bytes());
        }
        add_block(weight.blocks, block);
      }
    }
  }
  for (auto& [_, weight] : weights) result.weights.push_back(std::move(weight));
}

void collect_tensors(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking,
                     const cost::ActivationMemory& activations, plan::Precision precision, BlockCosts& result) {
  std::vector<int> block_of_unit(units.units.size());
  for (int block = 0; block < blocking.count(); ++block)
    for (int i = blocking.begin(block); i < blocking.end(block); ++i) block_of_unit[blocking.order[i]] = block;
  for (const auto& crossing : units.tensors) {
    BlockCosts::Tensor tensor;
    tensor.bytes = cost::stored_bytes(graph.value(crossing.value), precision);
    tensor.producer = crossing.producer < 0 ? -1 : block_of_unit[crossing.producer];
    tensor.model_output = crossing.model_output;
    tensor.batch_free = graph.value(crossing.value).type.batch_dim < 0;
    tensor.saved = activations.saved[static_cast<std::size_t>(crossing.value)];
    for (int unit : crossing.consumers) {
      int block = block_of_unit[unit];
      if (block != tensor.producer) tensor.consumers.push_back(block);
    }
    std::sort(tensor.consumers.begin(), tensor.consumers.end());
    tensor.consumers.erase(std::unique(tensor.consumers.begin(), tensor.consumers.end()), tensor.consumers.end());
    if (!tensor.consumers.empty() || tensor.model_output) result.tensors.push_back(std::move(tensor));
  }
}

// Prefix sums of a per-block amount (empty: zero everywhere).
std::vector<double> prefix_sums(const std::vector<double>& per_block, int count) {
  std::vector<double> prefix(static_cast<std::size_t>(count) + 1, 0.0);
  for (int block = 0; block < count && !per_block.empty(); ++block) prefix[block + 1] = prefix[block] + per_block[block];
  return prefix;
}

// A RangeTable-shaped table of the largest per-block amount in each range (empty: zero).
std::vector<double> running_maxima(const std::vector<double>& per_block, int count) {
  std::vector<double> table(static_cast<std::size_t>(count) * static_cast<std::size_t>(count + 1), 0.0);
  if (per_block.empty()) return table;
  for (int begin = 0; begin < count; ++begin) {
    double largest = 0;
    for (int end = begin + 1; end <= count; ++end) {
      largest = std::max(largest, per_block[end - 1]);
      table[begin * (count + 1) + end] = largest;
    }
  }
  return table;
}

}  // namespace

std::vector<double> unit_step_ms(const UnitGraph& units, const cost::CostModel& costs) {
  std::vector<double> ms;
  for (const auto& unit : units.units) {
    cost::StepTime step;
    for (auto op : unit.ops) step.add(costs.op_cost(op));
    ms.push_back(step.ms());
  }
  return ms;
}

int BlockCosts::sample_index(int microbatch_samples) const {
  auto it = std::lower_bound(samples.begin(), samples.end(), microbatch_samples);
  if (it == samples.end() || *it != microbatch_samples)
    throw std::out_of_range("microbatch of " + std::to_string(microbatch_samples) + " samples was not costed");
  return static_cast<int>(it - samples.begin());
}

const BlockCosts::Split* BlockCosts::split(int degree, int context) const {
  for (const auto& split : splits)
    if (split.degree == degree && split.context == context) return &split;
  return nullptr;
}

BlockCosts block_costs(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking,
                       const cost::CostModel& costs, const cost::ActivationMemory& activations, std::int64_t evaluated_batch,
                       std::vector<int> samples, const TensorRegions& regions, const std::vector<int>& degrees,
                       const ContextSplit& context_split, const std::vector<int>& contexts) {
  std::sort(samples.begin(), samples.end());
  samples.erase(std::unique(samples.begin(), samples.end()), samples.end());
  BlockCosts result;
  result.evaluated_batch = static_cast<double>(evaluated_batch);
  result.samples = samples;
  auto ops = ops_by_block(graph, units, blocking);
  const std::vector<int> recomputed_core = recomputed_core_of_op(graph, regions);
  BlockTables whole = cost_blocks(graph, ops, costs, activations, regions, recomputed_core, 1, 1, result);
  result.fwd_ms = std::move(whole.fwd);
  result.bwd_ms = std::move(whole.bwd);
  result.fwd_host_ms = std::move(whole.fwd_host);
  result.bwd_host_ms = std::move(whole.bwd_host);
  result.workspace_bytes = std::move(whole.workspace);
  result.kept_bytes = std::move(whole.kept);
  for (const auto& block_ops : ops) {
    double fixed = 0;
    for (auto op : block_ops) fixed += activations.fixed_kept_bytes[static_cast<std::size_t>(op)];
    result.fixed_kept_bytes.push_back(fixed);
  }
  result.cores = std::move(whole.cores);
  std::vector<int> block_of_op(graph.ops().size(), 0);
  for (int block = 0; block < static_cast<int>(ops.size()); ++block)
    for (auto op : ops[block]) block_of_op[static_cast<std::size_t>(op)] = block;
  result.cuts_core_before.assign(ops.size() + 1, false);
  for (const auto& region : regions.regions) mark_cuts(region.attention_core, block_of_op, result.cuts_core_before);
  auto add_split = [&](int degree, int context) {
    BlockTables tables = cost_blocks(graph, ops, costs, activations, regions, recomputed_core, degree, context, result);
    BlockCosts::Split split;
    split.degree = degree;
    split.context = context;
    split.fwd_ms = std::move(tables.fwd);
    split.bwd_ms = std::move(tables.bwd);
    split.workspace_bytes = std::move(tables.workspace);
    split.kept_bytes = std::move(tables.kept);
    split.cores = std::move(tables.cores);
    add_collectives(graph, block_of_op, regions, costs.precision(), split);
    if (context > 1) add_context_exchange(graph, block_of_op, regions, context_split, costs.precision(), split);
    result.splits.push_back(std::move(split));
  };
  std::vector<int> group_degrees{1};
  for (int degree : degrees)
    if (degree > 1 && regions.allows_degree(degree)) add_split(degree, 1), group_degrees.push_back(degree);
  for (int context : contexts)
    if (context > 1 && context_split.allowed)
      for (int degree : group_degrees) add_split(degree, context);
  collect_weights(graph, ops, regions, result);
  collect_tensors(graph, units, blocking, activations, costs.precision(), result);
  return result;
}

RangeTable::RangeTable(const BlockCosts& blocks) : count_(blocks.count()) {
  // The tables per device of a tensor-parallel degree: a context split adds none (its weights
  // are whole on each device, and its share of the samples scales what it keeps).
  std::vector<const BlockCosts::Split*> tensor_splits;
  for (const auto& split : blocks.splits)
    if (split.context == 1) tensor_splits.push_back(&split);
  std::size_t cells = static_cast<std::size_t>(count_) * static_cast<std::size_t>(count_ + 1);
  for (auto* table : {&param_elements_, &buffer_bytes_, &received_bytes_, &model_input_bytes_, &sent_bytes_,
                      &final_output_bytes_, &saved_sent_bytes_, &batch_free_sent_})
    table->assign(cells, 0);
  // Each table first gets the amount added at the first block it applies to, then a running sum over end.
  auto cell = [&](std::vector<double>& table, int begin, int end) -> double& { return table[begin * (count_ + 1) + end]; };
  // A range [begin, end) holds a weight when the first block at or after begin that reads it is before end.
  auto add_weight = [&](const BlockCosts::Weight& weight, std::vector<double>& params, std::vector<double>* buffers) {
    for (int begin = 0; begin < count_; ++begin) {
      auto first = std::lower_bound(weight.blocks.begin(), weight.blocks.end(), begin);
      if (first == weight.blocks.end()) break;
      cell(params, begin, *first + 1) += weight.param_elements;
      if (buffers) cell(*buffers, begin, *first + 1) += weight.buffer_bytes;
    }
  };
  for (const auto& weight : blocks.weights) add_weight(weight, param_elements_, &buffer_bytes_);
  for (const auto* split_of_degree : tensor_splits) {
    const auto& split = *split_of_degree;
    split_degrees_.push_back(split.degree);
    auto& table = split_param_elements_.emplace_back(cells, 0.0);
    for (const auto& weight : blocks.weights)
      if (weight.splits(split.degree)) add_weight(weight, table, nullptr);
    for (int begin = 0; begin < count_; ++begin)
      for (int end = begin + 1; end <= count_; ++end) cell(table, begin, end) += cell(table, begin, end - 1);
    split_kept_prefix_.push_back(prefix_sums(split.kept_bytes, count_));
    split_final_output_saved_prefix_.push_back(prefix_sums(split.final_output_saved_bytes, count_));
  }
  // Tensors produced before begin (or model inputs) and read in the range.
  for (const auto& tensor : blocks.tensors) {
    auto& table = tensor.producer < 0 ? model_input_bytes_ : received_bytes_;
    for (int begin = tensor.producer + 1; begin < count_; ++begin) {
      auto first = std::lower_bound(tensor.consumers.begin(), tensor.consumers.end(), begin);
      if (first == tensor.consumers.end()) break;
      cell(table, begin, *first + 1) += tensor.bytes;
    }
  }
  // Tensors produced in the range and read after it: produced at p, last read at c, they leave
  // every range [begin, end) with begin <= p < end <= c (always, for model outputs).
  for (const auto& tensor : blocks.tensors) {
    if (tensor.producer < 0 || (tensor.consumers.empty() && !tensor.model_output)) continue;
    int last = tensor.model_output ? count_ : tensor.consumers.back();
    for (int begin = 0; begin <= tensor.producer; ++begin) {
      cell(sent_bytes_, begin, tensor.producer + 1) += tensor.bytes;
      if (last + 1 <= count_) cell(sent_bytes_, begin, last + 1) -= tensor.bytes;
      if (tensor.consumers.empty()) {
        cell(final_output_bytes_, begin, tensor.producer + 1) += tensor.bytes;
      } else if (tensor.saved) {
        cell(saved_sent_bytes_, begin, tensor.producer + 1) += tensor.bytes;
        if (last + 1 <= count_) cell(saved_sent_bytes_, begin, last + 1) -= tensor.bytes;
      }
    }
    // A batch-free model output that no later block reads (a loss) is not split: the runtime
    // weights each replica's value by its share of the batch.
    if (!tensor.batch_free || tensor.consumers.empty()) continue;
    for (int begin = 0; begin <= tensor.producer; ++begin) {
      cell(batch_free_sent_, begin, tensor.producer + 1) += 1;
      cell(batch_free_sent_, begin, tensor.consumers.back() + 1) -= 1;
    }
  }
  // Per device, a split weight's slice: 1/degree of it.
  auto largest_weights = [&](int degree) {
    std::vector<double> largest_in_block(static_cast<std::size_t>(count_), 0);
    for (const auto& weight : blocks.weights) {
      double elements = weight.splits(degree) ? weight.param_elements / degree : weight.param_elements;
      for (int block : weight.blocks) largest_in_block[block] = std::max(largest_in_block[block], elements);
    }
    return running_maxima(largest_in_block, count_);
  };
  largest_param_elements_.push_back(largest_weights(1));
  for (const auto* split : tensor_splits) largest_param_elements_.push_back(largest_weights(split->degree));
  core_kept_prefix_.push_back(prefix_sums(blocks.cores.kept_bytes, count_));
  largest_core_.push_back(running_maxima(blocks.cores.largest_bytes, count_));
  for (const auto* split : tensor_splits) {
    core_kept_prefix_.push_back(prefix_sums(split->cores.kept_bytes, count_));
    largest_core_.push_back(running_maxima(split->cores.largest_bytes, count_));
  }
  // A weight is tied in [begin, end) from the end just past its second read at or after begin.
  largest_tied_grad_bytes_.assign(cells, 0);
  for (const auto& weight : blocks.weights) {
    for (int begin = 0; begin < count_; ++begin) {
      auto first = std::lower_bound(weight.reads.begin(), weight.reads.end(), begin);
      if (first == weight.reads.end() || first + 1 == weight.reads.end()) break;
      double& tied = cell(largest_tied_grad_bytes_, begin, *(first + 1) + 1);
      tied = std::max(tied, weight.param_elements * cost::kGradientElementBytes);
    }
  }
  for (int begin = 0; begin < count_; ++begin)
    for (int end = begin + 1; end <= count_; ++end)
      cell(largest_tied_grad_bytes_, begin, end) =
          std::max(cell(largest_tied_grad_bytes_, begin, end), cell(largest_tied_grad_bytes_, begin, end - 1));
  for (auto* table : {&param_elements_, &buffer_bytes_, &received_bytes_, &model_input_bytes_, &sent_bytes_,
                      &final_output_bytes_, &saved_sent_bytes_, &batch_free_sent_}) {
    for (int begin = 0; begin < count_; ++begin)
      for (int end = begin + 1; end <= count_; ++end) cell(*table, begin, end) += cell(*table, begin, end - 1);
  }
  kept_prefix_ = prefix_sums(blocks.kept_bytes, count_);
  fixed_kept_prefix_ = prefix_sums(blocks.fixed_kept_bytes, count_);
  shared_param_elements_.push_back(shared_params(blocks, 1));
  for (const auto* split : tensor_splits) shared_param_elements_.push_back(shared_params(blocks, split->degree));
}

// A range shares a weight when it holds some but not all of the blocks that read it.
std::vector<double> RangeTable::shared_params(const BlockCosts& blocks, int degree) const {
  std::vector<double> table(static_cast<std::size_t>(count_) * static_cast<std::size_t>(count_ + 1), 0.0);
  for (const auto& weight : blocks.weights) {
    if (weight.blocks.size() < 2 || weight.param_elements == 0) continue;
    double elements = weight.splits(degree) ? weight.param_elements / degree : weight.param_elements;
    for (int begin = 0; begin < count_; ++begin)
      for (int end = begin + 1; end <= count_; ++end) {
        bool holds_all = weight.blocks.front() >= begin && weight.blocks.back() < end;
        if (weight.read_in(begin, end) && !holds_all) table[static_cast<std::size_t>(begin * (count_ + 1) + end)] += elements;
      }
  }
  return table;
}

double RangeTable::final_output_bytes(int begin, int end, int degree) const {
  double whole = at(final_output_bytes_, begin, end);
  if (degree == 1) return whole;
  const auto& saved = split_final_output_saved_prefix_.at(split_index(degree));
  return whole - (saved[end] - saved[begin]);
}

double RangeTable::shared_param_elements(int begin, int end, int degree) const {
  return at(shared_param_elements_.at(degree == 1 ? 0 : 1 + split_index(degree)), begin, end);
}

std::size_t RangeTable::split_index(int degree) const {
  return static_cast<std::size_t>(std::find(split_degrees_.begin(), split_degrees_.end(), degree) - split_degrees_.begin());
}

double RangeTable::param_elements(int begin, int end, int degree) const {
  if (degree == 1) return param_elements(begin, end);
  double split = at(split_param_elements_.at(split_index(degree)), begin, end);
  return param_elements(begin, end) - split + split / degree;
}

double RangeTable::largest_param_elements(int begin, int end, int degree) const {
  return at(largest_param_elements_.at(degree == 1 ? 0 : 1 + split_index(degree)), begin, end);
}

double RangeTable::kept_bytes(int begin, int end, int degree) const {
  if (degree == 1) return kept_bytes(begin, end);
  const auto& prefix = split_kept_prefix_.at(split_index(degree));
  return prefix[end] - prefix[begin];
}

double RangeTable::core_kept_bytes(int begin, int end, int degree) const {
  const auto& prefix = core_kept_prefix_.at(degree == 1 ? 0 : split_index(degree) + 1);
  return prefix[end] - prefix[begin];
}

double RangeTable::largest_core_bytes(int begin, int end, int degree) const {
  return at(largest_core_.at(degree == 1 ? 0 : split_index(degree) + 1), begin, end);
}

}  // namespace rannc::partition
