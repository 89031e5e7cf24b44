// The embedding-table sharding planner of recommendation models (issue 17): each table is placed
// data-parallel (DP: on every rank), table-wise (TW: whole on one rank), column-wise (CW: its
// dim cut into pieces placed like tables), row-wise (RW: its rows cut over every rank) or
// table-row-wise (TWRW: rows cut over the ranks of one node). The costs follow TorchRec's
// estimators (docs/DLRM.md) on the cluster's own links and memory bandwidth; the objective is the
// embedding step of the slowest rank (lookups, their all-to-alls and DP's allreduce). A table
// may also live in host memory (the host tier: table-wise, or its rows cut row-wise or
// table-row-wise over the hosts), each shard behind a device cache of a share the planner
// chooses per table, its lookups at TorchRec's UVM-caching bandwidth for the hit rate of that
// cache under the table's access skew (uniform, Zipf, or measured).
//
// The search places tables longest first from three greedy starts (see heuristic() in the
// .cpp; with a host tier, three per cache size), then moves and re-shards tables while that
// helps, then grows the host tables' caches into the memory left; with few tables and ranks it
// is a branch and bound instead, exact (tests/unit/sharding_test.cpp checks it against brute
// force).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cost_model/cluster.h"
#include "sharding/embedding_tables.h"

namespace rannc::sharding {

enum class ShardingType : std::uint8_t { kDataParallel, kTableWise, kColumnWise, kRowWise, kTableRowWise };
inline constexpr int kShardingTypeCount = 5;
// "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise": plan.json's names.
const char* sharding_type_name(ShardingType type);
std::optional<ShardingType> parse_sharding_type(std::string_view name);

// Optimizer state per table element: SGD none, momentum one float, Adam two, row-wise Adagrad
// one float per row.
enum class SparseOptimizer : std::uint8_t { kSgd, kMomentum, kAdam, kRowWiseAdagrad };
// "sgd", "momentum", "adam", "rowwise_adagrad".
const char* sparse_optimizer_name(SparseOptimizer optimizer);
std::optional<SparseOptimizer> parse_sparse_optimizer(std::string_view name);

// Where a table may live: what --table-constraints restricts.
enum class Tier : std::uint8_t { kAny, kDevice, kHost };

// What a table may take. `types` empty: every sharding type.
struct TableConstraint {
  std::vector<ShardingType> types;
  Tier tier = Tier::kAny;
};

struct ShardingProblem {
  std::vector<EmbeddingTable> tables;
  cost::Cluster cluster;
  std::int64_t batch_per_rank = 512;
  SparseOptimizer optimizer = SparseOptimizer::kSgd;
  int forward_comm_bytes = 4;   // element size of the pooled-embedding all-to-all (4 fp32, 2 fp16/bf16)
  int backward_comm_bytes = 4;  // and of its gradients
  std::vector<TableConstraint> constraints;  // empty, or one per table
  // The dense part (MLPs, interaction) runs data-parallel on every rank: its step (compute and
  // gradient allreduce) and its memory are the same on each, added to every rank's load.
  double dense_ms = 0, dense_mem_bytes = 0;
};

// One piece of a table on one rank: rows [row_begin, +rows) and columns [col_begin, +cols).
struct Shard {
  int rank = 0;
  std::int64_t row_begin = 0, rows = 0;
  std::int64_t col_begin = 0, cols = 0;
};

struct RankLoad {
  double lookup_ms = 0, all_to_all_ms = 0, allreduce_ms = 0, dense_ms = 0;
  double mem_bytes = 0;
  double host_bytes = 0;  // of its node's host memory
  double step_ms() const { return lookup_ms + all_to_all_ms + allreduce_ms + dense_ms; }
};

struct TableSharding {
  ShardingType type = ShardingType::kTableWise;
  std::vector<Shard> shards;  // DP: one full copy per rank
  // In the host tier: each shard (table-wise, row-wise or table-row-wise) in the host memory of
  // its rank's node, its device caching `cache_fraction` of the shard's rows, which serve
  // `hit_rate` of the lookups (cache_hit_rate).
  bool host = false;
  double cache_fraction = 0, hit_rate = 0;
  RankLoad load;              // what the table adds to each rank holding a shard
};

struct ShardingSolution {
  std::vector<TableSharding> tables;  // in the problem's order
  std::vector<RankLoad> ranks;
  double objective_ms = 0;            // the slowest rank's step
};

// The share of a table's lookups that a device cache of its `cached_rows` hottest rows serves:
// the measured hit rate when given, else by its Zipf law, else cached_rows / rows (uniform).
double cache_hit_rate(const EmbeddingTable& table, double cached_rows);

// Small instances (tables x candidate placements) are solved exactly by branch and bound.
inline constexpr std::int64_t kExactSearchLimit = 10000000;

// Throws Error(kCannotMeet) naming the total needed against the total available per tier, and
// how many devices would hold it, when no placement fits; InputError when a table's constraints
// leave it no placement at all.
ShardingSolution plan_sharding(const ShardingProblem& problem);

// Every assignment of every candidate placement, for tests: the optimum by exhaustion.
double brute_force_objective(const ShardingProblem& problem);

}  // namespace rannc::sharding
