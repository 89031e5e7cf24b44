#include "sharding/sharding_planner.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "cost_model/memory.h"
#include "support/error.h"
#include "support/format.h"

namespace rannc::sharding {
namespace {

constexpr double kIndexBytes = 8;         // an int64 id
constexpr double kRoutedIdBytes = 16;     // an id sent to a shard with the sample it pools into (rannc-run's)
// The step's sort of a shard's lookups by row, which rannc-run's fused sparse update walks: the
// ids gathered, sorted, and their order.
constexpr double kSortedIdBytes = 24;
// Collectives of the embedding exchange per step, each paying the link's latency whatever the
// placement: the ids, the pooled rows and their gradients (each a size exchange and the data),
// and the one allreduce of the data-parallel tables' gradients.
constexpr int kExchangeRounds = 7;
constexpr std::int64_t kMinColumnShard = 128;  // TorchRec's MIN_CW_DIM: narrower pieces read memory badly
constexpr double kDataParallelOptimizer = 9.22;  // TorchRec: the fused optimizer's passes over a DP table
// The shares of a host-tier shard its device may cache, a choice per table (TorchRec's default is
// a fifth); the planner weighs each against the device memory it takes.
constexpr std::array<double, 4> kCacheFractions{0.01, 0.05, 0.2, 0.5};
constexpr double kUvmInefficiency = 10;          // TorchRec's UVM-caching bandwidth divisor
constexpr double kZipfExactTerms = 64;           // of a generalised harmonic number summed term by term

// A placement of one table: it adds `load` to each of `count` consecutive ranks from `first`
// (wrapping), every candidate touching its ranks evenly.
struct Candidate {
  ShardingType type = ShardingType::kTableWise;
  int first = 0, count = 1;
  RankLoad load;
  bool host = false;
  double cache_fraction = 0, hit_rate = 0;  // host tier: the share of each shard its device caches, and the lookups that hit it
};

// H(n, s) = sum over k = 1..n of k^-s: the first terms summed, the rest from m on by
// Euler-Maclaurin (the integral, the ends' halves and the first derivative term; relative error
// below 1e-9 from m = 64), so a table of 10^10 rows costs what one of 100 does.
double harmonic(double n, double s) {
  n = std::floor(n);
  const double m = kZipfExactTerms;
  double sum = 0;
  for (double k = 1; k <= std::min(n, m - 1); ++k) sum += std::pow(k, -s);
  if (n < m) return sum;
  double integral = s == 1 ? std::log(n / m) : (std::pow(n, 1 - s) - std::pow(m, 1 - s)) / (1 - s);
  return sum + integral + (std::pow(m, -s) + std::pow(n, -s)) / 2 + s / 12 * (std::pow(m, -s - 1) - std::pow(n, -s - 1));
}

}  // namespace

double cache_hit_rate(const EmbeddingTable& table, double cached_rows) {
  const double rows = static_cast<double>(table.rows);
  if (rows <= 0) return 1;
  cached_rows = std::clamp(cached_rows, 0.0, rows);
  if (table.hit_rate >= 0) return table.hit_rate;
  if (table.zipf > 0) return harmonic(cached_rows, table.zipf) / harmonic(rows, table.zipf);
  return cached_rows / rows;
}

namespace {

double optimizer_bytes(SparseOptimizer optimizer, double rows, double cols) {
  switch (optimizer) {
    case SparseOptimizer::kSgd: return 0;
    case SparseOptimizer::kMomentum: return rows * cols * 4;
    case SparseOptimizer::kAdam: return 2 * rows * cols * 4;
    case SparseOptimizer::kRowWiseAdagrad: return rows * 4;
  }
  return 0;
}

class CostModel {
 public:
  explicit CostModel(const ShardingProblem& problem) : p_(problem), world_(problem.cluster.gpus()) {}

