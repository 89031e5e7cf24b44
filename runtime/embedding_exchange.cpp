#include "runtime/embedding_exchange.h"

#include <torch/optim.h>
#include <torch/script.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "plan/plan_json.h"
#include "runtime/memory_tracker.h"
#include "support/error.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/torch_error.h"

namespace rannc::runtime {

namespace {

using Clock = std::chrono::steady_clock;

constexpr double kRowwiseAdagradEps = 1e-8;

// The sum of a gradient row's squares.
float square_sum(const float* grad, std::int64_t cols) {
  float sum = 0;
  for (std::int64_t c = 0; c < cols; ++c) sum += grad[c] * grad[c];
  return sum;
}

// Adds each lookup's gradient, row samples[k] of `grad`, into row ids[k] of `into` (without
// gathering them in a tensor of all lookups first).
void add_lookup_rows(const at::Tensor& into, const at::Tensor& ids, const at::Tensor& samples, const at::Tensor& grad) {
  const auto cols = into.size(1);
  auto from = grad.contiguous(), id = ids.contiguous(), sample = samples.contiguous();
  float* rows = into.data_ptr<float>();
  const float* grads = from.data_ptr<float>();
  const auto* row_of = id.data_ptr<std::int64_t>();
  const auto* sample_of = sample.data_ptr<std::int64_t>();
  for (std::int64_t k = 0; k < id.numel(); ++k)
    for (std::int64_t c = 0; c < cols; ++c) rows[row_of[k] * cols + c] += grads[sample_of[k] * cols + c];
}

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
  // An unpooled table (pooling_mode none) looks up `lookups` rows per sample and hands each on:
  // each lookup is a bag of its own, so its rows travel like pooled ones, `bags` = batch x lookups.
  std::int64_t lookups = 0;            // 0: pooled, one bag per sample
  std::int64_t bags = 0;               // rows of pooled and grad
  int owned = -1;                      // this rank's shard of it in owned_ (at most one per rank)
  at::Tensor ids, samples, bag_sizes;  // this rank's lookups: ids, the bag of each, ids per bag (mean bags)
  at::Tensor pooled, grad;             // [bags, dim]
  at::Tensor output;                   // pooled as the stage takes it: [batch, dim], or [batch, lookups, dim]
  Lookups served;                      // what this rank's shard served in the last forward
  std::int64_t replicated_at = 0;      // data-parallel: where its gradient starts in replicated_

  // A data-parallel table's parts of replicated_: its gradient [rows, dim], then a flag per row
  // (non-zero: looked up).
  at::Tensor replicated_grad(const at::Tensor& buffer) const {
    return buffer.narrow(0, replicated_at, plan->rows * plan->dim).view({plan->rows, plan->dim});
  }
  at::Tensor looked_up(const at::Tensor& buffer) const {
    return buffer.narrow(0, replicated_at + plan->rows * plan->dim, plan->rows);
  }
  static std::int64_t replicated_elements(const plan::ShardedTable& table) { return table.rows * (table.dim + 1); }
};

// One shard's lookups since the last step, in parts (one source rank's in one batch): the shard
// rows it looked up, the sample each pools into, and the gradient of those samples' pooled
// columns as received ([batch, cols]). Nothing the size of the shard.
struct EmbeddingExchange::ShardGradient {
  std::vector<at::Tensor> rows, samples, grads;

  void add(const at::Tensor& part_rows, const at::Tensor& part_samples, const at::Tensor& part_grads) {
    rows.push_back(part_rows.contiguous());
    samples.push_back(part_samples.contiguous());
    grads.push_back(part_grads.contiguous());
  }
  void clear() { *this = ShardGradient(); }

