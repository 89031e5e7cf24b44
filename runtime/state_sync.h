// The training state of one rank's stage across the ranks that hold the same weights: after the
// step's last backward the gradients are summed over each gradient group, then the optimizer
// steps. An unsharded group allreduces its gradients and every rank steps all of its weights. A
// sharded group (plan stages[i].state_sharding) cuts its weights into buckets and each bucket
// into one chunk per rank: the gradients are reduce-scattered, each rank steps only its chunks
// (so it keeps 1/n of the optimizer state, beside an fp32 master copy of those chunks), and the
// updated chunks are all-gathered back into every rank's weights. The optimizers are elementwise,
// so both give the same weights.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/options.h"
#include "runtime/communicator.h"
#include "runtime/lr_schedule.h"
#include "runtime/optimizer_state.h"
#include "runtime/rank_layout.h"
#include "torch_side/state_dict_file.h"

namespace torch::optim {
class Optimizer;
}

namespace rannc::runtime {

// As torch.optim does: Adam with weight decay is AdamW (decoupled), SGD's is L2; gradients are
// clipped by their global norm over every stage and replica (torch.nn.utils.clip_grad_norm_).
struct OptimizerSettings {
  plan::Optimizer kind = plan::Optimizer::kSgd;
  double lr = 0.01;
  LrSchedule schedule = LrSchedule::kConstant;
  int warmup_steps = 0, total_steps = 1;
  double weight_decay = 0;
  double clip_grad_norm = 0;  // 0: no clipping
};

constexpr double kMomentum = 0.9;  // --optimizer momentum: SGD with this momentum

// The optimizer `settings` name over `params` (their gradients in .grad()).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const std::vector<at::Tensor>& params, const OptimizerSettings& settings);

class StateSync {
 public:
  // `params` are the stage's trainable parameters in plan order, with their gradients, and
  // `names` theirs in the model; the optimizer updates them in place.
  StateSync(std::vector<at::Tensor> params, std::vector<std::string> names, std::vector<GradientGroup> groups,
            Communicator& communicator, const OptimizerSettings& settings, std::int64_t bucket_bytes);
  ~StateSync();

  // Sums the gradients, clips them, steps the optimizer at step `step`'s learning rate and brings
  // every copy of the weights up to date. Returns the global gradient norm before clipping (0
  // when not clipping).
  double step(int step);

  // The learning rate step `step` trains at.
  double lr_at(int step) const;

  // Whether every rank of the stage holds the same optimizer state (no sharded group), which
  // one rank may then save for all.
  bool replicated() const { return shards_.empty(); }
  // The optimizer state this rank keeps, by weight name (docs/contract.md, "Checkpoints"):
  // "NAME:FIELD" for a weight it steps whole (its tensor rank's slice of a split one),
  // "NAME:FIELD@OFFSET" for a piece of one in its shards (from element OFFSET of the weight laid
  // flat), "NAME:step" (0-dim int64) and, for a weight in shards, "NAME:shape" (its dims).
  TensorDict named_state() const;
  // Sets the optimizer state from what named_state gave under the same plan (the rank's own
  // checkpoint file; `what` names it in errors).
  void load_named_state(const TensorDict& named, const std::string& what);
  // Sets the optimizer state of parameter `index` from its whole state (the parameter's shape):
  // all of it, or the parts in this rank's shards.
  void set_weight_state(std::size_t index, const ParamState& state, const std::string& what);
  std::size_t index_of(const std::string& name) const;  // of a parameter; out of range when none

  // Elements of optimizer-stepped state this rank keeps (its shards, plus unsharded weights).
  std::int64_t stepped_elements() const;

 private:
  struct Shard {
    int group = 0;
    ShardBucket bucket;
    std::int64_t own_begin = 0, own = 0;  // this rank's chunk: elements of the group's weights laid end to end
    at::Tensor master;  // this rank's chunk of the bucket's weights (stepped by the optimizer)
  };
  std::vector<at::Tensor> group_tensors(const GradientGroup& group, bool gradients) const;
  void sum_unsharded_gradients();
  double clip_gradients();

  // Calls visit(weight index, offset in the weight, offset in the chunk, length) for each
  // weight's part in the shard's chunk.
  template <typename Visit>
  void for_each_weight_in(const Shard& shard, Visit&& visit) const;
  bool in_shards(std::size_t index) const;  // whether parameter `index` is in a sharded group
  // Sets parameter `index`'s parts of this rank's shards: piece(field, offset in the weight,
  // length) gives each as a 1-dim tensor.
  template <typename Piece>
  void fill_shards(std::size_t index, std::int64_t step, Piece&& piece, const std::string& what);

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<GradientGroup> groups_;
  Communicator& communicator_;
  std::vector<Shard> shards_;
  std::vector<at::Tensor> stepped_;  // what the optimizer steps: unsharded weights and shard masters
  std::vector<at::Tensor> counted_;  // the gradients this rank adds to the global norm, each element once in the world
  OptimizerSettings settings_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace rannc::runtime