  // Of a lookup's time (forward, and backward at twice it), reading `lookups` rows of `cols`
  // columns from the table: what a host-tier table's device cache serves. `penalty`: the
  // placement's for narrow rows (whole rows pay it, TorchRec's estimator; row pieces do not).
  double row_read_ms(const EmbeddingTable& t, double lookups, double cols, double penalty) const {
    return 3 * lookups * std::max(cols, 32.0) * element(t) * penalty / hbm() * 1e3;
  }
  // Narrow rows read memory badly (TorchRec's penalty); 128 columns and up read at full speed.
  static double narrow_penalty(double cols) { return cols < 64 ? 1.75 : cols < 128 ? 1.15 : 1.0; }

  // `cols` columns of the whole table on one rank (TW, and each CW piece).
  RankLoad whole_rows(const EmbeddingTable& t, double cols) const {
    const double global = batch() * world_;
    const double out = global * rows_out(t);
    double forward = (global * t.pooling * kIndexBytes + out * cols * element(t)) * narrow_penalty(cols) / hbm();
    RankLoad load;
    // Backward is twice the forward.
    load.lookup_ms = 3 * forward * 1e3 + row_read_ms(t, global * t.pooling, cols, narrow_penalty(cols));
    load.all_to_all_ms = (global * t.pooling * kRoutedIdBytes + out * cols * (p_.forward_comm_bytes + p_.backward_comm_bytes)) /
                         bandwidth(world_) * 1e3;
    load.mem_bytes = state_bytes(static_cast<double>(t.rows), cols, t) + io_bytes(t, global * t.pooling, cols);
    return load;
  }

  // The rows cut over `count` ranks (RW over the world, TWRW over a node).
  RankLoad split_rows(const EmbeddingTable& t, int count, bool across_nodes) const {
    const double global = batch() * world_;
    const double n = count;
    const double cols = static_cast<double>(t.dim);
    double output = global * rows_out(t) * cols;
    double forward = (global * t.pooling / n * kIndexBytes + output * element(t)) / hbm();
    RankLoad load;
    load.lookup_ms = 3 * forward * 1e3 + row_read_ms(t, global * t.pooling / n, cols, 1);
    // Every shard's partial sums for the whole batch are reduce-scattered forward, gathered back:
    // each rank moves (n - 1) / n of them.
    load.all_to_all_ms = output * (n - 1) / n * (p_.forward_comm_bytes + p_.backward_comm_bytes) /
                         bandwidth(count) * 1e3;
    if (across_nodes) {
      // TWRW: each rank of the node sends its share of the other nodes' samples over the network.
      load.all_to_all_ms += output * (world_ - n) / world_ / n * (p_.forward_comm_bytes + p_.backward_comm_bytes) /
                            p_.cluster.inter_node.bandwidth * 1e3;
    }
    double rows = std::ceil(static_cast<double>(t.rows) / n);
    load.mem_bytes = state_bytes(rows, cols, t) + io_bytes(t, global * t.pooling / n, cols);
    return load;
  }

  // `device` (a table-wise, row-wise or table-row-wise placement, of `rows` rows a shard, which
  // looks up `lookups` rows a step) moved to the host tier: each shard's state in its node's host
  // memory, its device keeping a cache of `fraction` of the shard's rows and the I/O buffers. The
  // rows are read at (the hit rate at HBM speed + the misses over the host link) / 10, TorchRec's
  // UVM-caching estimate; the ids and the pooled rows stay in HBM (TorchRec's estimator slows
  // them too, which would price a row-wise shard's partial sums of the whole batch as if they
  // crossed the host link). Ids are hashed to rows, so each shard caches its share of the
  // table's hottest rows.
  Candidate in_host(Candidate device, const EmbeddingTable& t, double rows, double lookups, double fraction) const {
    const double penalty = device.type == ShardingType::kTableWise ? narrow_penalty(static_cast<double>(t.dim)) : 1;
    const double cols = static_cast<double>(t.dim);
    const double shards = static_cast<double>(t.rows) / std::max(rows, 1.0);
    device.host = true;
    device.cache_fraction = fraction;
    device.hit_rate = cache_hit_rate(t, fraction * rows * shards);
    double bandwidth = (device.hit_rate * hbm() + (1 - device.hit_rate) * p_.cluster.host.link.bandwidth) / kUvmInefficiency;
    RankLoad& load = device.load;
    load.lookup_ms += row_read_ms(t, lookups, cols, penalty) * (hbm() / bandwidth - 1);
    double state = state_bytes(rows, cols, t);
    load.host_bytes = state;
    load.mem_bytes += std::ceil(fraction * rows) * cols * element(t) - state;
    return device;
  }

