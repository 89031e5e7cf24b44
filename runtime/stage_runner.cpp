#include "runtime/stage_runner.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

#include <algorithm>
#include <optional>

#include "runtime/memory_tracker.h"
#include "torch_side/autocast_scope.h"
#include "torch_side/device_constants.h"
#include "torch_side/recompute_cores.h"
#include "torch_side/tensor_rank_slices.h"
#include "torch_side/torch_error.h"

namespace rannc::runtime {
namespace {

// Stage files are saved on the CPU; they load onto the device, where their factory calls
// create tensors too (device_constants.h).
std::unique_ptr<torch::jit::Module> load_stage(const std::string& path, const c10::Device& device) {
  // Stage files run as saved: the optimizing executor would re-specialize them to the first
  // shapes and profile every call.
  torch::jit::setGraphExecutorOptimize(false);
  try {
    std::unique_ptr<torch::jit::Module> module;
    {
      // The source and debug records the module keeps are the program's memory, not tensors.
      UncountedAllocations loading;
      module = std::make_unique<torch::jit::Module>(torch::jit::load(path, device));
    }
    for (const auto& attribute : module->named_attributes(/*recurse=*/true))
      if (attribute.value.isTensor()) count_tensor_memory(attribute.value.toTensor());
    retarget_device_constants(*module, device);
    return module;
  } catch (const c10::Error& e) {
    throw InputError(path + ": cannot load the stage file: " + torch_message(e));
  }
}

at::Tensor stage_parameter(const torch::jit::Module& module, const std::string& path, const plan::Weight& weight) {
  if (!module.hasattr(weight.stage_name) || !module.attr(weight.stage_name).isTensor()) {
    throw InputError(path + ": has no parameter '" + weight.stage_name + "' (the plan's '" + weight.name + "')");
  }
  return module.attr(weight.stage_name).toTensor();
}

}  // namespace

StageRunner::StageRunner(const plan::Plan& plan, const plan::Stage& stage, c10::Device device, int tensor_rank)
    : stage_(stage),
      tensor_rank_(tensor_rank),
      device_(device),
      module_(load_stage(plan.stage_path(stage, tensor_rank), device)),
      bf16_autocast_(plan.precision == plan::Precision::kBf16Mixed) {
  for (const auto& weight : stage.params) {
    auto param = stage_parameter(*module_, plan.stage_path(stage, tensor_rank), weight);
    // Offloaded: the optimizer's copy lives in host memory; each step runs on a device copy.
    if (stage.offload) param = param.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
    params_.push_back(param);
  }
  make_gradients();
}

// The gradients are views of one buffer per dtype, so that zeroing them is one kernel, not one
// per weight: launches that bound a small model's step on a GPU. They persist between steps, as
// the plan's memory counts them. (An offloaded stage's device copies take fresh ones each step,
// begin_step.) Nothing may replace a gradient with a tensor of its own, nor detach it in place
// (torch::optim::Optimizer::zero_grad does): it would leave the buffer.
void StageRunner::make_gradients() {
  std::map<c10::ScalarType, std::int64_t> elements;
  for (const auto& param : params_) elements[param.scalar_type()] += param.numel();
  for (const auto& [type, count] : elements) {
    auto buffer = at::zeros({count}, params_.front().options().dtype(type));
    std::int64_t offset = 0;
    for (auto& param : params_) {
      if (param.scalar_type() != type) continue;
      param.mutable_grad() = buffer.narrow(0, offset, param.numel()).view(param.sizes());
      offset += param.numel();
    }
    gradient_buffers_.push_back(buffer);
  }
}

StageRunner::~StageRunner() = default;

std::vector<at::Tensor> StageRunner::run_forward(const std::vector<at::Tensor>& inputs) {
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  // A selective stage's file calls its attention cores through rannc::recompute_core, which
  // checkpoints them in this scope: they keep only their inputs until backward runs them again.
  std::optional<tp::CoreRecomputation> cores;
  if (stage_.recompute == plan::Recompute::kSelective) cores.emplace();
  // The plan's bf16-mixed precision: ops run under libtorch's autocast for the device, which
  // computes the matrix products and convolutions in bfloat16 from the fp32 weights (the master
  // copy the optimizer steps), as torch.autocast(device, dtype=torch.bfloat16) does. Backward runs
  // outside, through the casts autograd recorded.
  AutocastScope autocast(bf16_autocast_, device_.type());
  auto result = module_->forward(args);
  std::vector<at::Tensor> outputs;
  for (const auto& element : result.toTupleRef().elements()) outputs.push_back(element.toTensor());
  return outputs;
}

// The device copies are leaves of their own: every microbatch's gradients add up on the device,
// and go to the host parameters once, after the step's last backward.
void StageRunner::begin_step() {
  if (!stage_.offload) return;
  device_params_.clear();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    auto copy = params_[i].detach().to(device_, /*non_blocking=*/false, /*copy=*/true).requires_grad_(true);
    copy.mutable_grad() = at::zeros_like(copy);
    module_->setattr(stage_.params[i].stage_name, copy);
    device_params_.push_back(copy);
    offload_bytes_ += static_cast<std::int64_t>(params_[i].nbytes());
  }
}

void StageRunner::end_step() {
  if (!stage_.offload) return;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    params_[i].mutable_grad().copy_(device_params_[i].grad());
    offload_bytes_ += static_cast<std::int64_t>(params_[i].grad().nbytes());
    module_->setattr(stage_.params[i].stage_name, params_[i]);
  }
  device_params_.clear();
}

