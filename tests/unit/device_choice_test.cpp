// rannc-run --device: where each rank computes and which backend carries its tensors, for GPU
// counts and node sizes this machine does not have (runtime/device_choice.h).
#include <catch2/catch.hpp>

#include "runtime/device_choice.h"
#include "support/error.h"

namespace rannc::runtime {
namespace {

DeviceFacts gpus(int count, int local_rank, int local_size) {
  DeviceFacts facts;
  facts.plan_on_gpu = true;
  facts.gpus = count;
  facts.built_with_cuda = true;
  facts.nccl_built = true;
  facts.local_rank = local_rank;
  facts.local_size = local_size;
  return facts;
}

TEST_CASE("auto: the CPU without GPUs or for a CPU plan, else GPU local_rank modulo the count", "[runtime]") {
  CHECK_FALSE(choose_device("auto", gpus(0, 0, 4)).cuda);
  auto cpu_plan = gpus(8, 0, 4);
  cpu_plan.plan_on_gpu = false;
  CHECK_FALSE(choose_device("auto", cpu_plan).cuda);
  CHECK(device_choice_text(choose_device("auto", cpu_plan)) == "cpu");
  auto third = choose_device("auto", gpus(8, 3, 8));
  CHECK(third.cuda);
  CHECK(third.gpu == 3);
  CHECK(third.nccl);
  CHECK(device_choice_text(third) == "cuda:3 (NCCL)");
  CHECK(choose_device("auto", gpus(2, 3, 4)).gpu == 1);
}

TEST_CASE("ranks sharing a GPU, or a build without NCCL, use Gloo through host memory", "[runtime]") {
  auto shared = choose_device("auto", gpus(1, 2, 4));
  CHECK(shared.cuda);
  CHECK(shared.gpu == 0);
  CHECK_FALSE(shared.nccl);
  CHECK(device_choice_text(shared) == "cuda:0 (Gloo through host memory)");
  auto no_nccl = gpus(4, 1, 4);
  no_nccl.nccl_built = false;
  CHECK_FALSE(choose_device("auto", no_nccl).nccl);
  CHECK(choose_device("auto", gpus(1, 0, 1)).nccl);  // one rank alone on one GPU
}

TEST_CASE("rannc-run --device: cpu stays on the CPU, cuda without a GPU and unknown values are errors", "[runtime]") {
  CHECK_FALSE(choose_device("cpu", gpus(8, 0, 1)).cuda);
  auto cpu_plan = gpus(1, 0, 1);
  cpu_plan.plan_on_gpu = false;
  CHECK(choose_device("cuda", cpu_plan).cuda);  // forced, whatever the plan's device
  CHECK_THROWS_WITH(choose_device("cuda", gpus(0, 0, 1)), "--device cuda: no CUDA GPU is visible to this process");
  auto cpu_build = gpus(0, 0, 1);
  cpu_build.built_with_cuda = false;
  CHECK_THROWS_WITH(choose_device("cuda", cpu_build),
                    "--device cuda: this rannc-run was built without GPU support (docs/gpu.md)");
  CHECK_THROWS_AS(choose_device("gpu", gpus(1, 0, 1)), InputError);
}

}  // namespace
}  // namespace rannc::runtime
