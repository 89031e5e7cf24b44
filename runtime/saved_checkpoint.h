// A checkpoint read back as the whole model's tensors, whatever plan wrote it: its stages' weights
// and buffers with a tensor-parallel stage's slices joined, and each weight's optimizer state
// joined from the files of the replicas, shards and tensor ranks that held it. A rank of any plan
// of the same model takes from here what it holds (its stage's tensors, its tensor rank's slices,
// its shards), so --resume continues under another plan than the one saved (docs/contract.md,
// "Checkpoints").
//
// Read one saved stage at a time: besides what the rank keeps, one saved stage's weights files
// (all its tensor ranks') and the whole tensors of the wanted weights it holds are in memory, and
// one optimizer file at a time (an interleaved rank's holds all its chunks, and is read again for
// each of them).
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/checkpoint.h"
#include "plan/plan.h"
#include "runtime/optimizer_state.h"

namespace rannc::runtime {

// The entry of a rank's random state file (rank_<r>.pt) that holds libtorch's CPU generator.
inline constexpr const char* kRandomStateKey = "cpu_generator";

class SavedCheckpoint {
 public:
  // Reads the plan saved with it (plan.json, checked against the manifest).
  SavedCheckpoint(std::string folder, plan::CheckpointManifest manifest);

  const std::string& folder() const { return folder_; }
  const plan::CheckpointManifest& manifest() const { return manifest_; }
  const plan::Plan& plan() const { return plan_; }  // the plan it was trained under

  // Calls take(name, whole tensor) once for each name of `wanted` the saved stages hold as a
  // weight or buffer. InputError naming the file when one lacks a tensor its stage holds.
  using TakeTensor = std::function<void(const std::string& name, const at::Tensor& whole)>;
  void read_weights(const std::set<std::string>& wanted, const TakeTensor& take) const;

  // Calls take(name, whole state) once for each weight of `wanted` that has optimizer state
  // (none before the first step, nor for plain SGD). InputError when a file is malformed or a
  // weight's shards do not cover it.
  using TakeState = std::function<void(const std::string& name, const ParamState& whole)>;
  void read_optimizer_state(const std::set<std::string>& wanted, const TakeState& take) const;

  // The random state rank `rank` saved; none when the saved plan had no such rank.
  std::optional<at::Tensor> random_state(int rank) const;

 private:
  struct OptimizerFile {
    std::string file;
    std::vector<int> stages;  // the saving rank's model chunks
    int tensor_rank = 0;
  };
  std::string checked(const std::string& file) const;  // its path, after the manifest's check
  std::vector<OptimizerFile> optimizer_files() const;

  std::string folder_;
  plan::CheckpointManifest manifest_;
  plan::Plan plan_;
};

}  // namespace rannc::runtime
