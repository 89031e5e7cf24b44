#include "runtime/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <sstream>
#include <type_traits>

#include "support/error.h"

namespace rannc::runtime {
namespace {

// libtorch keys the state by the parameter's TensorImpl: 1.x as the pointer's text, 2.x as the
// pointer itself. The key type says which.
template <typename Map, typename Impl>
typename Map::key_type state_key(const Map&, Impl* impl) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream text;  // c10::guts::to_string's spelling of the pointer
    text << impl;
    return text.str();
  } else {
    return impl;
  }
}

template <typename State>
ParamState adam_state(const State& state) {
  return {state.step(), {{"exp_avg", state.exp_avg()}, {"exp_avg_sq", state.exp_avg_sq()}}};
}

const at::Tensor& field(const ParamState& state, const std::string& name, const at::Tensor& param, const std::string& what) {
  for (const auto& [field_name, tensor] : state.fields) {
    if (field_name != name) continue;
    if (tensor.sizes() != param.sizes())
      throw InputError(what + ": its " + name + " has shape " + c10::str(tensor.sizes()) + ", the weight's is " +
                       c10::str(param.sizes()));
    return tensor;
  }
  throw InputError(what + ": has no " + name + " in its optimizer state");
}

at::Tensor copied(const at::Tensor& tensor, const at::Tensor& like) {
  return tensor.to(like.options(), /*non_blocking=*/false, /*copy=*/true).contiguous();
}

template <typename State>
std::unique_ptr<State> new_adam_state(const ParamState& state, const at::Tensor& param, const std::string& what) {
  auto made = std::make_unique<State>();
  made->step(state.step);
  made->exp_avg(copied(field(state, "exp_avg", param, what), param));
  made->exp_avg_sq(copied(field(state, "exp_avg_sq", param, what), param));
  return made;
}

bool has_momentum(const torch::optim::SGD& sgd) {
  return static_cast<const torch::optim::SGDOptions&>(sgd.defaults()).momentum() != 0;
}

}  // namespace

std::vector<std::string> state_fields(const torch::optim::Optimizer& optimizer) {
  if (auto* sgd = dynamic_cast<const torch::optim::SGD*>(&optimizer)) {
    if (has_momentum(*sgd)) return {"momentum_buffer"};
    return {};
  }
  return {"exp_avg", "exp_avg_sq"};  // Adam, AdamW
}

std::optional<ParamState> param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  auto& states = optimizer.state();
  auto found = states.find(state_key(states, param.unsafeGetTensorImpl()));
  if (found == states.end()) return std::nullopt;
  const auto* state = found->second.get();
  if (auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(state)) return adam_state(*adam);
  if (auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(state)) return adam_state(*adamw);
  if (auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(state))
    return ParamState{0, {{"momentum_buffer", sgd->momentum_buffer()}}};
  throw std::logic_error("an optimizer state of a kind rannc-run does not make");
}

void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param, const ParamState& state,
                     const std::string& what) {
  auto& states = optimizer.state();
  auto key = state_key(states, param.unsafeGetTensorImpl());
  if (dynamic_cast<torch::optim::AdamW*>(&optimizer)) {
    states[key] = new_adam_state<torch::optim::AdamWParamState>(state, param, what);
  } else if (dynamic_cast<torch::optim::Adam*>(&optimizer)) {
    states[key] = new_adam_state<torch::optim::AdamParamState>(state, param, what);
  } else if (auto* sgd = dynamic_cast<torch::optim::SGD*>(&optimizer); sgd && has_momentum(*sgd)) {
    auto made = std::make_unique<torch::optim::SGDParamState>();
    made->momentum_buffer(copied(field(state, "momentum_buffer", param, what), param));
    states[key] = std::move(made);
  }
}

}  // namespace rannc::runtime
