// Coarsening: groups the atomic units into a sequence of blocks for the stage search.
//
// 1. METIS k-way cuts the undirected unit graph (vertex weight: forward + backward time; edge
//    weight: bytes of the tensors between units) into parts balanced in time with few bytes cut.
// 2. Acyclic repair: the units are ordered topologically, preferring to stay in the current part;
//    each run of one part becomes a block, so a part whose units interleave with another's is
//    split and the blocks form a sequence with every edge pointing forward.
// 3. Runs beyond the target count are merged with a neighbour (least time first).
// 4. Each boundary then moves, within half of its neighbouring blocks, to the position in the
//    sequence where the fewest bytes are alive. Repeated layers have the same cheap positions,
//    so their blocks come out alike.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "partitioner/units.h"

namespace rannc::partition {

struct Blocking {
  std::vector<int> order;   // unit indices in sequence order (a topological order)
  std::vector<int> starts;  // start of each block in `order`; block i is [starts[i], starts[i+1]), last ends at order.size()

  int count() const { return static_cast<int>(starts.size()); }
  int begin(int block) const { return starts[static_cast<std::size_t>(block)]; }
  int end(int block) const;
};

// unit_ms: forward + backward time of each unit (the METIS vertex weights).
Blocking coarsen(const ir::Graph& graph, const UnitGraph& units, const std::vector<double>& unit_ms, int target_blocks);

// The METIS seed alone: a part index per unit, `parts` parts (without METIS for one part, or parts of fewer than 4 units).
std::vector<int> metis_parts(int unit_count, const std::vector<UnitEdge>& edges, const std::vector<double>& unit_ms,
                             int parts);

}  // namespace rannc::partition
