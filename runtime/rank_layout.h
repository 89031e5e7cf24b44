// Where each rank sits in a plan (stage, pipeline, replica), which samples of a microbatch each
// stage replica handles, how a tensor travels between stages with different replica counts, and
// which ranks sum which gradients. Pure arithmetic over the plan: no torch, no communication.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plan/plan_json.h"

namespace rannc::runtime {

struct Placement {
  int stage = 0, pipeline = 0, replica = 0;  // replica: within the pipeline
  int tensor_rank = 0;  // its place in the replica's tensor-parallel group (plan::TensorParallel)
};

// A run of samples along a tensor's batch dim.
struct SampleRange {
  std::int64_t begin = 0, length = 0;
};

// One part of a tensor sent between two stage replicas: where it sits in the sender's slice
// and in the receiver's slice.
struct Piece {
  int peer_replica = 0;  // the replica, in the same pipeline, at the other end
  SampleRange at_sender, at_receiver;
};

// The ranks that hold copies of the same weights and sum their gradients: every replica of a
// stage, in every pipeline, plus the stages a tied weight is shared with; in tensor-parallel
// stages, those of one tensor rank (the weights a group replicates get the same gradient on each
// of its ranks: their inputs' gradients are all-reduced).
struct GradientGroup {
  std::string key;               // "stages 0,4": names the group in the rendezvous store
  std::vector<int> ranks;        // ascending
  std::vector<int> weights;      // indices into this rank's stage params, ordered by name
  // The ranks split the optimizer state of these weights (any holding stage shards its state,
  // and there is more than one rank): each steps its shard of every bucket.
  bool sharded = false;
  // Whether these ranks count the weights in the global gradient norm: not on tensor ranks
  // 1.. for weights every rank of a tensor-parallel group holds whole (rank 0 counts them).
  bool counted_in_norm = true;
};

// A bucket of a sharded group's weights, laid end to end in group order: elements
// [begin, begin + length), cut into one chunk per rank of the group (the last one padded):
// rank i of the group owns [begin + i * chunk, begin + min((i + 1) * chunk, length)).
struct ShardBucket {
  std::int64_t begin = 0, length = 0, chunk = 0;
};
// Consecutive buckets of at most `bucket_elements` (at least 1) covering `elements`.
std::vector<ShardBucket> shard_buckets(std::int64_t elements, int ranks, std::int64_t bucket_elements);

class RankLayout {
 public:
  // Throws InputError when the plan cannot run as laid out (e.g. a batch-reduced tensor sent by
  // several replicas, which has no single value to send).
  explicit RankLayout(const plan::Plan& plan);

  Placement placement(int rank) const { return placements_.at(static_cast<std::size_t>(rank)); }
  int rank_of(int stage, int pipeline, int replica, int tensor_rank = 0) const;
  // The ranks of a rank's tensor-parallel group, ascending (itself alone without one).
  std::vector<int> tensor_group(int rank) const;
  // The stages a rank runs, in model order: its device group's first stage, and with interleave
  // v > 1 the v - 1 stages p, 2p, ... after it (its model chunks).
  std::vector<int> stages_of(int rank) const;
  int world_size() const { return static_cast<int>(placements_.size()); }

  // The samples of one microbatch that a replica of `stage` handles.
  SampleRange replica_slice(int stage, int replica) const;
  // The first sample, within a step's global batch, of a pipeline's microbatch.
  std::int64_t microbatch_start(int pipeline, int microbatch) const;
  // The samples of a step a rank's stage takes from the model inputs: per microbatch of its
  // pipeline, its replica's slice.
  std::vector<SampleRange> step_rows(Placement placement) const;

  // What a replica of stage `from` sends of a tensor to the replicas of stage `to` (forward), or
  // receives back from them (backward). A tensor without a batch dim goes whole to every replica.
  std::vector<Piece> pieces_to(int from, int replica, int to, bool batched) const;
  // What a replica of stage `to` receives from the replicas of stage `from`.
  std::vector<Piece> pieces_from(int to, int replica, int from, bool batched) const;

  // The gradient groups a stage's ranks of one tensor rank belong to, in one global order (by
  // key): each tensor rank holds its own slices, and sums them with the ranks of its tensor rank.
  std::vector<GradientGroup> gradient_groups(int stage, int tensor_rank = 0) const;
  // The gradient groups of all of a rank's stages, in the global order (by key), their weights
  // indexing the rank's parameters as its chunks list them one after another. InputError for a
  // weight tied between two of its chunks.
  std::vector<GradientGroup> rank_gradient_groups(int rank) const;

 private:
  std::vector<Piece> pieces(SampleRange mine, bool mine_sends, int other, bool batched) const;

  const plan::Plan& plan_;
  std::vector<Placement> placements_;
};

}  // namespace rannc::runtime
