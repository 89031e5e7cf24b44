// The samples of each step: model inputs and the loss target, read from --data's .npy files or
// drawn from --seed. The data set is cut into steps of the global batch, in order or, with
// --shuffle, in an order drawn per epoch from --seed (data_order.h); a run longer than the data
// set starts it over, an epoch at a time. Every rank opens and checks all files at start, so a
// bad file is one error for the whole job; during training a rank reads only its own rows of
// the arrays its stage consumes: its replica's slice of each of its pipeline's microbatches.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/plan_json.h"
#include "runtime/npy_file.h"
#include "runtime/data_order.h"
#include "runtime/rank_layout.h"
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
  // this rank reads. `microbatch_rows`: the rank's samples of each microbatch, within a step.
  TrainingData(const RunOptions& options, std::int64_t global_batch, std::vector<SampleSpec> arrays,
               std::vector<std::string> needed, std::vector<SampleRange> microbatch_rows);
  ~TrainingData();

  // Reads or draws the rank's rows of the step, of every needed array.
  void load_step(std::int64_t step);  // step: of global batches (optimizer steps x accumulated batches)
  // Microbatch `microbatch`'s rows of an array, the batch along the array's batch_dim.
  const at::Tensor& rows(const std::string& name, int microbatch) const {
    return batches_.at(name).at(static_cast<std::size_t>(microbatch));
  }
  std::int64_t bytes_read() const;  // from --data's files so far

 private:
  at::Tensor read(std::size_t array, std::int64_t step, const SampleRange& range);
  at::Tensor draw(std::size_t array, std::int64_t step) const;

  RunOptions options_;
  std::int64_t global_batch_;
  std::vector<SampleSpec> arrays_;
  std::vector<std::string> needed_;
  std::vector<SampleRange> microbatch_rows_;
  std::map<std::string, std::unique_ptr<NpyFile>> files_;
  std::unique_ptr<DataOrder> order_;  // --data: which file row each sample of a step is
  std::map<std::string, std::vector<at::Tensor>> batches_;  // per array, per microbatch
};

}  // namespace rannc::runtime
