// The embedding tables of a model, found in its IR the same way for both frontends: TorchScript's
// aten::embedding_bag and aten::embedding, and ONNX's Gather on an initializer (pooled when a
// ReduceSum or ReduceMean over the bag follows) or the Loop PyTorch exports EmbeddingBag as. The
// sharding planner of recommendation models starts from these. Tables are never loaded: a
// shape-only model is read from its shapes alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace rannc::sharding {

struct EmbeddingTable {
  std::string weight;  // the parameter holding the table
  std::int64_t rows = 0, dim = 0;
  ir::DType dtype = ir::DType::kFloat32;
  std::string pooling_mode;             // "sum", "mean", "max", or "none" (a row per lookup)
  std::vector<std::string> indexed_by;  // the model inputs its indices come from
  double pooling = 1;                   // lookups per sample, from the example inputs' shapes
  // How its rows are accessed, for the device cache of a table in host memory (--table-constraints):
  // uniformly by default; by a Zipf law of this exponent (rank k's row taken in proportion to
  // k^-zipf); or at a measured hit rate of the cache, whatever its size.
  double zipf = 0;        // 0: uniform
  double hit_rate = -1;   // below 0: none measured
  // The ops that look the table up and pool the bags, and what they hand the rest of the model
  // (one per lookup): what a sharded plan moves out of the dense part.
  std::vector<ir::OpId> ops;
  std::vector<ir::ValueId> indices, pooled;
};

// In parameter order of first use. `batch`: the samples the graph's shapes were evaluated at.
std::vector<EmbeddingTable> find_embedding_tables(const ir::Graph& graph, std::int64_t batch);

}  // namespace rannc::sharding
