// The embedding-table sharding planner: exact against brute force on small instances, the
// standard configurations placed as large-scale systems place them, and a model that fits
// nowhere refused with the memory it needs.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "sharding/sharding_planner.h"
#include "support/error.h"

namespace rannc::sharding {
namespace {

cost::Cluster cluster_of(int gpus, const char* mem, int per_node = 8, const char* host_mem = nullptr) {
  cost::ClusterFlags flags;
  flags.gpus = gpus;
  flags.mem = mem;
  flags.gpus_per_node = std::min(per_node, gpus);
  if (host_mem) flags.host_mem = host_mem;
  return cost::cluster_from_flags(flags);
}

EmbeddingTable table(std::int64_t rows, std::int64_t dim, double pooling) {
  EmbeddingTable t;
  t.weight = "t" + std::to_string(rows) + "x" + std::to_string(dim);
  t.rows = rows;
  t.dim = dim;
  t.pooling = pooling;
  t.pooling_mode = "sum";
  return t;
}

}  // namespace

// Up to 4 tables: each has some 40 placements with the host tier (table-wise, row-wise and
// table-row-wise in host memory, each with 4 cache sizes), which brute force enumerates.
TEST_CASE("sharding: the planner's objective equals brute force on random small instances", "[sharding]") {
  std::mt19937_64 random(17);
  std::uniform_real_distribution<double> log_rows(2, 6), pooling(1, 30);
  std::uniform_int_distribution<int> count(2, 4), dim_quarter(1, 64);
  const char* limits[] = {"64M", "256M", "1G"};
  int instances = 0, compared = 0, host_rows = 0;
  for (int round = 0; round < 12; ++round) {
    ShardingProblem problem;
    problem.cluster = cluster_of(4, limits[round % 3], 2);  // 2 nodes of 2: TWRW is a choice
    problem.batch_per_rank = 256;
    problem.optimizer = round % 2 ? SparseOptimizer::kAdam : SparseOptimizer::kSgd;
    int tables = count(random);
    for (int t = 0; t < tables; ++t)
      problem.tables.push_back(table(static_cast<std::int64_t>(std::pow(10, log_rows(random))), 4 * dim_quarter(random),
                                     std::round(pooling(random))));
    ++instances;
    double brute = brute_force_objective(problem);
    if (!std::isfinite(brute)) {
      CHECK_THROWS_AS(plan_sharding(problem), Error);
      continue;
    }
    ++compared;
    auto solution = plan_sharding(problem);
    CHECK(solution.objective_ms == Approx(brute).epsilon(1e-12));
    for (const auto& placed : solution.tables)
      if (placed.host && placed.type != ShardingType::kTableWise) ++host_rows;
  }
  CHECK(instances == 12);
  CHECK(compared >= 6);
  CHECK(host_rows >= 1);  // the optimum cut some table's rows over the hosts
}

TEST_CASE("sharding: a host table's cache serves its share of lookups uniformly, more of them under a Zipf law, or as measured",
          "[sharding]") {
  auto t = table(1000000, 64, 1);
  CHECK(cache_hit_rate(t, 200000) == Approx(0.2));
  CHECK(cache_hit_rate(t, 2000000) == 1);
  t.zipf = 1.05;
  double zipf = cache_hit_rate(t, 10000);  // 1% of the rows
  CHECK(zipf == Approx(0.7542).epsilon(1e-3));  // sum of k^-1.05 to 10^4 over to 10^6, numpy's
  CHECK(cache_hit_rate(t, 100000) > zipf);
  CHECK(cache_hit_rate(t, 1000000) == Approx(1));
  t.zipf = 0;
  t.hit_rate = 0.9;
  CHECK(cache_hit_rate(t, 10) == 0.9);
}

// The cache a host table gets follows its skew: under a Zipf law a small cache serves most lookups,
// so the 12T model steps faster than with uniform access.
TEST_CASE("sharding: skewed access makes the 12T model's host tables faster", "[sharding]") {
  ShardingProblem problem;
  for (int t = 0; t < 48; ++t) problem.tables.push_back(table(1000000000, 256, 1));
  problem.cluster = cluster_of(128, "80G", 8, "4T");
  double uniform = plan_sharding(problem).objective_ms;
  for (auto& t : problem.tables) t.zipf = 1.05;
  auto skewed = plan_sharding(problem);
  CHECK(skewed.objective_ms < uniform);
  for (const auto& placed : skewed.tables) CHECK(placed.hit_rate > 0.5);
}

TEST_CASE("sharding: Criteo Kaggle on 8 devices puts each large table on its own rank", "[sharding]") {
  const std::int64_t rows[] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                               27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};
  ShardingProblem problem;
  problem.cluster = cluster_of(8, "80G");
  for (auto r : rows) problem.tables.push_back(table(r, 16, 1));
  auto solution = plan_sharding(problem);
  std::set<int> large_ranks;
  int large = 0;
  for (std::size_t t = 0; t < problem.tables.size(); ++t) {
    const auto& placed = solution.tables[t];
    double bytes = static_cast<double>(problem.tables[t].rows) * 16 * 4;
    if (bytes > (1 << 20)) {
      ++large;
      CHECK(placed.type == ShardingType::kTableWise);
      large_ranks.insert(placed.shards.front().rank);
    }
  }
  CHECK(large == 8);
  CHECK(large_ranks.size() == 8);
  double slowest = 0, total = 0;
  for (const auto& r : solution.ranks) slowest = std::max(slowest, r.step_ms()), total += r.step_ms();
  CHECK(slowest / (total / 8) < 1.1);
}

