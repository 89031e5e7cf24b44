// The baseline of the runtime overhead bench: a plain libtorch training loop of a TorchScript
// model (forward on the whole batch, cross entropy, backward, SGD step), reading the same .npy
// data as rannc-run. Prints one line per step: "step N loss L ms T".
//
// usage: plain_training_loop MODEL DATA_DIR BATCH STEPS LR INPUT_NAME...
#include <torch/script.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <iostream>

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
  auto module = torch::jit::load(argv[1]);
  std::vector<at::Tensor> params;
  for (const auto& p : module.parameters()) params.push_back(p);
  torch::optim::SGD optimizer(params, torch::optim::SGDOptions(std::stod(argv[5])));
  std::deque<rannc::runtime::NpyFile> inputs;  // a deque: an open file does not move
  for (int i = 6; i < argc; ++i) inputs.emplace_back(data + "/" + argv[i] + ".npy");
  rannc::runtime::NpyFile target(data + "/target.npy");
  for (int step = 0; step < steps; ++step) {
    auto start = std::chrono::steady_clock::now();
    std::vector<c10::IValue> args;
    for (auto& input : inputs) args.emplace_back(read_batch(input, batch, step));
    auto labels = read_batch(target, batch, step);
    optimizer.zero_grad();
    auto output = module.forward(args).toTensor();
    auto loss = at::cross_entropy_loss(output.reshape({-1, output.size(-1)}), labels.reshape({-1}));
    loss.backward();
    optimizer.step();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::printf("step %d loss %.6f ms %.3f\n", step, loss.item<double>(), ms);
  }
  return 0;
}
