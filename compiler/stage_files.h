// Writing the stage files of a plan (docs/contract.md "Stage files") beside plan.json.
#pragma once

#include <string>
#include <vector>

#include "compiler/model.h"
#include "emit/stage_layout.h"

namespace rannc {

// The SHA-256 of a stage's files as written: the stage's, and each tensor rank's (none when the
// stage has no TensorShard files).
struct StageHashes {
  std::string stage;
  std::vector<std::string> tensor_ranks;
};

// One TorchScript file per stage, and one per tensor rank of a stage its layout's TensorShard
// names files for, each written under a temporary name and renamed, so a failure leaves no
// half-written file (and no temporary). Returns the hashes in the order of `stages`, for
// plan.json. Throws InputError for an op without a mapping, weights that are not in the file (a
// shape-only model: plan it with --plan-only), or a file that cannot be written
// ("OUT/stage_1.pt: cannot write: No space left on device").
std::vector<StageHashes> write_stage_files(const Model& model, const std::vector<emit::StageLayout>& stages,
                                           const std::string& folder);

}  // namespace rannc