TEST_CASE("sharding: a model larger than every device together is refused with what it needs", "[sharding]") {
  ShardingProblem problem;
  problem.cluster = cluster_of(8, "80G");
  for (int t = 0; t < 48; ++t) problem.tables.push_back(table(1000000000, 256, 1));  // 12T parameters
  CHECK_THROWS_WITH(plan_sharding(problem), Catch::Contains("need at least") && Catch::Contains("have 640"));
}

TEST_CASE("sharding: a table too large for any device is cut row-wise in ceil blocks", "[sharding]") {
  ShardingProblem problem;
  problem.cluster = cluster_of(4, "1G");
  problem.tables.push_back(table(10000001, 64, 1));  // 2.56 GB: no device holds it whole
  auto solution = plan_sharding(problem);
  const auto& placed = solution.tables.front();
  REQUIRE(placed.type == ShardingType::kRowWise);
  REQUIRE(placed.shards.size() == 4);
  std::int64_t next = 0;
  for (const auto& shard : placed.shards) {
    CHECK(shard.row_begin == next);
    CHECK(shard.cols == 64);
    next += shard.rows;
  }
  CHECK(next == 10000001);
  CHECK(placed.shards.front().rows == 2500001);
  for (const auto& rank : solution.ranks) CHECK(rank.mem_bytes <= 1024.0 * 1024 * 1024);
}

TEST_CASE("sharding: MLPerf DLRM v2 on 2 nodes: the 100-lookup table is spread, 16-bit exchange is faster", "[sharding]") {
  const std::int64_t rows[] = {40000000, 39060, 17295, 7424, 20265, 3, 7122, 1543, 63, 40000000, 3067956, 405282, 10,
                               2209, 11938, 155, 4, 976, 14, 40000000, 40000000, 40000000, 590152, 12973, 108, 36};
  const double pooling[] = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
  ShardingProblem problem;
  problem.cluster = cluster_of(16, "80G");
  problem.batch_per_rank = 4096;
  problem.optimizer = SparseOptimizer::kRowWiseAdagrad;
  for (int t = 0; t < 26; ++t) problem.tables.push_back(table(rows[t], 128, pooling[t]));
  auto fp32 = plan_sharding(problem);
  const auto& hot = fp32.tables[20];
  CHECK_FALSE((hot.type == ShardingType::kTableWise && hot.shards.size() == 1));
  problem.forward_comm_bytes = problem.backward_comm_bytes = 2;
  auto fp16 = plan_sharding(problem);
  CHECK(fp16.objective_ms < fp32.objective_ms);
  for (const auto& rank : fp32.ranks) CHECK(rank.mem_bytes <= 80.0 * (1LL << 30));
}

