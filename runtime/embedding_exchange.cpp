#include "runtime/embedding_exchange.h"

#include <torch/optim.h>
#include <torch/script.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/zeros.h>

#include <chrono>

#include "plan/plan_json.h"
#include "support/error.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/torch_error.h"

namespace rannc::runtime {

// A shard of table `table` (index into tables_) on some rank: rows [row_begin, +rows), columns
// [col_begin, +cols).
struct EmbeddingExchange::Slot {
  std::size_t table = 0;
  std::int64_t row_begin = 0, rows = 0, col_begin = 0, cols = 0;
  bool all_rows = true;  // table-wise and column-wise shards serve every id
};

// What an owner keeps from a forward for the backward: the ids it served to each rank and the
// samples they belong to, per slot.
struct EmbeddingExchange::Lookups {
  std::vector<at::Tensor> rows, samples;  // per source rank
};

struct EmbeddingExchange::Table {
  const plan::ShardedTable* plan = nullptr;
  bool data_parallel = false, mean = false;
  int owned = -1;                      // this rank's shard of it in owned_ (at most one per rank)
  at::Tensor ids, samples, bag_sizes;  // this rank's lookups: ids, the sample of each, ids per sample (mean bags)
  at::Tensor pooled, grad;             // [batch, dim]
  Lookups served;                      // what this rank's shard served in the last forward
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kRowwiseAdagradEps = 1e-8;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

at::ScalarType wire_dtype(const std::string& comm_dtype) {
  return comm_dtype == "fp16" ? at::kHalf : comm_dtype == "bf16" ? at::kBFloat16 : at::kFloat;
}

std::vector<at::Tensor> tensors_of(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  if (value.isTensor()) tensors.push_back(value.toTensor());
  if (value.isTuple())
    for (const auto& element : value.toTupleRef().elements()) tensors.push_back(element.toTensor());
  return tensors;
}

std::int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  std::int64_t bytes = 0;
  for (const auto& tensor : tensors) bytes += static_cast<std::int64_t>(tensor.nbytes());
  return bytes;
}

}  // namespace

EmbeddingExchange::EmbeddingExchange(const plan::Plan& plan, int rank, Communicator& communicator,
                                     const OptimizerSettings& settings)
    : plan_(plan), rank_(rank), world_(plan.cluster.gpus), communicator_(communicator), slots_(static_cast<std::size_t>(world_)) {
  const auto& sharding = *plan.sharding;
  if (!sharding.files) throw InputError(plan.path + ": a --plan-only plan: its shards were not written (re-run partition without --plan-only)");
  const auto& files = *sharding.files;
  auto indices_path = plan::check_plan_file(plan, files.indices, "the indices module");
  try {
    indices_ = std::make_unique<torch::jit::Module>(torch::jit::load(indices_path));
  } catch (const std::exception& e) {
    throw InputError(indices_path + ": cannot load: " + torch_message(e));
  }
  const auto& shard_file = files.shards.at(static_cast<std::size_t>(rank));
  auto shards = read_state_dict(plan::check_plan_file(plan, shard_file, "rank " + std::to_string(rank) + "'s shard file"), "shard file");
  batch_ = sharding.batch_per_rank;
  for (std::size_t t = 0; t < sharding.tables.size(); ++t) {
    const auto& table = sharding.tables[t];
    if (table.pooling_mode != "sum" && table.pooling_mode != "mean")
      throw InputError(plan.path + ": table " + table.name + " pools by " + table.pooling_mode + " (rannc-run pools sum and mean)");
    if (table.lookup_args.empty()) throw InputError(plan.path + ": table " + table.name + " has no lookup_args");
    Table entry;
    entry.plan = &table;
    entry.data_parallel = table.type == "data_parallel";
    entry.mean = table.pooling_mode == "mean";
    for (const auto& shard : table.shards) {
      if (entry.data_parallel && shard.rank != rank) continue;
      Slot slot{t, shard.row_begin, shard.rows, shard.col_begin, shard.cols, shard.rows == table.rows};
      if (shard.rank == rank) {
        auto found = std::find_if(shards.begin(), shards.end(), [&](const auto& named) { return named.first == table.name; });
        if (found == shards.end() || found->second.dim() != 2 || found->second.size(0) != shard.rows || found->second.size(1) != shard.cols)
          throw InputError(files.shards[static_cast<std::size_t>(rank)].file + ": no " + std::to_string(shard.rows) + " x " +
                           std::to_string(shard.cols) + " shard of " + table.name);
        entry.owned = static_cast<int>(owned_.size());
        owned_.push_back(found->second.to(at::kFloat).detach().requires_grad_(true));
      }
      if (!entry.data_parallel) slots_[static_cast<std::size_t>(shard.rank)].push_back(slot);
    }
    table_index_[table.name] = t;
    tables_.push_back(std::move(entry));
  }
  for (auto& shard : owned_) shard.mutable_grad() = at::zeros_like(shard);
  // The tables step with the plan's sparse optimizer (what its memory was planned for), at
  // rannc-run's learning rate and weight decay.
  if (sharding.sparse_optimizer == "rowwise_adagrad") {
    for (const auto& shard : owned_) row_sums_.push_back(at::zeros({shard.size(0)}));
  } else {
    OptimizerSettings tables = settings;
    tables.kind = plan::parse_optimizer(sharding.sparse_optimizer, plan.path + ": sharding.sparse_optimizer:");
    optimizer_ = make_optimizer(owned_, tables);
  }
}