  RankLoad data_parallel(const EmbeddingTable& t) const {
    const double cols = static_cast<double>(t.dim);
    const double bytes = static_cast<double>(t.rows) * cols * element(t);
    RankLoad load;
    load.lookup_ms = 3 * batch() * t.pooling * (kIndexBytes + std::max(cols, 32.0) * element(t)) / hbm() * 1e3;
    // A ring allreduce moves 2 (n - 1) / n of the gradient through each rank.
    load.allreduce_ms = (2.0 * (world_ - 1) / world_ * bytes / bandwidth(world_) + kDataParallelOptimizer * bytes / hbm()) * 1e3;
    // Beside the state: this rank's ids with their samples (looked up here, their pooled rows
    // are the dense part's input) and what the allreduce sums, from the backward to the step: the
    // gradient of the whole table and a flag per row looked up.
    const double summed = static_cast<double>(t.rows) * (cols + 1) * cost::kGradientElementBytes;
    load.mem_bytes = state_bytes(static_cast<double>(t.rows), cols, t) + batch() * t.pooling * kRoutedIdBytes + summed;
    return load;
  }

  double batch() const { return static_cast<double>(p_.batch_per_rank); }

 private:
  // Collectives among `ranks` ranks from rank 0 up run at the intra-node link when they fit a
  // node. Latencies are not charged: every table's exchange rides in one fused collective.
  double bandwidth(int ranks) const {
    return ranks <= p_.cluster.gpus_per_node ? p_.cluster.intra_node.bandwidth : p_.cluster.inter_node.bandwidth;
  }
  double hbm() const { return p_.cluster.device.mem_bandwidth; }
  static double element(const EmbeddingTable& t) { return static_cast<double>(ir::dtype_size(t.dtype)); }
  double state_bytes(double rows, double cols, const EmbeddingTable& t) const {
    return rows * cols * element(t) + optimizer_bytes(p_.optimizer, rows, cols);
  }
  // The ids a shard receives (and sorts for the step) and the pooled rows it sends.
  double io_bytes(const EmbeddingTable& t, double lookups, double cols) const {
    return lookups * (kRoutedIdBytes + kSortedIdBytes) + batch() * world_ * rows_out(t) * cols * element(t);
  }
  // Rows a lookup hands on per sample: one pooled row per bag, or every row of an unpooled one.
  static double rows_out(const EmbeddingTable& t) { return t.pooling_mode == "none" ? t.pooling : 1.0; }