// Balanced: every rank within 1.2 of the mean step, the devices' memory used by the host tables'
// caches (more than half of each device), the rows cut over the hosts rather than whole tables
// on 48 of the 128 ranks.
TEST_CASE("sharding: 12T parameters on 128 devices live in host memory behind device caches, balanced, or are refused",
          "[sharding]") {
  ShardingProblem problem;
  for (int t = 0; t < 48; ++t) problem.tables.push_back(table(1000000000, 256, 1));  // 48 x 1 TB in fp32
  problem.cluster = cluster_of(128, "80G", 8, "4T");  // 16 nodes: 10 TiB of devices, 64 TiB of hosts
  auto solution = plan_sharding(problem);
  int hosted = 0;
  for (const auto& placed : solution.tables) hosted += placed.host ? 1 : 0;
  CHECK(hosted == 48);
  double mean = 0;
  for (const auto& rank : solution.ranks) mean += rank.step_ms() / static_cast<double>(solution.ranks.size());
  CHECK(solution.objective_ms < 1.2 * mean);
  for (const auto& rank : solution.ranks) {
    CHECK(rank.mem_bytes <= 80.0 * (1LL << 30));
    CHECK(rank.mem_bytes > 40.0 * (1LL << 30));
  }
  problem.cluster = cluster_of(128, "80G", 8, "1T");  // 16 TiB of hosts: too little
  CHECK_THROWS_WITH(plan_sharding(problem), Catch::Contains("of host memory behind device caches") &&
                                                Catch::Contains("16 hosts 16.00 TiB"));
}


TEST_CASE("sharding: constraints limit a table's types and tier, and the dense part weighs on every rank", "[sharding]") {
  ShardingProblem problem;
  problem.cluster = cluster_of(4, "1G", 4, "64G");
  for (int t = 0; t < 4; ++t) problem.tables.push_back(table(100000, 64, 4));
  problem.constraints.resize(4);
  problem.constraints[0].types = {ShardingType::kRowWise};
  problem.constraints[1].types = {ShardingType::kDataParallel};
  problem.constraints[2].tier = Tier::kHost;
  problem.constraints[3].tier = Tier::kDevice;
  problem.dense_ms = 5;
  problem.dense_mem_bytes = 100e6;
  auto solution = plan_sharding(problem);
  CHECK(solution.tables[0].type == ShardingType::kRowWise);
  CHECK(solution.tables[1].type == ShardingType::kDataParallel);
  CHECK(solution.tables[2].host);
  CHECK_FALSE(solution.tables[3].host);
  double tables_mem = 0;
  for (const auto& placed : solution.tables) tables_mem += placed.load.mem_bytes * static_cast<double>(placed.shards.size());
  double ranks_mem = 0;
  for (const auto& rank : solution.ranks) {
    CHECK(rank.dense_ms == 5);
    CHECK(rank.step_ms() >= 5);
    ranks_mem += rank.mem_bytes;
  }
  CHECK(ranks_mem == Approx(tables_mem + 4 * 100e6));
  // A dense part that leaves no room for the tables makes the plan impossible.
  problem.dense_mem_bytes = 1060e6;
  CHECK_THROWS_WITH(plan_sharding(problem), Catch::Contains("beside the dense part") && Catch::Contains("no placement fits"));
  problem.dense_mem_bytes = 2e9;
  CHECK_THROWS_WITH(plan_sharding(problem), Catch::Contains("the dense part alone needs"));
  // A constraint no placement meets is an input error naming the table.
  problem.dense_mem_bytes = 0;
  problem.constraints[0].types = {ShardingType::kColumnWise};  // 64 columns cannot be cut in pieces of 128
  CHECK_THROWS_AS(plan_sharding(problem), InputError);
}

}  // namespace rannc::sharding