EmbeddingExchange::~EmbeddingExchange() = default;

const std::vector<std::string>& EmbeddingExchange::index_inputs() const { return plan_.sharding->files->index_inputs; }

// Each id with the sample it belongs to: [batch, bag] ids are one bag per row; 1-D ids are cut
// into bags by offsets.
void EmbeddingExchange::split_ids(const at::Tensor& ids, const at::Tensor& offsets, Table& table) const {
  const auto options = at::TensorOptions().dtype(at::kLong);
  if (ids.dim() == 2) {
    table.ids = ids.reshape({-1}).to(at::kLong);
    table.samples = at::arange(ids.size(0), options).repeat_interleave(ids.size(1));
  } else if (ids.dim() == 1 && offsets.defined() && offsets.dim() == 1) {
    auto ends = at::cat({offsets.narrow(0, 1, offsets.size(0) - 1), at::tensor({ids.size(0)}, options)});
    table.ids = ids.to(at::kLong);
    table.samples = at::arange(offsets.size(0), options).repeat_interleave(ends - offsets);
  } else {
    throw std::runtime_error("table " + table.plan->name + ": its ids are neither [batch, bag] nor ids with offsets");
  }
  if (table.samples.numel() != table.ids.numel() || (table.ids.numel() > 0 && table.samples.max().item<std::int64_t>() >= batch_))
    throw std::runtime_error("table " + table.plan->name + ": the bags do not make " + std::to_string(batch_) + " samples");
  if (table.ids.numel() > 0 && (table.ids.min().item<std::int64_t>() < 0 || table.ids.max().item<std::int64_t>() >= table.plan->rows))
    throw std::runtime_error("table " + table.plan->name + ": an id in the data is outside its " +
                             std::to_string(table.plan->rows) + " rows");
  if (table.mean) table.bag_sizes = at::bincount(table.samples, {}, batch_).to(at::kFloat).clamp_min(1).unsqueeze(1);
}

void EmbeddingExchange::forward(const std::vector<at::Tensor>& inputs) {
  std::vector<c10::IValue> arguments(inputs.begin(), inputs.end());
  auto lookup_inputs = tensors_of(indices_->forward(arguments));
  for (auto& table : tables_) {
    const auto& args = table.plan->lookup_args;
    split_ids(lookup_inputs.at(static_cast<std::size_t>(args[0])),
              args.size() > 1 ? lookup_inputs.at(static_cast<std::size_t>(args[1])) : at::Tensor(), table);
    table.grad = at::Tensor();
  }
  // Ids to the ranks whose shards hold their rows: per slot, [count, local rows..., samples...].
  auto start = Clock::now();
  std::vector<at::Tensor> to_each(static_cast<std::size_t>(world_));
  for (int r = 0; r < world_; ++r) {
    std::vector<at::Tensor> parts{at::zeros({0}, at::kLong)};
    for (const auto& slot : slots_[static_cast<std::size_t>(r)]) {
      const auto& table = tables_[slot.table];
      at::Tensor keep = slot.all_rows ? at::ones_like(table.ids, at::kBool)
                                      : table.ids.ge(slot.row_begin).logical_and(table.ids.lt(slot.row_begin + slot.rows));
      auto rows = table.ids.masked_select(keep) - slot.row_begin;
      parts.insert(parts.end(), {at::tensor({rows.numel()}, at::kLong), rows, table.samples.masked_select(keep)});
    }
    to_each[static_cast<std::size_t>(r)] = at::cat(parts);
  }
  record_.index_bytes += bytes_of(to_each);
  auto received = communicator_.all_to_all(to_each, "sending ids to the shards");
  record_.index_ms += ms_since(start);
  auto sums = lookup_owned(received);
  start = Clock::now();
  record_.pooled_bytes += bytes_of(sums);
  auto pooled = communicator_.all_to_all(sums, "sending pooled rows back");
  record_.pooled_ms += ms_since(start);
  assemble(pooled);
}

