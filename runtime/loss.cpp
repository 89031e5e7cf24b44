#include "runtime/loss.h"

#include <ATen/core/Reduction.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/mse_loss.h>

#include "plan/tensor_slices.h"
#include "support/error.h"
#include "torch_side/tensor_parallel_ops.h"

namespace rannc::runtime {
namespace {

// The first model output, in stage order, is the one the loss is taken of.
std::pair<int, int> loss_output(const plan::Plan& plan) {
  for (const auto& stage : plan.stages)
    for (std::size_t o = 0; o < stage.outputs.size(); ++o)
      if (stage.outputs[o].model_output) return {stage.id, static_cast<int>(o)};
  throw InputError(plan.path + ": no stage has a model output to take the loss of");
}

}  // namespace

LossPlan plan_loss(const plan::Plan& plan, const std::string& loss_option) {
  LossPlan loss;
  std::tie(loss.stage, loss.output) = loss_output(plan);
  const auto& output = plan.stages[loss.stage].outputs[loss.output];
  if (output.shape.empty()) {
    if (!loss_option.empty())
      throw InputError("--loss " + loss_option + ": the model's output '" + output.name + "' is already a scalar loss");
    loss.kind = "scalar";
    return loss;
  }
  if (loss_option.empty()) {
    throw InputError("the model's output '" + output.name +
                     "' is not a scalar: give --loss cross_entropy or --loss mse (with target.npy in --data)");
  }
  if (loss_option != "cross_entropy" && loss_option != "mse")
    throw InputError("--loss '" + loss_option + "' is not cross_entropy or mse");
  if (output.batch_dim != 0) {
    throw InputError("--loss " + loss_option + ": the model's output '" + output.name +
                     "' does not have its batch along dim 0");
  }
  loss.kind = loss_option;
  loss.split_classes = plan::split_logits(plan.stages[loss.stage], static_cast<std::size_t>(loss.output));
  if (loss.split_classes && loss.kind != "cross_entropy")
    throw InputError("--loss " + loss.kind + ": the model's output '" + output.name +
                     "' is split by vocabulary over a tensor-parallel group, whose loss is the parallel cross entropy "
                     "(--loss cross_entropy)");
  SampleSpec target;
  target.name = "target";
  target.sample_shape.assign(output.shape.begin() + 1, output.shape.end());
  if (loss.kind == "cross_entropy") {
    if (target.sample_shape.empty())
      throw InputError("--loss cross_entropy: the model's output '" + output.name + "' has no class dim after the batch");
    target.index_bound = target.sample_shape.back();  // classes: the output's last dim
    target.sample_shape.pop_back();
    target.dtype = ir::DType::kInt64;
  }
  for (auto dim : target.sample_shape) loss.elements_per_sample *= dim;
  loss.target = target;
  return loss;
}

LossFunction loss_function(const LossPlan& loss, const plan::Plan& plan, const RankLayout& layout,
                           Placement placement, const TrainingData& data, int accumulate_steps) {
  auto slice = layout.replica_slice(placement.stage, placement.replica);
  double samples = static_cast<double>(plan.batch.global) * accumulate_steps;
  double global_terms = samples * static_cast<double>(loss.elements_per_sample);
  const auto& stage = plan.stages[static_cast<std::size_t>(loss.stage)];
  // Split classes: the first of this rank's slice, cut as the output layer's weight is (a
  // split output has its classes last; a scalar loss has no dims).
  std::int64_t first_class = 0;
  if (loss.split_classes)
    first_class = plan::tensor_slice(stage.outputs[static_cast<std::size_t>(loss.output)].shape.back(),
                                     stage.tensor_parallel.degree, placement.tensor_rank)
                      .begin;
  return [&loss, &data, slice, global_terms, samples, first_class](
             const std::vector<at::Tensor>& outputs, int microbatch) -> at::Tensor {
    // In fp32 when autocast computed the output in bf16, as torch.autocast's cross entropy does.
    auto output = outputs.at(static_cast<std::size_t>(loss.output));
    if (output.scalar_type() == at::kBFloat16 || output.scalar_type() == at::kHalf) output = output.to(at::kFloat);
    // A scalar output is taken to be a mean over its slice: weighted by the slice's share.
    if (loss.kind == "scalar") return output.mul(static_cast<double>(slice.length) / samples);
    auto target = data.rows("target", microbatch).to(output.device());
    if (loss.kind == "mse") return at::mse_loss(output, target, at::Reduction::Sum).div(global_terms);
    auto classes = output.size(-1);
    if (loss.split_classes)
      return tp::vocab_parallel_cross_entropy_sum(output.reshape({-1, classes}), target.reshape({-1}), first_class)
          .div(global_terms);
    return at::cross_entropy_loss(output.reshape({-1, classes}), target.reshape({-1}), {}, at::Reduction::Sum)
        .div(global_terms);
  };
}

}  // namespace rannc::runtime
