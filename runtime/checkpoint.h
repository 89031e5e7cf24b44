// rannc-run's checkpoints (plan/checkpoint.h has the folder's layout): --save writes one every
// --save-every steps and after the last; --resume continues from one, with the same losses as a
// run never stopped. One rank per stage and tensor rank (of the first replica of the first
// pipeline) writes what the stage's ranks of that tensor rank hold alike: the weights (its slices
// of the split ones), and the optimizer state when replicated; every rank writes its random state,
// and its shards of sharded state. A rank of an interleaved plan writes the weights of each of its
// model chunks under its stage's name, and one optimizer state over all of them under its first
// stage's (the state its ranks step together).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "plan/checkpoint.h"
#include "plan/plan.h"
#include "runtime/rank_layout.h"
#include "runtime/run_options.h"
#include "runtime/saved_checkpoint.h"

namespace rannc::runtime {

class MpiWorld;
class StageRunner;
class StateSync;

class CheckpointWriter {
 public:
  // `plan_sha256`: of the plan file's bytes; `optimizer`: the one training runs. The manifest
  // records both. `placement`: this rank's.
  CheckpointWriter(const RunOptions& options, const plan::Plan& plan, std::string plan_sha256, std::string optimizer,
                   Placement placement);

  // Whether a checkpoint is due once `steps_done` steps have trained.
  bool due(int steps_done) const;
  // Collective: every rank calls it. Writes DIR/step_N, then points DIR/latest at it. A failure
  // on any rank (a full disk) throws InputError on every rank, naming the rank; DIR/latest
  // still names the previous checkpoint.
  // `chunks`: the rank's model chunks, its first stage's first.
  void save(const MpiWorld& world, int steps_done, const std::vector<StageRunner*>& chunks, const StateSync& state) const;

 private:
  // Returns the names written, one per line.
  std::string write_rank_files(const std::string& folder, int rank, const std::vector<StageRunner*>& chunks,
                               const StateSync& state) const;
  void publish(const std::string& partial, int steps_done, std::vector<std::string> files) const;

  RunOptions options_;
  const plan::Plan& plan_;
  std::string plan_sha256_, optimizer_;
  Placement placement_;
};

// The checkpoint --resume names, checked against this run: the same model, optimizer, global
// batch and seed, and a step before --steps; InputError with one line otherwise. It may have been
// saved under another plan (other stages, replicas, tensor ranks, sharding): each rank then takes
// its part of the whole model's state (runtime/saved_checkpoint.h).
struct ResumePoint {
  std::unique_ptr<SavedCheckpoint> saved;
  bool same_plan = true;  // saved under this very plan (by SHA-256)
  int step() const { return saved->manifest().step; }
};
ResumePoint open_resume_point(const RunOptions& options, const plan::Plan& plan, const std::string& plan_sha256,
                              const std::string& optimizer);

// This rank's part: each chunk's weights and buffers (its tensor rank's slices) and the rank's
// random state, before the optimizer is made (sharded state starts from the weights); then its
// optimizer state (its shards of it).
// `placement`: the rank's.
void restore_stage(const ResumePoint& point, const plan::Plan& plan, Placement placement, int rank,
                   const std::vector<StageRunner*>& chunks);
void restore_optimizer(const ResumePoint& point, const plan::Plan& plan, Placement placement, int rank,
                       const std::vector<StageRunner*>& chunks, StateSync& state);

}  // namespace rannc::runtime
