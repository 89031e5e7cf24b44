#include "runtime/state_sync.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "support/error.h"

namespace rannc::runtime {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& params,
                                                        const OptimizerSettings& settings) {
  if (settings.kind == plan::Optimizer::kAdam && settings.weight_decay > 0) {
    return std::make_unique<torch::optim::AdamW>(params,
                                                 torch::optim::AdamWOptions(settings.lr).weight_decay(settings.weight_decay));
  }
  if (settings.kind == plan::Optimizer::kAdam)
    return std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(settings.lr));
  double momentum = settings.kind == plan::Optimizer::kMomentum ? kMomentum : 0.0;
  return std::make_unique<torch::optim::SGD>(
      params, torch::optim::SGDOptions(settings.lr).momentum(momentum).weight_decay(settings.weight_decay));
}

namespace {

// Calls visit(tensor piece, offset in range) for every part of `tensors`, laid end to end, that
// falls in elements [begin, begin + length).
template <typename Visit>
void for_each_piece(const std::vector<at::Tensor>& tensors, std::int64_t begin, std::int64_t length, Visit&& visit) {
  std::int64_t start = 0;
  for (const auto& tensor : tensors) {
    std::int64_t numel = tensor.numel();
    std::int64_t from = std::max(begin, start), to = std::min(begin + length, start + numel);
    if (from < to) visit(tensor.view({-1}).narrow(0, from - start, to - from), from - begin);
    start += numel;
  }
}

// Elements [begin, begin + length) of `tensors` laid end to end, zero-padded to `size`.
at::Tensor read_range(const std::vector<at::Tensor>& tensors, std::int64_t begin, std::int64_t length, std::int64_t size) {
  std::vector<at::Tensor> pieces;
  for_each_piece(tensors, begin, length, [&](const at::Tensor& piece, std::int64_t) { pieces.push_back(piece.detach()); });
  if (size > length) pieces.push_back(at::zeros({size - length}, tensors.front().options()));
  return at::cat(pieces);
}

void write_range(const std::vector<at::Tensor>& tensors, std::int64_t begin, const at::Tensor& source) {
  at::NoGradGuard no_grad;
  for_each_piece(tensors, begin, source.numel(), [&](const at::Tensor& piece, std::int64_t offset) {
    piece.copy_(source.narrow(0, offset, piece.numel()));
  });
}

}  // namespace

StateSync::StateSync(std::vector<at::Tensor> params, std::vector<std::string> names, std::vector<GradientGroup> groups,
                     Communicator& communicator, const OptimizerSettings& settings, std::int64_t bucket_bytes)
    : params_(std::move(params)),
      names_(std::move(names)),
      groups_(std::move(groups)),
      communicator_(communicator),
      settings_(settings) {
  std::set<int> sharded_weights;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    if (!group.sharded) continue;
    sharded_weights.insert(group.weights.begin(), group.weights.end());
    auto weights = group_tensors(group, false);
    std::int64_t elements = 0;
    for (const auto& weight : weights) elements += weight.numel();
    const auto replicas = static_cast<std::int64_t>(group.ranks.size());
    const auto me = static_cast<std::int64_t>(
        std::find(group.ranks.begin(), group.ranks.end(), communicator.rank()) - group.ranks.begin());
    // Every rank of the group cuts the same buckets: their bytes are the gradients' (fp32).
    std::int64_t element_bytes = weights.front().element_size();
    for (const auto& bucket : shard_buckets(elements, static_cast<int>(replicas), std::max<std::int64_t>(1, bucket_bytes / element_bytes))) {
      std::int64_t own_begin = std::min(me * bucket.chunk, bucket.length);
      std::int64_t own = std::min(bucket.chunk, bucket.length - own_begin);
      at::Tensor master = read_range(weights, bucket.begin + own_begin, own, bucket.chunk).clone().requires_grad_(true);
      master.mutable_grad() = at::zeros_like(master);
      shards_.push_back({static_cast<int>(g), bucket, bucket.begin + own_begin, own, master});
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (!sharded_weights.count(static_cast<int>(i))) stepped_.push_back(params_[i]);
  for (const auto& shard : shards_) stepped_.push_back(shard.master);
  // A whole group's summed gradients are on each of its ranks: the first one counts them.
  for (const auto& group : groups_) {
    if (group.sharded || !group.counted_in_norm || group.ranks.front() != communicator.rank()) continue;
    for (int w : group.weights) counted_.push_back(params_.at(static_cast<std::size_t>(w)));
  }
  for (const auto& shard : shards_)
    if (groups_.at(static_cast<std::size_t>(shard.group)).counted_in_norm) counted_.push_back(shard.master);
  optimizer_ = make_optimizer(stepped_, settings);
}

StateSync::~StateSync() = default;

std::vector<at::Tensor> StateSync::group_tensors(const GradientGroup& group, bool gradients) const {
  std::vector<at::Tensor> tensors;
  for (int w : group.weights) {
    const auto& param = params_.at(static_cast<std::size_t>(w));
    tensors.push_back(gradients ? param.grad() : param);
  }
  return tensors;
}

// One flat buffer per group, so each group is one allreduce.
void StateSync::sum_unsharded_gradients() {
  std::vector<at::Tensor> buffers(groups_.size());
  bool any = false;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].ranks.size() < 2 || groups_[g].sharded) continue;
    std::vector<at::Tensor> flat;
    for (const auto& grad : group_tensors(groups_[g], true)) flat.push_back(grad.reshape({-1}));
    buffers[g] = at::cat(flat);
    any = true;
  }
  if (!any) return;
  communicator_.sum_over_groups(buffers);
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (buffers[g].defined()) write_range(group_tensors(groups_[g], true), 0, buffers[g]);
}

