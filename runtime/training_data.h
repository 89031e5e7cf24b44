// The samples of each step: model inputs and the loss target, read from --data's .npy files
// (dim 0 = steps x global batch, cut in order) or drawn from --seed. Every rank opens and
// checks all files at start, so a bad file is one error for the whole job; during training
// a rank reads only what its stage consumes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/plan_json.h"
#include "runtime/npy_file.h"
#include "runtime/run_options.h"

namespace rannc::runtime {

// One array of a step: its name, the dtype and per-sample shape training needs, where the
// batch dim goes, and for integers the bound of random values.
struct SampleSpec {
  std::string name;
  ir::DType dtype = ir::DType::kFloat32;
  std::vector<std::int64_t> sample_shape;  // without the batch dim
  int batch_dim = 0;
  std::int64_t index_bound = 2;
};

class TrainingData {
 public:
  // `arrays`: the model inputs, then the target (when the loss needs one). `needed`: the names
  // this rank reads.
  TrainingData(const RunOptions& options, std::int64_t global_batch, std::vector<SampleSpec> arrays,
               std::vector<std::string> needed);
  ~TrainingData();

  // Reads or draws the step's global batch of every needed array.
  void load_step(int step);
  const at::Tensor& batch(const std::string& name) const { return batches_.at(name); }

 private:
  at::Tensor read(std::size_t array, int step);
  at::Tensor draw(std::size_t array, int step) const;

  RunOptions options_;
  std::int64_t global_batch_;
  std::vector<SampleSpec> arrays_;
  std::vector<std::string> needed_;
  std::map<std::string, std::unique_ptr<NpyFile>> files_;
  std::map<std::string, at::Tensor> batches_;
};

}  // namespace rannc::runtime
