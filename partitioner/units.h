// Atomic units: the smallest pieces the partitioner moves between stages.
//
// A unit is one batch op (an op computing a tensor from the contents of the batch) plus the
// glue it needs: the ops that compute only from weights, constants and the shapes of tensors
// (weight.t(), casts, aten::size, a batch size turned into a tensor, a mask built from the
// sequence length, a weight sliced to it), with the ops writing into them in place, are copied
// into every unit that consumes them. Only batch tensors then cross a cut between units, which
// is what a stage boundary may carry, and each stage computes sizes from its own replicas' batch.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace rannc::partition {

struct Unit {
  ir::OpId anchor = ir::kNoId;   // the batch op
  std::vector<ir::OpId> ops;     // the anchor and its copied glue, in graph topological order
};

// A batch tensor passed from one unit to later ones (or from the model's inputs).
struct CrossingTensor {
  ir::ValueId value = ir::kNoId;
  int producer = -1;            // unit index, -1 for a model input
  std::vector<int> consumers;   // unit indices, ascending, without repeats
  bool model_output = false;
};

struct UnitGraph {
  std::vector<Unit> units;               // in a topological order of the model
  std::vector<CrossingTensor> tensors;   // every batch tensor some unit reads from another (or a model input)
  std::vector<int> unit_of_anchor;       // op id -> unit index, -1 for glue
};

// Throws InputError when the model has no batch op (nothing to partition).
UnitGraph build_units(const ir::Graph& graph);

// The units' input and output tensors in unit-index terms, as a directed adjacency: for each unit,
// the (consumer unit, bytes) pairs of the tensors it sends. Bytes are at the evaluated batch.
struct UnitEdge {
  int from = 0, to = 0;
  double bytes = 0;
};
std::vector<UnitEdge> unit_edges(const ir::Graph& graph, const UnitGraph& units);

}  // namespace rannc::partition