// For each source rank, the sums of this rank's shard rows per sample of that rank, slot by slot,
// in the forward comm dtype.
std::vector<at::Tensor> EmbeddingExchange::lookup_owned(const std::vector<at::Tensor>& received) {
  auto start = Clock::now();
  at::NoGradGuard no_grad;
  const auto wire = wire_dtype(plan_.sharding->comm_dtype);
  std::vector<at::Tensor> sums(received.size());
  for (std::size_t q = 0; q < received.size(); ++q) {
    const auto& buffer = received[q];
    std::int64_t at = 0;
    std::vector<at::Tensor> parts{at::zeros({0}, wire)};
    for (const auto& slot : slots_[static_cast<std::size_t>(rank_)]) {
      auto count = buffer[at].item<std::int64_t>();
      auto rows = buffer.narrow(0, at + 1, count), samples = buffer.narrow(0, at + 1 + count, count);
      at += 1 + 2 * count;
      auto& table = tables_[slot.table];
      auto& served = table.served;
      served.rows.resize(received.size());
      served.samples.resize(received.size());
      served.rows[q] = rows;
      served.samples[q] = samples;
      const auto& shard = owned_[static_cast<std::size_t>(table.owned)];
      auto sum = at::zeros({batch_, slot.cols}).index_add_(0, samples, shard.index_select(0, rows));
      parts.push_back(sum.to(wire).reshape({-1}));
    }
    sums[q] = at::cat(parts);
  }
  record_.lookup_ms += ms_since(start);
  return sums;
}

// Each table's pooled rows from the owners' sums (column pieces side by side, row-wise partial
// sums added), and the data-parallel tables' from this rank's own copy.
void EmbeddingExchange::assemble(const std::vector<at::Tensor>& received) {
  at::NoGradGuard no_grad;
  for (auto& table : tables_) table.pooled = at::zeros({batch_, table.plan->dim});
  for (std::size_t d = 0; d < received.size(); ++d) {
    std::int64_t at = 0;
    for (const auto& slot : slots_[d]) {
      auto& table = tables_[slot.table];
      auto part = received[d].narrow(0, at, batch_ * slot.cols).to(at::kFloat).view({batch_, slot.cols});
      at += batch_ * slot.cols;
      table.pooled.narrow(1, slot.col_begin, slot.cols).add_(part);
    }
  }
  auto start = Clock::now();
  for (auto& table : tables_) {
    if (table.data_parallel)
      table.pooled.index_add_(0, table.samples, owned_[static_cast<std::size_t>(table.owned)].index_select(0, table.ids));
    if (table.mean) table.pooled.div_(table.bag_sizes);
  }
  record_.lookup_ms += ms_since(start);
}

const at::Tensor& EmbeddingExchange::pooled(const std::string& table) const {
  return tables_.at(table_index_.at(table)).pooled;
}

void EmbeddingExchange::add_gradient(const std::string& name, const at::Tensor& grad) {
  auto& table = tables_.at(table_index_.at(name));
  auto host = grad.detach().to(at::kCPU, at::kFloat);
  table.grad = table.grad.defined() ? table.grad + host : host;
}