  const ShardingProblem& p_;
  int world_;
};

// Every placement a table may take: DP; TW on each rank; CW in k pieces of at least 128 columns on
// k consecutive ranks (at multiples of k); RW over all ranks; TWRW on each node. With a host tier,
// TW, RW and TWRW also in host memory, with each cache fraction. Then those its constraint allows.
std::vector<Candidate> all_candidates(const EmbeddingTable& table, const CostModel& costs, const cost::Cluster& cluster) {
  const int world = cluster.gpus(), per_node = cluster.gpus_per_node;
  const bool host_tier = cluster.host.mem_bytes > 0 && cluster.host.link.bandwidth > 0;
  std::vector<Candidate> list;
  const double rows = static_cast<double>(table.rows), lookups = table.pooling * cluster.gpus() * costs.batch();
  // `placement` of `rows` rows a shard, each looking up `shards`' share of the lookups, and in the
  // host tier with each cache fraction.
  auto add = [&](const Candidate& placement, double shards) {
    list.push_back(placement);
    if (host_tier)
      for (double fraction : kCacheFractions)
        list.push_back(costs.in_host(placement, table, std::ceil(rows / shards), lookups / shards, fraction));
  };
  list.push_back({ShardingType::kDataParallel, 0, world, costs.data_parallel(table)});
  auto whole = costs.whole_rows(table, static_cast<double>(table.dim));
  for (int r = 0; r < world; ++r) add({ShardingType::kTableWise, r, 1, whole}, 1);
  for (int k = 2; k <= world && table.dim / k >= kMinColumnShard; k *= 2) {
    if (table.dim % k != 0 || (table.dim / k) % 4 != 0) continue;
    auto piece = costs.whole_rows(table, static_cast<double>(table.dim / k));
    for (int r = 0; r + k <= world; r += k) list.push_back({ShardingType::kColumnWise, r, k, piece});
  }
  if (world > 1) add({ShardingType::kRowWise, 0, world, costs.split_rows(table, world, false)}, world);
  if (cluster.nodes > 1 && per_node > 1) {
    auto per_node_rows = costs.split_rows(table, per_node, true);
    for (int node = 0; node < cluster.nodes; ++node)
      add({ShardingType::kTableRowWise, node * per_node, per_node, per_node_rows}, per_node);
  }
  return list;
}

bool allowed(const Candidate& c, const TableConstraint& constraint) {
  if (constraint.tier == Tier::kHost && !c.host) return false;
  if (constraint.tier == Tier::kDevice && c.host) return false;
  return constraint.types.empty() ||
         std::find(constraint.types.begin(), constraint.types.end(), c.type) != constraint.types.end();
}

std::vector<Candidate> candidates_of(const EmbeddingTable& table, const CostModel& costs, const cost::Cluster& cluster,
                                     const TableConstraint& constraint) {
  auto list = all_candidates(table, costs, cluster);
  list.erase(std::remove_if(list.begin(), list.end(), [&](const Candidate& c) { return !allowed(c, constraint); }), list.end());
  if (list.empty()) {
    throw InputError("table " + table.weight + " (" + std::to_string(table.rows) + " x " + std::to_string(table.dim) +
                     "): its constraints leave it no placement on this cluster (column_wise needs a dim of at least " +
                     std::to_string(2 * kMinColumnShard) + ", row_wise several devices, table_row_wise several nodes, "
                     "the host tier --host-mem)");
  }
  return list;
}

// The loads of every rank as candidates are added and taken away.
class Loads {
 public:
  // Every rank starts with the dense part's step and memory.
  Loads(const cost::Cluster& cluster, const RankLoad& dense)
      : ranks_(static_cast<std::size_t>(cluster.gpus()), dense),
        host_(static_cast<std::size_t>(cluster.nodes)),
        mem_limit_(static_cast<double>(cluster.mem_bytes)),
        host_limit_(static_cast<double>(cluster.host.mem_bytes)),
        per_node_(cluster.gpus_per_node) {}

  bool fits(const Candidate& c) const {
    for (int i = 0; i < c.count; ++i)
      if (at(c.first + i).mem_bytes + c.load.mem_bytes > mem_limit_) return false;
    if (c.load.host_bytes == 0) return true;
    // Its shards on each node's ranks, in that node's host memory.
    for (int i = 0; i < c.count;) {
      const int node = node_of(c.first + i);
      int on_node = 0;
      for (; i < c.count && node_of(c.first + i) == node; ++i) ++on_node;
      if (host_[static_cast<std::size_t>(node)] + c.load.host_bytes * on_node > host_limit_) return false;
    }
    return true;
  }
  // The slowest rank's step with `c` added (its ranks only can change the maximum).
  double max_with(const Candidate& c, double current_max) const {
    double worst = current_max;
    for (int i = 0; i < c.count; ++i) worst = std::max(worst, at(c.first + i).step_ms() + c.load.step_ms());
    return worst;
  }
  void add(const Candidate& c, double sign) {
    for (int i = 0; i < c.count; ++i) {
      auto& r = at(c.first + i);
      r.lookup_ms += sign * c.load.lookup_ms;
      r.all_to_all_ms += sign * c.load.all_to_all_ms;
      r.allreduce_ms += sign * c.load.allreduce_ms;
      r.mem_bytes += sign * c.load.mem_bytes;
      r.host_bytes += sign * c.load.host_bytes;
      host_[static_cast<std::size_t>(node_of(c.first + i))] += sign * c.load.host_bytes;
    }
  }
  double max_step() const {
    double worst = 0;
    for (const auto& r : ranks_) worst = std::max(worst, r.step_ms());
    return worst;
  }
  const std::vector<RankLoad>& ranks() const { return ranks_; }

