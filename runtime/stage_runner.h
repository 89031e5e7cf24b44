// One rank's stage: the TorchScript stage file, run forward and backward microbatch by microbatch,
// with the plan's recomputation and CPU offload. The optimizer is StateSync's (state_sync.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/plan_json.h"

#include "torch_side/state_dict_file.h"

namespace torch::jit {
struct Module;
}

namespace rannc::runtime {

// The training loss of a microbatch from the stage's outputs (only the stage that holds the
// model output the loss is taken of has one).
using LossFunction = std::function<at::Tensor(const std::vector<at::Tensor>& outputs, int microbatch)>;

class StageRunner {
 public:
  // Loads the stage file onto `device` (the CPU, or a GPU): a tensor-parallel stage's file of
  // `tensor_rank`. Throws InputError naming it when it cannot be loaded or lacks a parameter the
  // plan names.
  StageRunner(const plan::Plan& plan, const plan::Stage& stage, c10::Device device = c10::Device(c10::DeviceType::CPU),
              int tensor_rank = 0);
  ~StageRunner();

  void set_loss(LossFunction loss) { loss_ = std::move(loss); }
  int stage_id() const { return stage_.id; }

  // Where the stage computes: inputs and output gradients are moved there; outputs and input
  // gradients are there.
  const c10::Device& device() const { return device_; }

  // Runs the forward pass of a microbatch on its inputs and keeps what backward needs (all
  // activations; only the inputs under full recomputation; all but the attention cores' under
  // selective recomputation). Returns the outputs, and adds
  // the microbatch's loss to `loss_sum` (a detached scalar on the device, made at the first)
  // when the stage has a loss: read once at the step's end, since reading it here would make
  // the host wait for the forward's kernels before it issues anything more.
  std::vector<at::Tensor> forward(int microbatch, std::vector<at::Tensor> inputs, at::Tensor& loss_sum);
  // Runs backward from the gradients of the outputs (undefined: none) plus the loss, adds the
  // parameter gradients up, frees the microbatch and returns the gradients of the inputs
  // (undefined for inputs that have none).
  std::vector<at::Tensor> backward(int microbatch, const std::vector<at::Tensor>& output_grads);

  // The trainable parameters in plan order (the host copies when offloaded), with their
  // gradients summed over the step so far: what the optimizer updates in place.
  const std::vector<at::Tensor>& parameters() const { return params_; }
  void zero_gradients();

  // Offloaded stages: before the step's first pass, copy the weights to the device; after its
  // last backward, copy the summed gradients back to the host parameters and drop the copies.
  // Nothing for other stages.
  void begin_step();
  void end_step();

  // The stage's weights and buffers by their names in the model (the host copies when offloaded;
  // on the device otherwise).
  TensorDict state() const;
  // Sets them from `tensors` (a checkpoint or a PyTorch state_dict, `source` names it), which
  // must hold each weight by name with its shape (a buffer it lacks keeps its value); InputError
  // naming `source` and the tensor otherwise.
  void load_state(const TensorDict& tensors, const std::string& source);
  // The same from the whole model's state_dict (--init): a tensor-parallel stage takes its tensor
  // rank's slices of the split weights (plan/tensor_slices.h).
  void load_model_state(const TensorDict& tensors, const std::string& source);
  // The whole model's tensor `name` (or one of the same shape, as its optimizer state) as this
  // rank holds it: its slices of a split weight, else whole.
  at::Tensor rank_part(const std::string& name, const at::Tensor& whole, const std::string& source) const;
  // Whether the stage holds `name` as a weight or buffer; its weights in plan order.
  bool holds(const std::string& name) const { return stage_.holds(name); }
  const std::vector<plan::Weight>& weights() const { return stage_.params; }

  std::int64_t offload_bytes() const { return offload_bytes_; }  // copied between host and device so far

 private:
  struct Microbatch {
    std::vector<at::Tensor> inputs, outputs;
    at::Tensor loss;
    at::Tensor random_state;  // full recomputation: the generator's state before the forward
  };

  std::vector<at::Tensor> run_forward(const std::vector<at::Tensor>& inputs);
  // Whether backward runs the whole forward again (full recomputation). A selective stage's
  // forward keeps its activations but its attention cores' (torch_side/recompute_cores.h).
  bool recomputes() const { return stage_.recompute == plan::Recompute::kFull; }
  void make_gradients();

  const plan::Stage& stage_;
  int tensor_rank_;
  c10::Device device_;
  std::unique_ptr<torch::jit::Module> module_;
  std::vector<at::Tensor> params_;  // the trainable parameters the optimizer updates (host copies when offloaded)
  std::vector<at::Tensor> gradient_buffers_;  // their gradients are views of these (make_gradients)
  std::vector<at::Tensor> device_params_;  // offloaded: this step's device copies
  bool bf16_autocast_;  // the plan's precision is bf16-mixed
  LossFunction loss_;
  std::map<int, Microbatch> in_flight_;
  std::int64_t offload_bytes_ = 0;
};

}  // namespace rannc::runtime
