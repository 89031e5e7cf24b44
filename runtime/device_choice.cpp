#include "runtime/device_choice.h"

#include "support/error.h"

namespace rannc::runtime {

DeviceChoice choose_device(const std::string& flag, const DeviceFacts& facts) {
  if (flag != "auto" && flag != "cuda" && flag != "cpu")
    throw InputError("--device " + flag + ": must be auto, cuda or cpu");
  DeviceChoice choice;
  if (flag == "cpu") return choice;
  if (flag == "cuda" && facts.gpus < 1) {
    throw InputError(facts.built_with_cuda ? "--device cuda: no CUDA GPU is visible to this process"
                                           : "--device cuda: this rannc-run was built without GPU support (docs/gpu.md)");
  }
  if (flag == "auto" && (!facts.plan_on_gpu || facts.gpus < 1)) return choice;
  choice.cuda = true;
  choice.gpu = facts.local_rank % facts.gpus;
  choice.nccl = facts.nccl_built && facts.local_size <= facts.gpus;
  return choice;
}

std::string device_choice_text(const DeviceChoice& choice) {
  if (!choice.cuda) return "cpu";
  return "cuda:" + std::to_string(choice.gpu) + (choice.nccl ? " (NCCL)" : " (Gloo through host memory)");
}

}  // namespace rannc::runtime
