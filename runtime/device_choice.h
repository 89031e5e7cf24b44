// Where a rank computes (rannc-run --device): the plan's device kind, the GPUs this process
// sees and its place among the ranks of its node decide it. Plain C++, unit-tested without torch
// or a GPU; run.cpp feeds it what accelerator.h reports.
#pragma once

#include <string>

namespace rannc::runtime {

struct DeviceChoice {
  bool cuda = false;  // else the CPU
  int gpu = 0;        // cuda: the GPU's index
  bool nccl = false;  // cuda: NCCL carries the tensors (this rank's GPU is its own); else Gloo
};

struct DeviceFacts {
  bool plan_on_gpu = false;  // the plan's device is a GPU (any preset but "cpu")
  int gpus = 0;              // CUDA GPUs this process can use (0: none, or a build without GPU support)
  bool built_with_cuda = false;
  bool nccl_built = false;
  int local_rank = 0;        // among the ranks of this node (MpiWorld::local_rank: MPI's shared-memory split,
                             // not a launcher's environment variable)
  int local_size = 1;        // ranks of this node (MpiWorld::local_size)
};

// `flag` is "auto" (a GPU when the plan's device is one and a GPU is here; else the CPU), "cuda"
// or "cpu". A node's ranks take its GPUs in turn (local rank modulo the count); NCCL only when no
// two of them share one, else Gloo. Throws InputError for an unknown flag, or "cuda" without a GPU.
DeviceChoice choose_device(const std::string& flag, const DeviceFacts& facts);

// "cpu", "cuda:1 (NCCL)", "cuda:0 (Gloo through host memory)".
std::string device_choice_text(const DeviceChoice& choice);

}  // namespace rannc::runtime
