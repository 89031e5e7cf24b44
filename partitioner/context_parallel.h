// Context parallelism found in a graph: whether a model may split each sample's sequence across
// the devices of a group, and what the group exchanges where it does.
//
// With context parallelism of degree c (Megatron-LM's --context-parallel-size, Transformer
// Engine's ring attention), each of c devices holds 1/c of every sample's positions and runs every
// op on them: the ops that work on each position alone (linear layers, norms, activations,
// embeddings, the output layer) need nothing from the others, and each attention core needs the
// keys and values of every position. Its devices pass their keys and values around a ring in
// forward and, since the ring's chunks are not kept, again in backward, with their gradients
// coming back: the exchange is of the keys and values before grouped-query attention repeats
// them, so a model with 8 key/value heads of 64 exchanges 1/8 of what its queries take. The
// weights are whole on each device of the group and their gradients are summed over it as over
// data-parallel replicas.
//
// A model allows it when its layers are the tensor-parallel analysis's regions with attention
// cores (partitioner/tensor_regions.h), and every other op that reads the samples' data (not only
// their shapes, as the positions of a rotary embedding do) works on each
// position alone (a sequence op, a lookup, the vocabulary's regions) or only moves data. A
// convolution, a pooling, a reduction across positions (a classifier's pooling, a loss inside
// the graph) or a product outside the regions mixes positions, or may: such a model keeps its
// sequences whole, and the reason is given.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "partitioner/tensor_regions.h"

namespace rannc::partition {

// The keys and values an attention core's ring passes around, for one core.
struct ExchangedValues {
  ir::OpId core_op = ir::kNoId;       // the core's first op: where the exchange is costed
  std::vector<ir::ValueId> values;    // its keys and values, before any repeat of their heads
};

struct ContextSplit {
  bool allowed = false;
  std::string reason;  // why not, when not allowed
  std::vector<ExchangedValues> exchanged;  // one per attention core, ascending by core_op
};

// Deterministic: the same graph and regions give the same result.
ContextSplit find_context_split(const ir::Graph& graph, const TensorRegions& regions);

}  // namespace rannc::partition