  // Calls visit(row, gradient) once per row looked up, in row order, with the sum of its lookups'
  // gradients (duplicates coalesced, added in the order they arrived). It sorts the lookups by
  // row (their ids gathered, sorted, and their order: the planner's kSortedIdBytes a lookup) and
  // sums each row in one row of scratch.
  template <typename Visit>
  void for_each_row(std::int64_t cols, Visit&& visit) const {
    if (rows.empty()) return;
    auto [sorted_ids, sorting] = at::sort(at::cat(rows), /*stable=*/true, /*dim=*/0, /*descending=*/false);
    const auto* sorted = sorted_ids.data_ptr<std::int64_t>();
    const auto* order = sorting.data_ptr<std::int64_t>();
    std::vector<std::int64_t> part_ends;  // of each part among all lookups
    for (const auto& part : rows) part_ends.push_back((part_ends.empty() ? 0 : part_ends.back()) + part.numel());
    auto scratch = at::zeros({cols});
    auto* sum = scratch.data_ptr<float>();
    const std::int64_t lookups = part_ends.back();
    for (std::int64_t k = 0; k < lookups;) {
      const std::int64_t row = sorted[k];
      std::fill(sum, sum + cols, 0.0F);
      for (; k < lookups && sorted[k] == row; ++k) {
        auto part = static_cast<std::size_t>(std::upper_bound(part_ends.begin(), part_ends.end(), order[k]) -
                                             part_ends.begin());
        auto sample = samples[part].data_ptr<std::int64_t>()[order[k] - (part == 0 ? 0 : part_ends[part - 1])];
        const float* grad = grads[part].data_ptr<float>() + sample * cols;
        for (std::int64_t c = 0; c < cols; ++c) sum[c] += grad[c];
      }
      visit(row, static_cast<const float*>(sum));
    }
  }
};

// The plan's sparse optimizer, stepping one row of a shard at a time, in place, with the sum of
// the row's gradients: torch.optim's arithmetic on the row for sgd, momentum and adam (AdamW
// with a weight decay), FBGEMM's exact row-wise Adagrad. A step changes only the rows it is given
// (those looked up), and their state: momentum and Adam's moments of other rows do not decay or
// move them, as with torch.optim.SparseAdam and FBGEMM. Adam's bias correction counts every step.
// Weight decay applies to the rows stepped; row-wise Adagrad takes none.
class EmbeddingExchange::RowOptimizer {
 public:
  // `shards` (kept by reference, stepped in place), and the columns of each one's whole row (a
  // column-wise piece's table's).
  // `in_host[i]`: shard i is in host memory, its state too (not counted as tensor memory).
  RowOptimizer(const std::string& name, const std::string& where, double weight_decay,
               const std::vector<at::Tensor>& shards, std::vector<std::int64_t> row_dims, const std::vector<bool>& in_host)
      : shards_(shards), row_dims_(std::move(row_dims)), weight_decay_(weight_decay) {
    kind_ = name == "rowwise_adagrad" ? Kind::kRowwiseAdagrad : kind_of(plan::parse_optimizer(name, where));
    for (std::size_t i = 0; i < shards_.size(); ++i) {
      const auto& shard = shards_[i];
      std::optional<UncountedAllocations> host;
      if (in_host[i]) host.emplace();
      const std::size_t states = state_.size(), moments = second_moments_.size();
      if (kind_ == Kind::kRowwiseAdagrad) state_.push_back(at::zeros({shard.size(0)}));  // one accumulator per row
      if (kind_ == Kind::kMomentum || kind_ == Kind::kAdam) state_.push_back(at::zeros_like(shard));
      if (kind_ == Kind::kAdam) second_moments_.push_back(at::zeros_like(shard));
      if (!in_host[i]) continue;
      if (state_.size() > states) host_bytes_ += static_cast<std::int64_t>(state_.back().nbytes());
      if (second_moments_.size() > moments) host_bytes_ += static_cast<std::int64_t>(second_moments_.back().nbytes());
    }
  }

  std::int64_t host_bytes() const { return host_bytes_; }  // of the state of shards in host memory

  bool rowwise() const { return kind_ == Kind::kRowwiseAdagrad; }

  void begin_step(double lr) {
    lr_ = lr;
    ++steps_;
    if (kind_ == Kind::kAdam) adam_step_ = AdamStep(lr, weight_decay_, steps_);
  }

  // `whole_row_square`: the sum of the squared gradient over every column of the row, on all
  // ranks (row-wise Adagrad's; the others ignore it).
  void update(std::size_t shard, std::int64_t row, const float* grad, float whole_row_square) {
    const std::int64_t cols = shards_[shard].size(1);
    float* weights = shards_[shard].data_ptr<float>() + row * cols;
    auto state_row = [&](const at::Tensor& state) { return state.data_ptr<float>() + row * cols; };
    switch (kind_) {
      case Kind::kSgd: return sgd(weights, grad, nullptr, cols);
      case Kind::kMomentum: return sgd(weights, grad, state_row(state_[shard]), cols);
      case Kind::kAdam: return adam(weights, grad, state_row(state_[shard]), state_row(second_moments_[shard]), cols);
      case Kind::kRowwiseAdagrad:
        return rowwise_adagrad(weights, grad, state_[shard].data_ptr<float>()[row],
                               whole_row_square / static_cast<float>(row_dims_[shard]), cols);
    }
  }

