#include "runtime/state_sync.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

#include "support/error.h"
#include "torch_side/torch_error.h"

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

StateSync::StateSync(std::vector<at::Tensor> params, std::vector<GradientGroup> groups, Communicator& communicator,
                     const OptimizerSettings& settings, std::int64_t bucket_bytes)
    : params_(std::move(params)), groups_(std::move(groups)), communicator_(communicator), settings_(settings) {
  std::set<int> in_shards;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const auto& group = groups_[g];
    if (!group.sharded) continue;
    in_shards.insert(group.weights.begin(), group.weights.end());
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
      shards_.push_back({static_cast<int>(g), bucket, master});
    }
  }
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (!in_shards.count(static_cast<int>(i))) stepped_.push_back(params_[i]);
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

std::string StateSync::optimizer_bytes() const {
  torch::serialize::OutputArchive archive;
  optimizer_->save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  return bytes.str();
}

void StateSync::load_optimizer(const std::string& path) {
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    optimizer_->load(archive);
  } catch (const c10::Error& e) {
    throw InputError(path + ": cannot load the optimizer state: " + torch_message(e));
  }
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