 private:
  int node_of(int rank) const { return rank % static_cast<int>(ranks_.size()) / per_node_; }
  RankLoad& at(int rank) { return ranks_[static_cast<std::size_t>(rank % static_cast<int>(ranks_.size()))]; }
  const RankLoad& at(int rank) const { return ranks_[static_cast<std::size_t>(rank % static_cast<int>(ranks_.size()))]; }

  std::vector<RankLoad> ranks_;
  std::vector<double> host_;  // host bytes per node
  double mem_limit_, host_limit_;
  int per_node_;
};

struct Search {
  std::vector<std::vector<Candidate>> candidates;  // per table
  std::vector<std::size_t> order;                  // tables, costliest first
  cost::Cluster cluster;
  RankLoad dense;  // on every rank
};

Search prepare(const ShardingProblem& problem) {
  CostModel costs(problem);
  Search search;
  search.cluster = problem.cluster;
  search.dense.dense_ms = problem.dense_ms;
  search.dense.mem_bytes = problem.dense_mem_bytes;
  if (problem.cluster.gpus() > 1) {
    const auto& link = problem.cluster.nodes > 1 ? problem.cluster.inter_node : problem.cluster.intra_node;
    search.dense.all_to_all_ms = kExchangeRounds * link.latency * 1e3;
  }
  if (!problem.constraints.empty() && problem.constraints.size() != problem.tables.size())
    throw std::logic_error("plan_sharding: one constraint per table");
  // Costliest first by the table-wise step; of equal ones the larger table (fewer places fit it).
  std::vector<std::pair<double, double>> weight;
  for (std::size_t t = 0; t < problem.tables.size(); ++t) {
    const auto& table = problem.tables[t];
    auto whole = costs.whole_rows(table, static_cast<double>(table.dim));
    search.candidates.push_back(
        candidates_of(table, costs, problem.cluster, problem.constraints.empty() ? TableConstraint{} : problem.constraints[t]));
    weight.emplace_back(whole.step_ms(), static_cast<double>(table.rows) * static_cast<double>(table.dim));
  }
  search.order.resize(problem.tables.size());
  std::iota(search.order.begin(), search.order.end(), std::size_t{0});
  std::stable_sort(search.order.begin(), search.order.end(), [&](std::size_t a, std::size_t b) { return weight[a] > weight[b]; });
  return search;
}

// Depth-first over the tables in order; `bound` prunes every branch already as slow as the best.
void branch(const Search& s, std::size_t depth, Loads& loads, double current_max, std::vector<int>& choice, double& best,
            std::vector<int>& best_choice, bool prune) {
  if (depth == s.order.size()) {
    if (current_max < best) best = current_max, best_choice = choice;
    return;
  }
  std::size_t table = s.order[depth];
  const auto& list = s.candidates[table];
  for (std::size_t c = 0; c < list.size(); ++c) {
    if (!loads.fits(list[c])) continue;
    double next_max = loads.max_with(list[c], current_max);
    if (prune && next_max >= best) continue;
    loads.add(list[c], 1);
    choice[table] = static_cast<int>(c);
    branch(s, depth + 1, loads, next_max, choice, best, best_choice, prune);
    loads.add(list[c], -1);
  }
}

std::vector<int> exact(const Search& s, bool prune) {
  Loads loads(s.cluster, s.dense);
  std::vector<int> choice(s.order.size(), -1), best_choice;
  double best = std::numeric_limits<double>::infinity();
  branch(s, 0, loads, 0, choice, best, best_choice, prune);
  return best_choice;
}

double work(const Candidate& c) { return c.load.step_ms() * c.count; }

// A greedy search places host-tier tables with one cache fraction (`cache`); grow_caches then
// gives them more where memory is left.
bool with_cache(const Candidate& c, double cache) { return !c.host || c.cache_fraction == cache; }

// How a greedy start picks each table's placement: where the slowest rank rises least; the same
// among the table's placements of least total work; or among those of least device memory per rank.
enum class Start { kSlowestRank, kLeastWork, kLeastMemory };

// The candidate of `table` that leaves the slowest rank fastest (then the least total work),
// among those `start` admits.
int best_candidate(const Search& s, std::size_t table, const Loads& loads, Start start, double cache) {
  double current = loads.max_step();
  int pick = -1;
  double pick_max = 0, pick_work = 0;
  const auto& list = s.candidates[table];
  auto measure = [start](const Candidate& c) { return start == Start::kLeastMemory ? c.load.mem_bytes : work(c); };
  double least = std::numeric_limits<double>::infinity();
  if (start != Start::kSlowestRank)
    for (const auto& c : list)
      if (with_cache(c, cache) && loads.fits(c)) least = std::min(least, measure(c));
  for (std::size_t c = 0; c < list.size(); ++c) {
    if (!with_cache(list[c], cache) || !loads.fits(list[c])) continue;
    if (start != Start::kSlowestRank && measure(list[c]) > least * (1 + 1e-12)) continue;
    double next_max = loads.max_with(list[c], current);
    double added = work(list[c]);
    if (pick < 0 || next_max < pick_max || (next_max == pick_max && added < pick_work))
      pick = static_cast<int>(c), pick_max = next_max, pick_work = added;
  }
  return pick;
}

// The candidate of the same placement as `current` with the next larger cache, or -1.
int larger_cache(const std::vector<Candidate>& list, int current) {
  const Candidate& now = list[static_cast<std::size_t>(current)];
  for (std::size_t c = 0; c < list.size(); ++c) {
    const Candidate& other = list[c];
    if (other.host && other.type == now.type && other.first == now.first && other.count == now.count &&
        other.cache_fraction > now.cache_fraction)
      return static_cast<int>(c);  // listed in ascending fractions: the first larger is the next
  }
  return -1;
}

// The device memory the placement leaves goes to the host-tier tables' caches, a step of
// kCacheFractions at a time round the tables (costliest first), while it fits, the slowest rank
// does not slow and the table's lookups get faster (not with a measured hit rate, which no cache
// size changes): evenly, since a lookup's time falls ever less as its cache grows.
void grow_caches(const Search& s, Loads& loads, std::vector<int>& choice) {
  for (bool grew = true; grew;) {
    grew = false;
    for (auto table : s.order) {
      const auto& list = s.candidates[table];
      int current = choice[table];
      if (!list[static_cast<std::size_t>(current)].host) continue;
      int next = larger_cache(list, current);
      if (next < 0) continue;
      double before = loads.max_step();
      loads.add(list[static_cast<std::size_t>(current)], -1);
      const Candidate& larger = list[static_cast<std::size_t>(next)];
      bool better = larger.load.step_ms() < list[static_cast<std::size_t>(current)].load.step_ms() && loads.fits(larger) &&
                    loads.max_with(larger, loads.max_step()) <= before;
      choice[table] = better ? next : current;
      loads.add(list[static_cast<std::size_t>(choice[table])], 1);
      grew = grew || better;
    }
  }
}

// Longest first, each placed as `start` says; then each table moved to its best place given all
// others, while a pass lowers the slowest rank; then the host tier's caches grown into the room
// left. Returns the choice and the slowest rank's step (an empty choice when some table found no
// room).
std::pair<std::vector<int>, double> greedy(const Search& s, Start start, double cache) {
  Loads loads(s.cluster, s.dense);
  std::vector<int> choice(s.order.size(), -1);
  for (auto table : s.order) {
    int c = best_candidate(s, table, loads, start, cache);
    if (c < 0) return {{}, 0};
    choice[table] = c;
    loads.add(s.candidates[table][static_cast<std::size_t>(c)], 1);
  }
  constexpr int kMaxPasses = 20;
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    double before = loads.max_step();
    for (auto table : s.order) {
      loads.add(s.candidates[table][static_cast<std::size_t>(choice[table])], -1);
      int c = best_candidate(s, table, loads, Start::kSlowestRank, cache);
      choice[table] = c;
      loads.add(s.candidates[table][static_cast<std::size_t>(c)], 1);
    }
    if (!(loads.max_step() < before)) break;
  }
  grow_caches(s, loads, choice);
  return {choice, loads.max_step()};
}

// Three starts: placing each table where the slowest rank rises least spreads big tables
// row-wise early and cannot undo it; each table's least-work placement first (table-wise for the
// big ones, as TorchRec's proposers do) leaves the local search to balance; least device memory
// first (the host tier for big tables) finds room when memory is tight, and the local search
// then brings tables back onto devices where they fit. The fastest that fits wins.
// With a host tier, each start runs once per cache fraction: which placement of a host table
// is best depends on its cache (a table-row-wise table caches on 8 devices, a table-wise one on
// one), and a greedy that grew caches as it went would give the first tables all the memory.
std::vector<int> heuristic(const Search& s) {
  std::vector<int> best;
  double best_max = std::numeric_limits<double>::infinity();
  bool host_tier = std::any_of(s.candidates.begin(), s.candidates.end(), [](const auto& list) {
    return std::any_of(list.begin(), list.end(), [](const Candidate& c) { return c.host; });
  });
  for (double cache : host_tier ? std::vector<double>(kCacheFractions.begin(), kCacheFractions.end()) : std::vector<double>{0}) {
    for (Start start : {Start::kSlowestRank, Start::kLeastWork, Start::kLeastMemory}) {
      auto [choice, slowest] = greedy(s, start, cache);
      if (!choice.empty() && slowest < best_max) best = std::move(choice), best_max = slowest;
    }
  }
  return best;
}

std::vector<Shard> shards_of(const EmbeddingTable& table, const Candidate& c) {
  std::vector<Shard> shards;
  for (int i = 0; i < c.count; ++i) {
    Shard shard{c.first + i, 0, table.rows, 0, table.dim};
    if (c.type == ShardingType::kColumnWise) shard.cols = table.dim / c.count, shard.col_begin = i * shard.cols;
    if (c.type == ShardingType::kRowWise || c.type == ShardingType::kTableRowWise) {
      std::int64_t block = (table.rows + c.count - 1) / c.count;  // ceil blocks: 10 rows over 4 ranks are 3, 3, 3, 1
      shard.row_begin = std::min(table.rows, i * block);
      shard.rows = std::min(block, table.rows - shard.row_begin);
      if (shard.rows == 0) continue;  // 9 rows over 4 ranks are 3, 3, 3: the last rank holds none
    }
    shards.push_back(shard);
  }
  return shards;
}

std::int64_t search_size(const Search& s) {
  std::int64_t size = 1;
  for (const auto& list : s.candidates) {
    size *= static_cast<std::int64_t>(list.size());
    if (size > kExactSearchLimit) return size;
  }
  return size;
}

// What the tables need at the least, in device memory alone and (with the host tier) in host
// memory beside the device caches, against what the cluster has per tier; and how many devices
// of this memory would hold them (each also holding the dense part).
[[noreturn]] void cannot_fit(const ShardingProblem& problem, const Search& s) {
  double device_only = 0, hosted = 0;
  for (const auto& list : s.candidates) {
    double least = std::numeric_limits<double>::infinity(), least_host = least;
    for (const auto& c : list) {
      if (!c.host) least = std::min(least, c.load.mem_bytes * c.count);
      else least_host = std::min(least_host, c.load.host_bytes * c.count);  // the whole table's state, however cut
    }
    device_only += least;
    if (std::isfinite(least_host)) hosted += least_host;
  }
  const auto& cluster = problem.cluster;
  const double mem = static_cast<double>(cluster.mem_bytes), world = cluster.gpus();
  if (problem.dense_mem_bytes >= mem) {
    throw Error(ExitStatus::kCannotMeet, "the dense part alone needs " + human_bytes(problem.dense_mem_bytes) +
                                             " per device, more than the " + human_bytes(mem) + " of each device");
  }
  std::string message = "the embedding tables need at least " + human_bytes(device_only) + " of device memory";
  if (std::isfinite(device_only) && cluster.host.mem_bytes > 0)
    message += " (or " + human_bytes(hosted) + " of host memory behind device caches)";
  else if (cluster.host.mem_bytes > 0)
    message += " (" + human_bytes(hosted) + " of host memory behind device caches)";
  double room = mem - problem.dense_mem_bytes;
  message += "; " + std::to_string(cluster.gpus()) + " devices of " + human_bytes(mem) + " have " +
             human_bytes(room * world) + " beside the dense part";
  if (cluster.host.mem_bytes > 0)
    message += ", " + std::to_string(cluster.nodes) + " hosts " + human_bytes(static_cast<double>(cluster.host.mem_bytes) * cluster.nodes);
  message += ": no placement fits";
  if (std::isfinite(device_only))
    message += "; about " + std::to_string(static_cast<long long>(std::ceil(device_only / room))) + " devices of " +
               human_bytes(mem) + " would hold them";
  throw Error(ExitStatus::kCannotMeet, message);
}

}  // namespace