 private:
  enum class Kind { kSgd, kMomentum, kAdam, kRowwiseAdagrad };

  static Kind kind_of(plan::Optimizer optimizer) {
    if (optimizer == plan::Optimizer::kAdam) return Kind::kAdam;
    return optimizer == plan::Optimizer::kMomentum ? Kind::kMomentum : Kind::kSgd;
  }

  // torch.optim.SGD: the gradient plus the L2 decay, through the momentum buffer when there is
  // one (a buffer of zeros takes the first gradient as is, like torch's first step).
  void sgd(float* weights, const float* grad, float* momentum, std::int64_t cols) const {
    const auto decay = static_cast<float>(weight_decay_), rate = static_cast<float>(-lr_);
    const auto keep = static_cast<float>(kMomentum);
    for (std::int64_t c = 0; c < cols; ++c) {
      float step = grad[c] + decay * weights[c];
      if (momentum) step = momentum[c] = momentum[c] * keep + step;
      weights[c] += rate * step;
    }
  }

  // Adam's factors for one step, the same for every row: computed once per step.
  struct AdamStep {
    float decay = 1, rate = 0, root_correction2 = 1, eps = 0, b1 = 0, b2 = 0, new1 = 0, new2 = 0;
    AdamStep() = default;
    AdamStep(double lr, double weight_decay, std::int64_t steps) {
      static const torch::optim::AdamOptions defaults;
      const double beta1 = std::get<0>(defaults.betas()), beta2 = std::get<1>(defaults.betas());
      const double correction1 = 1 - std::pow(beta1, steps), correction2 = 1 - std::pow(beta2, steps);
      decay = static_cast<float>(1 - lr * weight_decay);
      rate = static_cast<float>(-lr / correction1);
      root_correction2 = static_cast<float>(std::sqrt(correction2));
      eps = static_cast<float>(defaults.eps());
      b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
      new1 = static_cast<float>(1 - beta1), new2 = static_cast<float>(1 - beta2);
    }
  };

  // torch.optim.Adam, or AdamW's decoupled decay first.
  void adam(float* weights, const float* grad, float* first, float* second, std::int64_t cols) const {
    const AdamStep& a = adam_step_;
    for (std::int64_t c = 0; c < cols; ++c) {
      if (weight_decay_ > 0) weights[c] *= a.decay;
      first[c] = first[c] * a.b1 + a.new1 * grad[c];
      second[c] = second[c] * a.b2 + a.new2 * grad[c] * grad[c];
      weights[c] += a.rate * (first[c] / (std::sqrt(second[c]) / a.root_correction2 + a.eps));
    }
  }

  // FBGEMM's exact row-wise Adagrad: the row's accumulator adds the mean squared gradient over
  // the whole row; the row moves by lr g / (sqrt(accumulator) + eps).
  void rowwise_adagrad(float* weights, const float* grad, float& accumulator, float mean_square, std::int64_t cols) const {
    accumulator += mean_square;
    const float denominator = std::sqrt(accumulator) + static_cast<float>(kRowwiseAdagradEps);
    const auto rate = static_cast<float>(lr_);
    for (std::int64_t c = 0; c < cols; ++c) weights[c] -= grad[c] * rate / denominator;
  }

