// One parameter's optimizer state out of a torch::optim optimizer and back in, by the names
// torch.optim gives its fields, so that a checkpoint holds it by the model's weight names rather
// than in libtorch's archive (which knows parameters only by their order in one optimizer): a run
// of another plan, whose ranks hold other weights in another order, can then take it up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace torch::optim {
class Optimizer;
}

namespace rannc::runtime {

// Adam's and AdamW's state: the step count, exp_avg and exp_avg_sq; SGD with momentum's:
// momentum_buffer (its step is 0). Plain SGD keeps none. Each field has the parameter's shape.
struct ParamState {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, at::Tensor>> fields;
};

// The fields an optimizer keeps per parameter, in order; empty for plain SGD.
std::vector<std::string> state_fields(const torch::optim::Optimizer& optimizer);

// The state of `param` (one of the optimizer's parameters), none before its first step.
std::optional<ParamState> param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param);

// Sets it; each of state_fields must be in `state` with the parameter's shape (InputError naming
// `what` otherwise). The tensors are copied.
void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param, const ParamState& state,
                     const std::string& what);

}  // namespace rannc::runtime
