#include "compiler/sharded_partition.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "compiler/stage_files.h"
#include "compiler/torch_plugin.h"
#include "cost_model/cost_model.h"
#include "emit/plan_builder.h"
#include "emit/stage_layout.h"
#include "sharding/dense_part.h"
#include "sharding/sharding_planner.h"
#include "sharding/table_constraints.h"
#include "support/error.h"
#include "support/input_file.h"
#include "support/sha256.h"
#include "support/stable_number.h"

namespace rannc {
namespace {

// Bytes of an element of the all-to-alls in this dtype.
int comm_bytes(const std::string& dtype) { return dtype == "fp32" ? 4 : 2; }

void check_comm_dtype(const std::string& dtype, const char* flag) {
  if (dtype != "fp32" && dtype != "fp16" && dtype != "bf16")
    throw InputError(std::string(flag) + " " + text_excerpt(dtype) + ": unknown (known: fp32, fp16, bf16)");
}

// The layouts of the sharded plan's files; `why_not` says why they cannot be written.
void lay_out_files(const ir::Graph& graph, const std::vector<sharding::EmbeddingTable>& tables, const sharding::DensePart& dense,
                   ShardedPlan& plan) {
  plan.dense = emit::ops_layout(graph, dense.ops, "stage_0.pt");
  std::vector<ir::ValueId> pooled;
  std::vector<ir::OpId> lookups;
  for (const auto& table : tables) {
    if (table.indices.size() != 1) {
      plan.unwritable = "table " + table.weight + " is looked up " + std::to_string(table.indices.size()) +
                        " times (sharded plans train tables looked up once)";
      return;
    }
    pooled.push_back(table.pooled.front());
    lookups.insert(lookups.end(), table.ops.begin(), table.ops.end());
  }
  // The indices module computes every tensor the lookups read (each table's ids, and the bags'
  // offsets where the lookup takes them), in the tables file's argument order.
  plan.tables = emit::ops_layout(graph, lookups, kTablesFile, pooled);
  std::vector<ir::ValueId> lookup_inputs;
  for (const auto& input : plan.tables.inputs) lookup_inputs.push_back(input.value);
  for (const auto& table : tables) {
    plan.lookup_args.emplace_back();
    for (auto v : graph.op(table.ops.front()).inputs) {
      auto at = std::find(lookup_inputs.begin(), lookup_inputs.end(), v);
      if (at != lookup_inputs.end()) plan.lookup_args.back().push_back(static_cast<int>(at - lookup_inputs.begin()));
    }
  }
  plan.indices = emit::ops_layout(graph, graph.ops_computing(lookup_inputs), kIndicesFile, lookup_inputs);
  for (const auto& input : plan.indices.inputs) {
    if (graph.value(input.value).role != ir::ValueRole::kModelInput) {
      plan.unwritable = "the lookup indices are computed from '" + graph.value(input.value).name + "', not from model inputs alone";
      return;
    }
  }
}

// How many tables took each type, for the summary ("table_wise": 8, ...).
nlohmann::json type_counts(const sharding::ShardingSolution& solution) {
  std::map<std::string, int> counts;
  for (const auto& t : solution.tables) ++counts[std::string(sharding::sharding_type_name(t.type)) + (t.host ? " (host)" : "")];
  return counts;
}

}  // namespace

void check_sharding_options(const ShardingOptions& options) {
  if (!options.enabled && !options.table_constraints.empty())
    throw InputError("--table-constraints and --no-table-sharding contradict each other");
  check_comm_dtype(options.comm_dtype, "--comm-dtype");
  if (!options.comm_dtype_bwd.empty()) check_comm_dtype(options.comm_dtype_bwd, "--comm-dtype-bwd");
  if (!sharding::parse_sparse_optimizer(options.sparse_optimizer))
    throw InputError("--sparse-optimizer " + text_excerpt(options.sparse_optimizer) +
                     ": unknown (known: sgd, momentum, adam, rowwise_adagrad)");
}

bool wants_sharded_plan(const std::vector<sharding::EmbeddingTable>& tables, const ShardingOptions& options) {
  if (!options.enabled) return false;
  if (!options.table_constraints.empty()) return true;
  for (const auto& table : tables)
    if (table.pooling_mode != "none") return true;
  return false;
}

ShardedPlan plan_sharded(const Model& model, std::vector<sharding::EmbeddingTable> tables, const ShardingOptions& options,
                         const partition::PlanRequest& request, const cost::ProfileDb* profile_db, const std::string& model_path) {
  auto start = std::chrono::steady_clock::now();
  const auto& cluster = request.cluster;
  const int world = cluster.gpus();
  if (tables.empty()) throw InputError(model_path + ": --table-constraints given, but the model has no embedding tables");
  if (request.stages || request.microbatches)
    throw InputError("--stages and --microbatches do not apply to a sharded plan (its dense part is one stage on every device)");
  if (request.global_batch % world != 0)
    throw InputError("--batch " + std::to_string(request.global_batch) + ": a sharded plan splits the batch evenly over the " +
                     std::to_string(world) + " devices (give a multiple of " + std::to_string(world) + ")");
  sharding::ShardingProblem problem;
  if (!options.table_constraints.empty()) problem.constraints = sharding::apply_table_constraints(options.table_constraints, tables);
  problem.tables = tables;
  problem.cluster = cluster;
  problem.batch_per_rank = request.global_batch / world;
  problem.optimizer = *sharding::parse_sparse_optimizer(options.sparse_optimizer);
  // Tables may live in host memory behind device caches only when the user says how much host
  // memory there is: a plan must not lean on a preset's guess.
  if (!cluster.host_stated) problem.cluster.host.mem_bytes = 0;
  const std::string backward = options.comm_dtype_bwd.empty() ? options.comm_dtype : options.comm_dtype_bwd;
  problem.forward_comm_bytes = comm_bytes(options.comm_dtype);
  problem.backward_comm_bytes = comm_bytes(backward);

  cost::CostModel costs(model.graph, cluster.device, request.precision, profile_db);
  auto dense = sharding::dense_part(model.graph, tables, costs, cluster, request.optimizer, problem.batch_per_rank, model.batch);
  problem.dense_ms = dense.step_ms();
  problem.dense_mem_bytes = dense.memory.total();
  auto solution = sharding::plan_sharding(problem);
  double planning_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  auto layout = emit::ops_layout(model.graph, dense.ops, "stage_0.pt");
  emit::ModelFacts facts{std::filesystem::canonical(model_path).string(), sha256_of_file(model_path),
                         std::string(model_format_name(model.format)), model.batch};
  emit::ShardedModel sharded{problem.tables, problem, solution, dense, options.comm_dtype, backward};
  ShardedPlan result;
  result.plan = emit::build_sharded_plan(model.graph, facts, request, layout, sharded);
  lay_out_files(model.graph, tables, dense, result);
  const auto& p = result.plan.predicted;
  result.summary = {{"tables", tables.size()},
                    {"sharding_types", type_counts(solution)},
                    {"imbalance", stable_number(p.efficiency > 0 ? 1 / p.efficiency : 1)},
                    {"batch_per_rank", problem.batch_per_rank},
                    {"ms", {{"sharding", stable_number(planning_ms)}}}};
  return result;
}

void write_sharded_files(const Model& model, ShardedPlan& sharded, const std::string& folder) {
  if (!sharded.unwritable.empty()) throw InputError(model.path + ": " + sharded.unwritable + "; plan with --plan-only");
  auto hashes = write_stage_files(model, {sharded.dense, sharded.indices, sharded.tables}, folder);
  auto& plan = sharded.plan;
  auto& section = *plan.sharding;
  plan.stages[0].sha256 = hashes[0].stage;
  plan::ShardingFiles files;
  files.indices = {kIndicesFile, hashes[1].stage};
  for (const auto& input : sharded.indices.inputs) files.index_inputs.push_back(model.graph.value(input.value).name);
  files.tables = {kTablesFile, hashes[2].stage};
  for (std::size_t t = 0; t < section.tables.size(); ++t) {
    auto& table = section.tables[t];
    table.lookup_args = sharded.lookup_args[t];
    for (const auto& weight : sharded.tables.params)
      if (model.graph.value(weight.value).name == table.name) table.stage_name = weight.stage_name;
  }
  const auto tables_path = (std::filesystem::path(folder) / kTablesFile).string();
  for (int rank = 0; rank < plan.cluster.gpus; ++rank) {
    std::vector<TorchPlugin::TableSlice> slices;
    for (const auto& table : section.tables)
      for (const auto& s : table.shards)
        if (s.rank == rank) slices.push_back({table.name, table.stage_name, s.row_begin, s.rows, s.col_begin, s.cols});
    std::string file = "shards_" + std::to_string(rank) + ".pt";
    auto path = (std::filesystem::path(folder) / file).string();
    torch_plugin().save_table_slices(tables_path, slices, path);
    files.shards.push_back({file, sha256_of_file(path)});
  }
  section.files = std::move(files);
}

}  // namespace rannc