  const std::vector<at::Tensor>& shards_;
  std::vector<std::int64_t> row_dims_;
  double weight_decay_;
  std::int64_t host_bytes_ = 0;
  Kind kind_ = Kind::kSgd;
  std::vector<at::Tensor> state_;  // per shard: momentum buffer, Adam's first moments or row-wise accumulators
  std::vector<at::Tensor> second_moments_;  // per shard, Adam's
  double lr_ = 0;
  std::int64_t steps_ = 0;
  AdamStep adam_step_;
};

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
  TensorDict shards;
  {
    // Read as host memory; the device-tier shards are counted as the device's once kept.
    UncountedAllocations host;
    shards = read_state_dict(plan::check_plan_file(plan, shard_file, "rank " + std::to_string(rank) + "'s shard file"), "shard file");
  }
  batch_ = sharding.batch_per_rank;
  std::vector<std::int64_t> row_dims;  // of each owned shard's table
  std::vector<bool> in_host;           // of each owned shard: in the host tier
  for (std::size_t t = 0; t < sharding.tables.size(); ++t) {
    const auto& table = sharding.tables[t];
    if (table.pooling_mode != "sum" && table.pooling_mode != "mean" && table.pooling_mode != "none")
      throw InputError(plan.path + ": table " + table.name + " pools by " + table.pooling_mode +
                       " (rannc-run trains sum, mean and unpooled tables)");
    if (table.lookup_args.empty()) throw InputError(plan.path + ": table " + table.name + " has no lookup_args");
    Table entry;
    entry.plan = &table;
    entry.data_parallel = table.type == "data_parallel";
    entry.mean = table.pooling_mode == "mean";
    entry.bags = batch_;
    if (table.pooling_mode == "none") {
      if (table.pooling < 1 || table.pooling > 1e6 || table.pooling != std::floor(table.pooling))
        throw InputError(plan.path + ": unpooled table " + table.name + " looks up " + std::to_string(table.pooling) +
                         " rows per sample (a whole number from 1 to 10^6)");
      entry.lookups = static_cast<std::int64_t>(table.pooling);
      entry.bags = batch_ * entry.lookups;
    }
    for (const auto& shard : table.shards) {
      if (entry.data_parallel && shard.rank != rank) continue;
      Slot slot{t, shard.row_begin, shard.rows, shard.col_begin, shard.cols, shard.rows == table.rows};
      if (shard.rank == rank) {
        auto found = std::find_if(shards.begin(), shards.end(), [&](const auto& named) { return named.first == table.name; });
        if (found == shards.end() || found->second.dim() != 2 || found->second.size(0) != shard.rows || found->second.size(1) != shard.cols)
          throw InputError(files.shards[static_cast<std::size_t>(rank)].file + ": no " + std::to_string(shard.rows) + " x " +
                           std::to_string(shard.cols) + " shard of " + table.name);
        entry.owned = static_cast<int>(owned_.size());
        in_host.push_back(table.tier == "host");
        if (in_host.back()) {
          // The host tier's shard is in host memory, not counted as the device's tensor memory.
          UncountedAllocations host;
          owned_.push_back(found->second.to(at::kFloat).contiguous());
          record_.host_bytes += static_cast<std::int64_t>(owned_.back().nbytes());
        } else {
          owned_.push_back(found->second.to(at::kFloat).contiguous());
          count_tensor_memory(owned_.back());
        }
        row_dims.push_back(table.dim);
      }
      if (!entry.data_parallel) slots_[static_cast<std::size_t>(shard.rank)].push_back(slot);
    }
    if (entry.data_parallel) {
      entry.replicated_at = replicated_elements_;
      replicated_elements_ += Table::replicated_elements(table);
    }
    table_index_[table.name] = t;
    tables_.push_back(std::move(entry));
  }
  gradients_.resize(owned_.size());
  // The tables step with the plan's sparse optimizer (what its memory was planned for), at
  // rannc-run's learning rate and weight decay.
  optimizer_ = std::make_unique<RowOptimizer>(sharding.sparse_optimizer, plan.path + ": sharding.sparse_optimizer:",
                                              settings.weight_decay, owned_, std::move(row_dims), in_host);
  record_.host_bytes += optimizer_->host_bytes();
}

EmbeddingExchange::~EmbeddingExchange() = default;

const std::vector<std::string>& EmbeddingExchange::index_inputs() const { return plan_.sharding->files->index_inputs; }

