#include "torch_side/recompute_cores.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/library.h>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "torch_side/autocast_scope.h"

namespace rannc::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using ModuleObject = c10::intrusive_ptr<c10::ivalue::Object>;

thread_local bool recomputing_cores = false;

// The core's method on the inputs: it returns a tuple of tensors.
variable_list call_core(const ModuleObject& module, const std::string& method, const variable_list& inputs) {
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  c10::IValue result = torch::jit::Module(module).get_method(method)(std::move(args));
  variable_list outputs;
  for (const auto& element : result.toTupleRef().elements()) outputs.push_back(element.toTensor());
  return outputs;
}

// Whether the core draws random numbers (dropout): only then is the generator's state worth
// keeping (mt19937's is 5 KiB on the CPU, as much as a small core's activations).
bool draws_random(const ModuleObject& module, const std::string& method) {
  auto graph = torch::jit::Module(module).get_method(method).graph();
  for (const auto* node : graph->nodes())
    if (node->isNondeterministic()) return true;
  return false;
}

// The generator a core's random ops on `device` draw from (dropout's mask).
at::Generator generator_of(const c10::Device& device) {
  return device.is_cpu() ? at::detail::getDefaultCPUGenerator() : at::globalContext().defaultGenerator(device);
}

void set_random_state(const c10::Device& device, const at::Tensor& state) {
  auto generator = generator_of(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

struct CheckpointedCore : torch::autograd::Function<CheckpointedCore> {
  // Runs without autograd, as a Function's forward does: nothing inside is kept.
  static variable_list forward(AutogradContext* ctx, const ModuleObject& module, const std::string& method,
                               at::TensorList inputs) {
    const c10::Device device = inputs.front().device();
    ctx->saved_data["module"] = module;
    ctx->saved_data["method"] = method;
    ctx->saved_data["device"] = device;
    if (draws_random(module, method)) ctx->saved_data["random_state"] = random_state(device);
    ctx->saved_data["autocast"] = AutocastScope::enabled(device.type());
    ctx->saved_data["autocast_dtype"] = AutocastScope::autocast_dtype(device.type());
    ctx->save_for_backward(inputs.vec());
    return call_core(module, method, inputs.vec());
  }

  // Runs the core again with autograd on detached inputs, then its backward: the gradients of the
  // weights it reads add up on them, those of the inputs are returned.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list inputs;
    for (const auto& saved : ctx->get_saved_variables())
      inputs.push_back(saved.detach().requires_grad_(saved.requires_grad()));
    variable_list outputs = run_again(ctx, inputs);
    variable_list roots, root_grads;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].requires_grad() || !grads.at(i).defined()) continue;
      roots.push_back(outputs[i]);
      root_grads.push_back(grads[i]);
    }
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    variable_list input_grads{at::Tensor(), at::Tensor()};  // the module's and the method name's
    for (const auto& input : inputs) input_grads.push_back(input.requires_grad() ? input.grad() : at::Tensor());
    return input_grads;
  }

  static variable_list run_again(AutogradContext* ctx, const variable_list& inputs) {
    const c10::Device device = ctx->saved_data["device"].toDevice();
    std::optional<ReplayedRandomState> random;
    if (ctx->saved_data.count("random_state")) random.emplace(device, ctx->saved_data["random_state"].toTensor());
    AutocastScope autocast(ctx->saved_data["autocast"].toBool(), device.type(),
                           ctx->saved_data["autocast_dtype"].toScalarType());
    at::AutoGradMode grad(true);
    return call_core(ctx->saved_data["module"].toObject(), ctx->saved_data["method"].toStringRef(), inputs);
  }
};

bool needs_gradient(const variable_list& inputs) {
  for (const auto& input : inputs)
    if (input.requires_grad()) return true;
  return false;
}

variable_list recompute_core(const ModuleObject& module, const std::string& method, const variable_list& inputs) {
  // Without a scope, or where backward will not run, the core is the method as written.
  if (!recomputing_cores || !at::GradMode::is_enabled() || !needs_gradient(inputs))
    return call_core(module, method, inputs);
  return CheckpointedCore::apply(module, method, at::TensorList(inputs));
}

// Boxed: the schema's Any argument (the stage module) has no unboxed C++ type.
void recompute_core_kernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  auto inputs = torch::jit::pop(*stack).toTensorVector();
  std::string method = torch::jit::pop(*stack).toStringRef();
  c10::IValue module = torch::jit::pop(*stack);
  if (!module.isObject() || inputs.empty())
    throw std::invalid_argument(std::string(kRecomputeCore) + " takes a stage module and the core's tensor inputs");
  torch::jit::push(*stack, c10::IValue(recompute_core(module.toObject(), method, inputs)));
}

}  // namespace

at::Tensor random_state(const c10::Device& device) {
  auto generator = generator_of(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

ReplayedRandomState::ReplayedRandomState(const c10::Device& device, const at::Tensor& state)
    : device_(device), outer_(random_state(device)) {
  set_random_state(device_, state);
}

ReplayedRandomState::~ReplayedRandomState() { set_random_state(device_, outer_); }

CoreRecomputation::CoreRecomputation() : was_on_(recomputing_cores) { recomputing_cores = true; }
CoreRecomputation::~CoreRecomputation() { recomputing_cores = was_on_; }

}  // namespace rannc::tp

TORCH_LIBRARY_FRAGMENT(rannc, m) { m.def("recompute_core(Any module, str method, Tensor[] inputs) -> Tensor[]"); }

TORCH_LIBRARY_IMPL(rannc, CompositeImplicitAutograd, m) {
  m.impl("recompute_core", torch::CppFunction::makeFromBoxedFunction<&rannc::tp::recompute_core_kernel>());
}