// torch.nn.utils.clip_grad_norm_: the norm over every gradient element of the model, each
// counted once, then every gradient scaled by max_norm / (norm + 1e-6) if that is below 1.
double StateSync::clip_gradients() {
  double squares = 0;
  for (const auto& tensor : counted_) squares += tensor.grad().to(at::kDouble).pow(2).sum().item<double>();
  double norm = std::sqrt(communicator_.sum_over_world(squares));
  double coefficient = settings_.clip_grad_norm / (norm + 1e-6);
  if (coefficient < 1) {
    at::NoGradGuard no_grad;
    for (auto& tensor : stepped_) tensor.mutable_grad().mul_(coefficient);
  }
  return norm;
}

// Bucket by bucket, in the one global order of the groups, so at most one bucket is in flight.
double StateSync::step(int step) {
  sum_unsharded_gradients();
  for (auto& shard : shards_) {
    const auto& group = groups_[static_cast<std::size_t>(shard.group)];
    const auto size = static_cast<std::int64_t>(group.ranks.size()) * shard.bucket.chunk;
    auto gradients = read_range(group_tensors(group, true), shard.bucket.begin, shard.bucket.length, size);
    communicator_.reduce_scatter(shard.group, gradients, shard.master.mutable_grad());
  }
  double norm = settings_.clip_grad_norm > 0 ? clip_gradients() : 0;
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr_at(step));
  optimizer_->step();
  for (auto& shard : shards_) {
    const auto& group = groups_[static_cast<std::size_t>(shard.group)];
    auto gathered = at::empty({static_cast<std::int64_t>(group.ranks.size()) * shard.bucket.chunk}, shard.master.options());
    communicator_.all_gather(shard.group, shard.master.detach(), gathered);
    write_range(group_tensors(group, false), shard.bucket.begin, gathered.narrow(0, 0, shard.bucket.length));
  }
  return norm;
}

template <typename Visit>
void StateSync::for_each_weight_in(const Shard& shard, Visit&& visit) const {
  std::int64_t start = 0;
  for (int w : groups_.at(static_cast<std::size_t>(shard.group)).weights) {
    std::int64_t numel = params_.at(static_cast<std::size_t>(w)).numel();
    std::int64_t from = std::max(shard.own_begin, start), to = std::min(shard.own_begin + shard.own, start + numel);
    if (from < to) visit(static_cast<std::size_t>(w), from - start, from - shard.own_begin, to - from);
    start += numel;
  }
}

namespace {

at::Tensor step_tensor(std::int64_t step) { return at::scalar_tensor(static_cast<double>(step), at::kLong); }

at::Tensor shape_tensor(const at::Tensor& tensor) {
  auto sizes = tensor.sizes();
  return at::tensor(std::vector<std::int64_t>(sizes.begin(), sizes.end()), at::kLong);
}

}  // namespace

TensorDict StateSync::named_state() const {
  TensorDict named;
  std::set<int> sharded;
  for (const auto& shard : shards_) {
    auto state = param_state(*optimizer_, shard.master);
    if (!state) continue;
    for_each_weight_in(shard, [&](std::size_t w, std::int64_t at_weight, std::int64_t at_chunk, std::int64_t length) {
      const auto& name = names_[w];
      if (sharded.insert(static_cast<int>(w)).second) {
        named.emplace_back(name + ":step", step_tensor(state->step));
        named.emplace_back(name + ":shape", shape_tensor(params_[w]));
      }
      for (const auto& [field, tensor] : state->fields)
        named.emplace_back(name + ":" + field + "@" + std::to_string(at_weight), tensor.narrow(0, at_chunk, length).clone());
    });
  }
  for (std::size_t w = 0; w < params_.size(); ++w) {
    if (sharded.count(static_cast<int>(w))) continue;
    auto state = param_state(*optimizer_, params_[w]);
    if (!state) continue;
    named.emplace_back(names_[w] + ":step", step_tensor(state->step));
    for (const auto& [field, tensor] : state->fields) named.emplace_back(names_[w] + ":" + field, tensor);
  }
  return named;
}