// Each id with the sample it belongs to: [batch, bag] ids are one bag per row; 1-D ids are cut
// into bags by offsets.
void EmbeddingExchange::split_ids(const at::Tensor& ids, const at::Tensor& offsets, Table& table) const {
  const auto options = at::TensorOptions().dtype(at::kLong);
  if (table.lookups > 0) {
    // Unpooled: [batch, lookups] ids, each lookup its own bag.
    if (ids.dim() != 2 || ids.size(0) != batch_ || ids.size(1) != table.lookups)
      throw std::runtime_error("table " + table.plan->name + ": its ids are " + c10::str(ids.sizes()) + ", not [" +
                               std::to_string(batch_) + ", " + std::to_string(table.lookups) + "] (unpooled, " +
                               std::to_string(table.lookups) + " lookups per sample)");
    table.ids = ids.reshape({-1}).to(at::kLong);
    table.samples = at::arange(table.bags, options);
  } else if (ids.dim() == 2) {
    table.ids = ids.reshape({-1}).to(at::kLong);
    table.samples = at::arange(ids.size(0), options).repeat_interleave(ids.size(1));
  } else if (ids.dim() == 1 && offsets.defined() && offsets.dim() == 1) {
    auto ends = at::cat({offsets.narrow(0, 1, offsets.size(0) - 1), at::tensor({ids.size(0)}, options)});
    table.ids = ids.to(at::kLong);
    table.samples = at::arange(offsets.size(0), options).repeat_interleave(ends - offsets);
  } else {
    throw std::runtime_error("table " + table.plan->name + ": its ids are neither [batch, bag] nor ids with offsets");
  }
  if (table.samples.numel() != table.ids.numel() || (table.ids.numel() > 0 && table.samples.max().item<std::int64_t>() >= table.bags))
    throw std::runtime_error("table " + table.plan->name + ": the bags do not make " + std::to_string(batch_) + " samples");
  if (table.ids.numel() > 0 && (table.ids.min().item<std::int64_t>() < 0 || table.ids.max().item<std::int64_t>() >= table.plan->rows))
    throw std::runtime_error("table " + table.plan->name + ": an id in the data is outside its " +
                             std::to_string(table.plan->rows) + " rows");
  if (table.mean) table.bag_sizes = at::bincount(table.samples, {}, table.bags).to(at::kFloat).clamp_min(1).unsqueeze(1);
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
      auto sum = at::zeros({table.bags, slot.cols}).index_add_(0, samples, shard.index_select(0, rows));
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
  for (auto& table : tables_) table.pooled = at::zeros({table.bags, table.plan->dim});
  for (std::size_t d = 0; d < received.size(); ++d) {
    std::int64_t at = 0;
    for (const auto& slot : slots_[d]) {
      auto& table = tables_[slot.table];
      auto part = received[d].narrow(0, at, table.bags * slot.cols).to(at::kFloat).view({table.bags, slot.cols});
      at += table.bags * slot.cols;
      table.pooled.narrow(1, slot.col_begin, slot.cols).add_(part);
    }
  }
  auto start = Clock::now();
  for (auto& table : tables_) {
    if (table.data_parallel)
      table.pooled.index_add_(0, table.samples, owned_[static_cast<std::size_t>(table.owned)].index_select(0, table.ids));
    if (table.mean) table.pooled.div_(table.bag_sizes);
    table.output = table.lookups > 0 ? table.pooled.view({batch_, table.lookups, table.plan->dim}) : table.pooled;
  }
  record_.lookup_ms += ms_since(start);
}

const at::Tensor& EmbeddingExchange::pooled(const std::string& table) const {
  return tables_.at(table_index_.at(table)).output;
}

void EmbeddingExchange::add_gradient(const std::string& name, const at::Tensor& grad) {
  auto& table = tables_.at(table_index_.at(name));
  auto host = grad.detach().to(at::kCPU, at::kFloat).reshape({table.bags, table.plan->dim});
  table.grad = table.grad.defined() ? table.grad + host : host;
}

