// Checkpoints of rannc-run (docs/contract.md, "Checkpoints"). `--save DIR` writes each checkpoint
// as a folder DIR/step_<8 digits> (the steps trained so far) and then points DIR/latest at it; a
// folder holds a copy of the plan, the files below, and checkpoint.json, this manifest, written
// last: a folder without one is not a checkpoint. The manifest ties the files to the plan and
// model they were trained with, by SHA-256, so a checkpoint of another plan, or a file changed
// since, is refused rather than loaded.
//
// Files: stage_<i>.pt, the stage's weights and buffers by their model names (a state dict
// torch.load reads); stage_<i>.optimizer.pt, its optimizer state when every replica holds all of
// it, by weight name (runtime/state_sync.h, named_state); rank_<r>.pt, the rank's random state;
// rank_<r>.optimizer.pt, the rank's shards of a stage with sharded optimizer state. A tensor-parallel stage has both stage files once per
// tensor rank, stage_<i>_tp<t>.pt and stage_<i>_tp<t>.optimizer.pt: the rank's slices of the
// split weights (plan/tensor_slices.h), the other weights whole, and the state of those.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "plan/plan.h"

namespace rannc::plan {

// The manifest's format version: 2 since the optimizer state is held by weight name (1 held
// libtorch's archive of each rank's optimizer, which only that rank's plan could read).
inline constexpr int kCheckpointVersion = 2;

struct CheckpointManifest {
  int version = kCheckpointVersion;
  int step = 0;  // steps trained: training resumes at this step
  std::string plan_sha256, model_sha256;
  std::string optimizer;  // the optimizer whose state the files hold
  std::uint64_t seed = 0;
  int accumulate_steps = 1;  // global batches per step: with `step`, where the data resumes
  std::map<std::string, std::string> files;  // file name in the folder -> SHA-256
};

inline constexpr const char* kCheckpointManifestFile = "checkpoint.json";
inline constexpr const char* kLatestCheckpointFile = "latest";
inline constexpr const char* kCheckpointPlanFile = "plan.json";

std::string checkpoint_folder_name(int step);  // "step_00000006"
// What the stage's ranks of `tensor_rank` hold alike (every replica the same values): its
// weights and buffers, and its optimizer state when replicated.
std::string stage_weights_file(const Stage& stage, int tensor_rank);
std::string stage_optimizer_file(const Stage& stage, int tensor_rank);
std::string rank_state_file(int rank);
std::string rank_optimizer_file(int rank);

// `path` as given to --resume or export: a checkpoint folder, or a --save folder whose `latest`
// names one. Returns the checkpoint folder; InputError "WHAT PATH: ..." when it is neither.
std::string find_checkpoint(const std::string& path, const std::string& what);

// The manifest of a checkpoint folder (of format version 1 or 2); InputError naming it when
// missing or malformed.
CheckpointManifest read_checkpoint_manifest(const std::string& folder);
std::string checkpoint_manifest_json(const CheckpointManifest& manifest);

// The path of `file` in the checkpoint, after checking it is listed and its bytes are those the
// manifest records; InputError "FOLDER/FILE: ..." otherwise.
std::string checked_checkpoint_file(const std::string& folder, const CheckpointManifest& manifest,
                                    const std::string& file);

}  // namespace rannc::plan