void EmbeddingExchange::backward() {
  at::NoGradGuard no_grad;
  const auto wire = wire_dtype(plan_.sharding->comm_dtype_bwd);
  for (auto& table : tables_) {
    if (!table.grad.defined()) table.grad = at::zeros({batch_, table.plan->dim});
    if (table.mean) table.grad = table.grad / table.bag_sizes;
  }
  // To each owner, the gradient of the columns its shard pooled, slot by slot.
  std::vector<at::Tensor> to_each(static_cast<std::size_t>(world_));
  for (int d = 0; d < world_; ++d) {
    std::vector<at::Tensor> parts{at::zeros({0}, wire)};
    for (const auto& slot : slots_[static_cast<std::size_t>(d)])
      parts.push_back(tables_[slot.table].grad.narrow(1, slot.col_begin, slot.cols).to(wire).reshape({-1}));
    to_each[static_cast<std::size_t>(d)] = at::cat(parts);
  }
  auto start = Clock::now();
  record_.grad_bytes += bytes_of(to_each);
  auto received = communicator_.all_to_all(to_each, "sending pooled gradients to the shards");
  record_.grad_ms += ms_since(start);
  start = Clock::now();
  for (std::size_t q = 0; q < received.size(); ++q) {
    std::int64_t at = 0;
    for (const auto& slot : slots_[static_cast<std::size_t>(rank_)]) {
      auto& table = tables_[slot.table];
      auto grad = received[q].narrow(0, at, batch_ * slot.cols).to(at::kFloat).view({batch_, slot.cols});
      at += batch_ * slot.cols;
      owned_[static_cast<std::size_t>(table.owned)].mutable_grad().index_add_(
          0, table.served.rows[q], grad.index_select(0, table.served.samples[q]));
    }
  }
  // This rank's part of the data-parallel tables' gradients, summed over all ranks in one allreduce.
  std::vector<at::Tensor> replicated;
  for (auto& table : tables_) {
    if (!table.data_parallel) continue;
    auto part = at::zeros_like(owned_[static_cast<std::size_t>(table.owned)]);
    replicated.push_back(part.index_add_(0, table.ids, table.grad.index_select(0, table.samples)).reshape({-1}));
  }
  record_.lookup_ms += ms_since(start);
  if (replicated.empty()) return;
  auto summed = at::cat(replicated);
  record_.allreduce_bytes += static_cast<std::int64_t>(summed.nbytes());
  start = Clock::now();
  if (world_ > 1) communicator_.sum_over_world(summed, "summing the data-parallel tables' gradients");
  record_.allreduce_ms += ms_since(start);
  std::int64_t at = 0;
  for (auto& table : tables_) {
    if (!table.data_parallel) continue;
    auto& grad = owned_[static_cast<std::size_t>(table.owned)].mutable_grad();
    grad.add_(summed.narrow(0, at, grad.numel()).view_as(grad));
    at += grad.numel();
  }
}

// Row-wise Adagrad (FBGEMM's exact one): each row's accumulator adds the mean squared gradient
// over its columns; the row moves by lr g / (sqrt(accumulator) + eps). Rows not looked up have a
// zero gradient and stay. A column-wise table's rows span several ranks: the squares of its
// pieces are summed over all ranks first (one allreduce), so each piece steps as the whole row.
void EmbeddingExchange::step(double lr) {
  if (optimizer_) {
    for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
    optimizer_->step();
  } else {
    at::NoGradGuard no_grad;
    std::vector<at::Tensor> squares(owned_.size()), column_pieces;
    for (std::size_t i = 0; i < owned_.size(); ++i) squares[i] = owned_[i].grad().pow(2).sum(1);
    for (const auto& table : tables_) {
      if (table.plan->type != "column_wise") continue;
      column_pieces.push_back(table.owned >= 0 ? squares[static_cast<std::size_t>(table.owned)] : at::zeros({table.plan->rows}));
    }
    if (!column_pieces.empty() && world_ > 1) {
      auto summed = at::cat(column_pieces);
      communicator_.sum_over_world(summed, "summing the column pieces' squared gradients");
      std::int64_t at = 0;
      for (const auto& table : tables_) {
        if (table.plan->type != "column_wise") continue;
        if (table.owned >= 0) squares[static_cast<std::size_t>(table.owned)] = summed.narrow(0, at, table.plan->rows);
        at += table.plan->rows;
      }
    }
    for (const auto& table : tables_) {
      if (table.owned < 0) continue;
      auto i = static_cast<std::size_t>(table.owned);
      row_sums_[i].add_(squares[i] / static_cast<double>(table.plan->dim));
      owned_[i].sub_(owned_[i].grad() * lr / (row_sums_[i].sqrt() + kRowwiseAdagradEps).unsqueeze(1));
    }
  }
  for (auto& shard : owned_) shard.mutable_grad().zero_();
}

}  // namespace rannc::runtime
