// Selective recomputation (plan::Recompute::kSelective) of the attention cores of a stage file.
// The stage writers move each attention core (partitioner/tensor_regions.h,
// TensorRegion::attention_core) of a selective stage into a method of its own, core_<k>, which
// forward calls through the operator rannc::recompute_core(self, "core_<k>", [its tensor inputs]).
// Inside a CoreRecomputation scope the operator is a checkpoint, as torch.utils.checkpoint is
// one: it runs the method without autograd, keeps only its inputs, and in backward runs it again
// with the forward's random state (dropout draws the same mask) and autocast, then back-propagates
// through it. Outside a scope (verify, partition's check of the files, Python) it calls the method
// as plain TorchScript would, with the same values and gradients. libtorch 1.13 has no C++
// saved-tensor hooks and TorchScript no autograd.Function, hence a C++ operator. Built into
// librannc_tensor_parallel.so with the tensor-parallel collectives, which the plugin and
// rannc-run both load.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <string>

namespace rannc::tp {

// The operator as a stage file's forward calls it, (Any module, str method, Tensor[] inputs) -> Tensor[].
inline constexpr const char* kRecomputeCore = "rannc::recompute_core";

// The name of core k's method in a stage module.
inline std::string core_method(int k) { return "core_" + std::to_string(k); }

// While alive, the calling thread's rannc::recompute_core calls checkpoint their cores. rannc-run
// opens one around a selective stage's forward.
class CoreRecomputation {
 public:
  CoreRecomputation();
  ~CoreRecomputation();
  CoreRecomputation(const CoreRecomputation&) = delete;
  CoreRecomputation& operator=(const CoreRecomputation&) = delete;

 private:
  bool was_on_;
};

// The state of the random generator the ops on `device` draw from (dropout's masks).
at::Tensor random_state(const c10::Device& device);

// While alive, the generator of `device` is in `state` (a random_state() taken before a forward);
// afterwards it is back where it was: a forward run again in backward draws what it drew the
// first time, and the draws after it are unchanged.
class ReplayedRandomState {
 public:
  ReplayedRandomState(const c10::Device& device, const at::Tensor& state);
  ~ReplayedRandomState();
  ReplayedRandomState(const ReplayedRandomState&) = delete;
  ReplayedRandomState& operator=(const ReplayedRandomState&) = delete;

 private:
  c10::Device device_;
  at::Tensor outer_;
};

}  // namespace rannc::tp