std::vector<at::Tensor> StageRunner::forward(int microbatch, std::vector<at::Tensor> inputs, at::Tensor& loss_sum) {
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    auto& input = inputs[k];
    input = input.detach().to(device_);
    // The model's own inputs (samples) take no gradient: asking for one would run, say, a first
    // convolution's backward over the images for nothing.
    bool model_input = k < stage_.inputs.size() && stage_.inputs[k].model_input;
    if (at::isFloatingType(input.scalar_type()) && !model_input) input.requires_grad_(true);
  }
  auto add_loss = [&](const at::Tensor& loss) {
    at::Tensor value = loss.detach().to(at::kDouble);
    loss_sum = loss_sum.defined() ? loss_sum + value : value;
  };
  Microbatch state;
  if (recomputes()) {
    at::NoGradGuard no_grad;
    state.random_state = tp::random_state(device_);  // dropout draws the same masks in backward
    state.outputs = run_forward(inputs);
    if (loss_) add_loss(loss_(state.outputs, microbatch));
  } else {
    state.outputs = run_forward(inputs);
    if (loss_) {
      state.loss = loss_(state.outputs, microbatch);
      add_loss(state.loss);
    }
  }
  auto outputs = state.outputs;
  if (recomputes()) state.outputs.clear();  // only the inputs stay in flight
  state.inputs = std::move(inputs);
  in_flight_[microbatch] = std::move(state);
  return outputs;
}

std::vector<at::Tensor> StageRunner::backward(int microbatch, const std::vector<at::Tensor>& output_grads) {
  auto node = in_flight_.extract(microbatch);
  if (node.empty()) throw std::logic_error("backward of microbatch " + std::to_string(microbatch) + " before its forward");
  auto& state = node.mapped();
  if (recomputes()) {
    tp::ReplayedRandomState replayed(device_, state.random_state);
    state.outputs = run_forward(state.inputs);
    if (loss_) state.loss = loss_(state.outputs, microbatch);
  }
  std::vector<at::Tensor> roots, grads;
  for (std::size_t i = 0; i < state.outputs.size(); ++i) {
    if (i < output_grads.size() && output_grads[i].defined() && state.outputs[i].requires_grad()) {
      roots.push_back(state.outputs[i]);
      // fp32 on the wire, bf16 under autocast
      grads.push_back(output_grads[i].to(state.outputs[i].device(), state.outputs[i].scalar_type()));
    }
  }
  if (state.loss.defined() && state.loss.requires_grad()) {  // a stage of no weights may have none
    roots.push_back(state.loss);
    grads.push_back(at::ones_like(state.loss));
  }
  if (!roots.empty()) torch::autograd::backward(roots, grads);
  std::vector<at::Tensor> input_grads;
  for (const auto& input : state.inputs) input_grads.push_back(input.requires_grad() ? input.grad() : at::Tensor());
  return input_grads;
}

TensorDict StageRunner::state() const {
  TensorDict tensors;
  for (std::size_t i = 0; i < params_.size(); ++i) tensors.emplace_back(stage_.params[i].name, params_[i]);
  for (const auto& buffer : stage_.buffers) tensors.emplace_back(buffer.name, module_->attr(buffer.stage_name).toTensor());
  return tensors;
}

void StageRunner::load_state(const TensorDict& tensors, const std::string& source) {
  std::map<std::string, const at::Tensor*> by_name;
  for (const auto& [name, tensor] : tensors) by_name.emplace(name, &tensor);
  auto set = [&](const plan::Weight& weight, at::Tensor target, bool required) {
    auto found = by_name.find(weight.name);
    if (found == by_name.end() && !required) return;
    if (found == by_name.end())
      throw InputError(source + ": has no '" + weight.name + "' (of stage " + std::to_string(stage_.id) + ")");
    const at::Tensor& value = *found->second;
    if (value.sizes() != target.sizes()) {
      throw InputError(source + ": '" + weight.name + "' has shape " + c10::str(value.sizes()) + ", the model's is " +
                       c10::str(target.sizes()));
    }
    at::NoGradGuard no_grad;
    target.copy_(value);
  };
  for (std::size_t i = 0; i < params_.size(); ++i) set(stage_.params[i], params_[i], true);
  // A state_dict leaves out the buffers registered as not persistent: those keep their values.
  for (const auto& buffer : stage_.buffers) set(buffer, module_->attr(buffer.stage_name).toTensor(), false);
}

void StageRunner::load_model_state(const TensorDict& tensors, const std::string& source) {
  TensorDict held;
  for (const auto& [name, tensor] : tensors) held.emplace_back(name, rank_part(name, tensor, source));
  load_state(held, source);
}

at::Tensor StageRunner::rank_part(const std::string& name, const at::Tensor& whole, const std::string& source) const {
  const auto* split = stage_.tensor_parallel.split_of(name);
  auto param = std::find_if(stage_.params.begin(), stage_.params.end(), [&](const auto& weight) { return weight.name == name; });
  if (!split || param == stage_.params.end()) return whole;
  const auto& held = params_.at(static_cast<std::size_t>(param - stage_.params.begin()));
  // Checked here, where the whole shape is known: load_state would name only the slices'.
  bool splits_so = whole.dim() > split->dim && whole.size(split->dim) % split->groups == 0;
  auto part = splits_so ? rank_slices(whole, *split, stage_.tensor_parallel.degree, tensor_rank_) : at::Tensor();
  if (!splits_so || part.sizes() != held.sizes()) {
    throw InputError(source + ": '" + name + "' has shape " + c10::str(whole.sizes()) + ", whose slices along dim " +
                     std::to_string(split->dim) + " are not the " + c10::str(held.sizes()) + " tensor rank " +
                     std::to_string(tensor_rank_) + " of " + std::to_string(stage_.tensor_parallel.degree) + " holds");
  }
  return part;
}

void StageRunner::zero_gradients() {
  for (auto& buffer : gradient_buffers_) buffer.zero_();
}

}  // namespace rannc::runtime