const char* sharding_type_name(ShardingType type) {
  switch (type) {
    case ShardingType::kDataParallel: return "data_parallel";
    case ShardingType::kTableWise: return "table_wise";
    case ShardingType::kColumnWise: return "column_wise";
    case ShardingType::kRowWise: return "row_wise";
    case ShardingType::kTableRowWise: return "table_row_wise";
  }
  return "unknown";
}

std::optional<ShardingType> parse_sharding_type(std::string_view name) {
  for (int i = 0; i < kShardingTypeCount; ++i)
    if (name == sharding_type_name(static_cast<ShardingType>(i))) return static_cast<ShardingType>(i);
  return std::nullopt;
}

const char* sparse_optimizer_name(SparseOptimizer optimizer) {
  switch (optimizer) {
    case SparseOptimizer::kSgd: return "sgd";
    case SparseOptimizer::kMomentum: return "momentum";
    case SparseOptimizer::kAdam: return "adam";
    case SparseOptimizer::kRowWiseAdagrad: return "rowwise_adagrad";
  }
  return "unknown";
}

std::optional<SparseOptimizer> parse_sparse_optimizer(std::string_view name) {
  for (auto optimizer : {SparseOptimizer::kSgd, SparseOptimizer::kMomentum, SparseOptimizer::kAdam, SparseOptimizer::kRowWiseAdagrad})
    if (name == sparse_optimizer_name(optimizer)) return optimizer;
  return std::nullopt;
}

ShardingSolution plan_sharding(const ShardingProblem& problem) {
  Search s = prepare(problem);
  auto choice = search_size(s) <= kExactSearchLimit ? exact(s, true) : heuristic(s);
  if (choice.empty()) cannot_fit(problem, s);
  ShardingSolution solution;
  Loads loads(s.cluster, s.dense);
  for (std::size_t t = 0; t < problem.tables.size(); ++t) {
    const auto& c = s.candidates[t][static_cast<std::size_t>(choice[t])];
    loads.add(c, 1);
    solution.tables.push_back({c.type, shards_of(problem.tables[t], c), c.host, c.cache_fraction, c.hit_rate, c.load});
  }
  solution.ranks = loads.ranks();
  solution.objective_ms = loads.max_step();
  return solution;
}

double brute_force_objective(const ShardingProblem& problem) {
  Search s = prepare(problem);
  auto choice = exact(s, false);
  if (choice.empty()) return std::numeric_limits<double>::infinity();
  Loads loads(s.cluster, s.dense);
  for (std::size_t t = 0; t < choice.size(); ++t) loads.add(s.candidates[t][static_cast<std::size_t>(choice[t])], 1);
  return loads.max_step();
}

}  // namespace rannc::sharding