void EmbeddingExchange::backward() {
  at::NoGradGuard no_grad;
  const auto wire = wire_dtype(plan_.sharding->comm_dtype_bwd);
  for (auto& table : tables_) {
    if (!table.grad.defined()) table.grad = at::zeros({table.bags, table.plan->dim});
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
  // Each shard keeps the gradients with the rows they go to, for the step.
  for (std::size_t q = 0; q < received.size(); ++q) {
    std::int64_t at = 0;
    for (const auto& slot : slots_[static_cast<std::size_t>(rank_)]) {
      auto& table = tables_[slot.table];
      auto grad = received[q].narrow(0, at, table.bags * slot.cols).to(at::kFloat).view({table.bags, slot.cols});
      at += table.bags * slot.cols;
      gradients_[static_cast<std::size_t>(table.owned)].add(table.served.rows[q], table.served.samples[q], grad);
    }
  }
  add_replicated_gradients();
  record_.lookup_ms += ms_since(start);
}

// This rank's lookups of the data-parallel tables, added into replicated_: their gradients and a
// flag on each row looked up. Summed over all ranks, the flags tell the rows any rank looked up.
void EmbeddingExchange::add_replicated_gradients() {
  if (replicated_elements_ == 0) return;
  if (!replicated_.defined()) replicated_ = at::zeros({replicated_elements_});
  for (const auto& table : tables_) {
    if (!table.data_parallel) continue;
    add_lookup_rows(table.replicated_grad(replicated_), table.ids, table.samples, table.grad);
    table.looked_up(replicated_).index_fill_(0, table.ids, 1);
  }
}

// The data-parallel tables' gradients and flags, summed over all ranks in one allreduce.
void EmbeddingExchange::sum_replicated_gradients() {
  if (!replicated_.defined()) return;
  record_.allreduce_bytes += static_cast<std::int64_t>(replicated_.nbytes());
  auto start = Clock::now();
  if (world_ > 1) communicator_.sum_over_world(replicated_, "summing the data-parallel tables' gradients");
  record_.allreduce_ms += ms_since(start);
}

// Row-wise Adagrad's squared gradients of the column-wise tables' whole rows, per table: a
// piece's rows are summed over its columns on this rank (coalescing its lookups once more than
// the update does), then over all ranks (the ranks without a piece add zeros) in one allreduce,
// so each piece steps as the whole row. Empty for the other optimizers.
std::map<std::size_t, at::Tensor> EmbeddingExchange::whole_row_squares() {
  std::map<std::size_t, at::Tensor> squares;
  if (!optimizer_->rowwise()) return squares;
  std::int64_t elements = 0;
  for (const auto& table : tables_)
    if (table.plan->type == "column_wise") elements += table.plan->rows;
  if (elements == 0) return squares;
  auto summed = at::zeros({elements});
  std::int64_t at = 0;
  for (std::size_t t = 0; t < tables_.size(); ++t) {
    const auto& table = tables_[t];
    if (table.plan->type != "column_wise") continue;
    squares[t] = summed.narrow(0, at, table.plan->rows);
    at += table.plan->rows;
    if (table.owned < 0) continue;
    auto* out = squares[t].data_ptr<float>();
    const auto cols = owned_[static_cast<std::size_t>(table.owned)].size(1);
    gradients_[static_cast<std::size_t>(table.owned)].for_each_row(
        cols, [&](std::int64_t row, const float* grad) { out[row] = square_sum(grad, cols); });
  }
  if (world_ > 1) communicator_.sum_over_world(summed, "summing the column pieces' squared gradients");
  return squares;
}

// Steps the rows of `table`'s shard on this rank looked up since the last step (a data-parallel
// table's: by any rank). `whole_row_squares`: row-wise Adagrad's, for a column-wise table.
void EmbeddingExchange::update_rows(const Table& table, const at::Tensor& whole_row_squares) {
  const auto shard = static_cast<std::size_t>(table.owned);
  const std::int64_t cols = owned_[shard].size(1);
  const float* squares = whole_row_squares.defined() ? whole_row_squares.data_ptr<float>() : nullptr;
  auto update = [&](std::int64_t row, const float* grad) {
    optimizer_->update(shard, row, grad, squares ? squares[row] : square_sum(grad, cols));
  };
  if (!table.data_parallel) return gradients_[shard].for_each_row(cols, update);
  if (!replicated_.defined()) return;
  const float* grads = table.replicated_grad(replicated_).data_ptr<float>();
  const float* looked_up = table.looked_up(replicated_).data_ptr<float>();
  for (std::int64_t row = 0; row < table.plan->rows; ++row)
    if (looked_up[row] != 0) update(row, grads + row * cols);
}

void EmbeddingExchange::step(double lr) {
  at::NoGradGuard no_grad;
  sum_replicated_gradients();
  auto squares = whole_row_squares();
  auto start = Clock::now();
  optimizer_->begin_step(lr);
  for (std::size_t t = 0; t < tables_.size(); ++t) {
    if (tables_[t].owned < 0) continue;
    auto found = squares.find(t);
    update_rows(tables_[t], found == squares.end() ? at::Tensor() : found->second);
  }
  for (auto& gradient : gradients_) gradient.clear();
  replicated_ = at::Tensor();
  record_.lookup_ms += ms_since(start);
}

}  // namespace rannc::runtime