bool StateSync::in_shards(std::size_t index) const {
  return std::any_of(groups_.begin(), groups_.end(), [&](const GradientGroup& group) {
    return group.sharded && std::count(group.weights.begin(), group.weights.end(), static_cast<int>(index)) > 0;
  });
}

template <typename Piece>
void StateSync::fill_shards(std::size_t index, std::int64_t step, Piece&& piece, const std::string& what) {
  if (state_fields(*optimizer_).empty()) return;  // plain SGD keeps no state
  for (const auto& shard : shards_) {
    for_each_weight_in(shard, [&](std::size_t w, std::int64_t at_weight, std::int64_t at_chunk, std::int64_t length) {
      if (w != index) return;
      // The chunk's state covers several weights: it starts at zeros, and each fills its part.
      if (!param_state(*optimizer_, shard.master)) {
        ParamState zeros{step, {}};
        for (const auto& field : state_fields(*optimizer_)) zeros.fields.emplace_back(field, at::zeros_like(shard.master));
        set_param_state(*optimizer_, shard.master, zeros, what);
      }
      at::NoGradGuard no_grad;
      auto chunk_state = param_state(*optimizer_, shard.master).value();
      for (auto& [field, tensor] : chunk_state.fields) tensor.narrow(0, at_chunk, length).copy_(piece(field, at_weight, length));
    });
  }
}

void StateSync::set_weight_state(std::size_t index, const ParamState& state, const std::string& what) {
  if (!in_shards(index)) {
    set_param_state(*optimizer_, params_.at(index), state, what);
    return;
  }
  fill_shards(index, state.step, [&](const std::string& field, std::int64_t at_weight, std::int64_t length) {
    auto given = std::find_if(state.fields.begin(), state.fields.end(), [&](const auto& f) { return f.first == field; });
    if (given == state.fields.end()) throw InputError(what + ": has no " + field + " in its optimizer state");
    if (given->second.numel() != params_[index].numel())
      throw InputError(what + ": its " + field + " has shape " + c10::str(given->second.sizes()) + ", the weight's is " +
                       c10::str(params_[index].sizes()));
    return given->second.reshape({-1}).narrow(0, at_weight, length);
  }, what);
}

void StateSync::load_named_state(const TensorDict& named, const std::string& what) {
  std::map<std::string, const at::Tensor*> by_key;
  for (const auto& [key, tensor] : named) by_key.emplace(key, &tensor);
  auto entry = [&](const std::string& key) -> const at::Tensor* {
    auto found = by_key.find(key);
    return found == by_key.end() ? nullptr : found->second;
  };
  auto required = [&](const std::string& key) -> const at::Tensor& {
    const at::Tensor* tensor = entry(key);
    if (!tensor) throw InputError(what + ": has no '" + key + "'");
    return *tensor;
  };
  for (std::size_t w = 0; w < params_.size(); ++w) {
    const at::Tensor* step = entry(names_[w] + ":step");
    if (!step) continue;  // not stepped yet, or none of it in this rank's shards
    if (!in_shards(w)) {
      ParamState state{step->item<std::int64_t>(), {}};
      for (const auto& field : state_fields(*optimizer_)) state.fields.emplace_back(field, required(names_[w] + ":" + field));
      set_param_state(*optimizer_, params_[w], state, what + ": '" + names_[w] + "'");
      continue;
    }
    fill_shards(w, step->item<std::int64_t>(), [&](const std::string& field, std::int64_t at_weight, std::int64_t length) {
      auto key = names_[w] + ":" + field + "@" + std::to_string(at_weight);
      const auto& piece = required(key);
      if (piece.numel() != length)
        throw InputError(what + ": '" + key + "' holds " + std::to_string(piece.numel()) + " elements, this rank's shard " +
                         std::to_string(length));
      return piece.reshape({-1});
    }, what);
  }
}

std::size_t StateSync::index_of(const std::string& name) const {
  return static_cast<std::size_t>(std::find(names_.begin(), names_.end(), name) - names_.begin());
}

double StateSync::lr_at(int step) const {
  return settings_.lr * lr_factor(settings_.schedule, step, settings_.warmup_steps, settings_.total_steps);
}

std::int64_t StateSync::stepped_elements() const {
  std::int64_t elements = 0;
  for (const auto& tensor : stepped_) elements += tensor.numel();
  return elements;
}

}  // namespace rannc::runtime
