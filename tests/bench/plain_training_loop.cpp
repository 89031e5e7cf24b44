// The baseline of the runtime overhead bench: a plain libtorch training loop of a TorchScript
// model (forward on the whole batch, cross entropy, backward, SGD step), reading the same .npy
// data as rannc-run. Prints one line per step: "step N loss L data D passes P optimizer O wait W ms T",
// the host's phases as rannc-run's report names them (host_ms), then the whole step. With RANNC_DEVICE=cuda it
// trains on the first GPU (fp32 without TF32, as rannc-run), each step ending when its loss is
// read, as rannc-run's does. With RANNC_PLAIN_OPTIMIZE=0 the TorchScript executor does not
// optimize (specialize, fuse, differentiate) the graph, as rannc-run runs its stages.
//
// usage: plain_training_loop MODEL DATA_DIR BATCH STEPS LR INPUT_NAME...
#include <torch/script.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/optim/sgd.h>

#include <ATen/Context.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>

#include "torch_side/device_constants.h"
#include "torch_side/torch_dtype.h"
#include "runtime/npy_file.h"

namespace {

at::Tensor read_batch(rannc::runtime::NpyFile& file, std::int64_t batch, int step) {
  auto bytes = file.read_rows(step * batch, batch);
  std::vector<std::int64_t> shape = file.shape();
  shape[0] = batch;
  auto type = *rannc::ir::to_scalar_type(file.dtype());
  return at::from_blob(bytes.data(), shape, at::TensorOptions().dtype(type)).clone();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::cerr << "usage: plain_training_loop MODEL DATA_DIR BATCH STEPS LR INPUT_NAME...\n";
    return 2;
  }
  std::string data = argv[2];
  std::int64_t batch = std::stoll(argv[3]);
  int steps = std::stoi(argv[4]);
  const char* device_choice = std::getenv("RANNC_DEVICE");
  c10::Device device(device_choice && std::strcmp(device_choice, "cuda") == 0 ? "cuda:0" : "cpu");
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
  const char* optimize = std::getenv("RANNC_PLAIN_OPTIMIZE");
  if (optimize && std::strcmp(optimize, "0") == 0) torch::jit::setGraphExecutorOptimize(false);
  auto module = torch::jit::load(argv[1], device);
  rannc::retarget_device_constants(module, device);
  std::vector<at::Tensor> params;
  for (const auto& p : module.parameters()) params.push_back(p);
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(std::stod(argv[5])));
  std::deque<rannc::runtime::NpyFile> inputs;  // a deque: an open file does not move
  for (int i = 6; i < argc; ++i) inputs.emplace_back(data + "/" + argv[i] + ".npy");
  rannc::runtime::NpyFile target(data + "/target.npy");
  for (int step = 0; step < steps; ++step) {
    auto start = std::chrono::steady_clock::now();
    auto lap = start;
    auto lap_ms = [&lap] {
      auto now = std::chrono::steady_clock::now();
      double ms = std::chrono::duration<double, std::milli>(now - lap).count();
      lap = now;
      return ms;
    };
    std::vector<c10::IValue> args;
    for (auto& input : inputs) args.emplace_back(read_batch(input, batch, step).to(device));
    auto labels = read_batch(target, batch, step).to(device);
    double data_ms = lap_ms();
    optimizer.zero_grad();
    auto output = module.forward(args).toTensor();
    auto loss = at::cross_entropy_loss(output.reshape({-1, output.size(-1)}), labels.reshape({-1}));
    loss.backward();
    double passes_ms = lap_ms();
    optimizer.step();
    double optimizer_ms = lap_ms();
    double value = loss.item<double>();
    double wait_ms = lap_ms();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    // The host's phases as rannc-run's report names them (host_ms), then the step.
    std::printf("step %d loss %.6f data %.3f passes %.3f optimizer %.3f wait %.3f ms %.3f\n", step, value, data_ms,
                passes_ms, optimizer_ms, wait_ms, ms);
  }
  return 0;
}
