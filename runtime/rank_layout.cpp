#include "runtime/rank_layout.h"

#include <algorithm>
#include <map>
#include <set>

#include "support/error.h"

namespace rannc::runtime {
namespace {

// The samples two slices have in common, as offsets into each of them.
bool overlap(SampleRange a, SampleRange b, SampleRange& in_a, SampleRange& in_b) {
  auto begin = std::max(a.begin, b.begin);
  auto end = std::min(a.begin + a.length, b.begin + b.length);
  if (begin >= end) return false;
  in_a = {begin - a.begin, end - begin};
  in_b = {begin - b.begin, end - begin};
  return true;
}

void check_batch_reduced_sends(const plan::Plan& plan) {
  for (const auto& stage : plan.stages) {
    for (const auto& input : stage.inputs) {
      if (input.model_input || input.batch_dim >= 0) continue;
      const auto& sender = plan.stages.at(static_cast<std::size_t>(input.from_stage));
      if (sender.replicas_per_pipeline > 1) {
        throw InputError(plan.path + ": stage " + std::to_string(sender.id) + " has " +
                         std::to_string(sender.replicas_per_pipeline) + " replicas but sends '" + input.name +
                         "', which has no batch dim: a batch-reduced value cannot be split among replicas");
      }
    }
  }
}

}  // namespace

// A stage's ranks are its tensor-parallel groups one after another (consecutive ranks), the
// groups its replicas in pipeline order. A rank is placed by its device group's first stage.
RankLayout::RankLayout(const plan::Plan& plan) : plan_(plan), placements_(plan.ranks.size()) {
  for (int first = 0; first < plan.pipeline_stages(); ++first) {
    const auto& stage = plan.stages[static_cast<std::size_t>(first)];
    int degree = stage.tensor_parallel.degree, per_pipeline = stage.replicas_per_pipeline;
    for (std::size_t i = 0; i < stage.ranks.size(); ++i) {
      int group = static_cast<int>(i) / degree;
      placements_.at(static_cast<std::size_t>(stage.ranks[i])) = {stage.id, group / per_pipeline, group % per_pipeline,
                                                                   static_cast<int>(i) % degree};
    }
  }
  check_batch_reduced_sends(plan);
}

int RankLayout::rank_of(int stage, int pipeline, int replica, int tensor_rank) const {
  const auto& s = plan_.stages.at(static_cast<std::size_t>(stage));
  int group = pipeline * s.replicas_per_pipeline + replica;
  return s.ranks.at(static_cast<std::size_t>(group * s.tensor_parallel.degree + tensor_rank));
}

std::vector<int> RankLayout::stages_of(int rank) const {
  std::vector<int> stages;
  for (int stage = placement(rank).stage; stage < plan_.stage_count(); stage += plan_.pipeline_stages())
    stages.push_back(stage);
  return stages;
}

std::vector<GradientGroup> RankLayout::rank_gradient_groups(int rank) const {
  std::map<std::string, GradientGroup> by_key;
  int offset = 0;  // the chunk's first parameter among the rank's
  for (int stage : stages_of(rank)) {
    for (auto group : gradient_groups(stage, placement(rank).tensor_rank)) {
      for (int& weight : group.weights) weight += offset;
      // Its copies would each be summed with the other ranks' alone, not with each other.
      if (!by_key.emplace(group.key, group).second)
        throw InputError(plan_.path + ": rank " + std::to_string(rank) + " holds a weight tied between two of its " +
                         "model chunks (" + group.key + "), which rannc-run does not train yet");
    }
    offset += static_cast<int>(plan_.stages[static_cast<std::size_t>(stage)].params.size());
  }
  std::vector<GradientGroup> groups;
  for (auto& [key, group] : by_key) groups.push_back(std::move(group));
  return groups;
}

std::vector<int> RankLayout::tensor_group(int rank) const {
  auto at = placement(rank);
  int degree = plan_.stages.at(static_cast<std::size_t>(at.stage)).tensor_parallel.degree;
  std::vector<int> group;
  for (int t = 0; t < degree; ++t) group.push_back(rank_of(at.stage, at.pipeline, at.replica, t));
  return group;
}

SampleRange RankLayout::replica_slice(int stage, int replica) const {
  auto [first, length] = plan_.stages.at(static_cast<std::size_t>(stage)).replica_rows(replica, plan_.batch.microbatch_size);
  return {first, length};
}

std::vector<SampleRange> RankLayout::step_rows(Placement placement) const {
  auto slice = replica_slice(placement.stage, placement.replica);
  std::vector<SampleRange> rows;
  for (int i = 0; i < plan_.batch.microbatches; ++i)
    rows.push_back({microbatch_start(placement.pipeline, i) + slice.begin, slice.length});
  return rows;
}

std::int64_t RankLayout::microbatch_start(int pipeline, int microbatch) const {
  return (static_cast<std::int64_t>(pipeline) * plan_.batch.microbatches + microbatch) * plan_.batch.microbatch_size;
}

// The pieces between this replica's slice and every replica of `other` that shares samples with
// it (all of them for an unbatched tensor, whose ranges stay empty).
std::vector<Piece> RankLayout::pieces(SampleRange mine, bool mine_sends, int other, bool batched) const {
  std::vector<Piece> list;
  int replicas = plan_.stages.at(static_cast<std::size_t>(other)).replicas_per_pipeline;
  for (int k = 0; k < replicas; ++k) {
    Piece piece{k, {}, {}};
    auto theirs = replica_slice(other, k);
    bool shared = batched && (mine_sends ? overlap(mine, theirs, piece.at_sender, piece.at_receiver)
                                         : overlap(theirs, mine, piece.at_sender, piece.at_receiver));
    if (!batched || shared) list.push_back(piece);
  }
  return list;
}

std::vector<Piece> RankLayout::pieces_to(int from, int replica, int to, bool batched) const {
  return pieces(replica_slice(from, replica), true, to, batched);
}

std::vector<Piece> RankLayout::pieces_from(int to, int replica, int from, bool batched) const {
  return pieces(replica_slice(to, replica), false, from, batched);
}

std::vector<ShardBucket> shard_buckets(std::int64_t elements, int ranks, std::int64_t bucket_elements) {
  std::vector<ShardBucket> buckets;
  for (std::int64_t begin = 0; begin < elements; begin += bucket_elements) {
    std::int64_t length = std::min(bucket_elements, elements - begin);
    buckets.push_back({begin, length, (length + ranks - 1) / ranks});
  }
  return buckets;
}

std::vector<GradientGroup> RankLayout::gradient_groups(int stage, int tensor_rank) const {
  const auto& held = plan_.stages.at(static_cast<std::size_t>(stage));
  const auto& params = held.params;
  const auto& split = held.tensor_parallel.weights;
  // Weights that share the same set of holding stages are summed over the same ranks; in a
  // tensor-parallel stage, those the group splits apart from those each of its ranks holds whole.
  std::map<std::pair<std::set<int>, bool>, std::vector<int>> by_holders;
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::set<int> holders(params[i].shared_with.begin(), params[i].shared_with.end());
    holders.insert(stage);
    bool whole = std::none_of(split.begin(), split.end(), [&](const auto& w) { return w.name == params[i].name; });
    by_holders[{holders, whole}].push_back(static_cast<int>(i));
  }
  std::vector<GradientGroup> groups;
  for (auto& [holding, weights] : by_holders) {
    const auto& [holders, whole] = holding;
    GradientGroup group;
    group.key = "stages";
    std::set<int> ranks;
    for (int s : holders) {
      group.key += (s == *holders.begin() ? " " : ",") + std::to_string(s);
      const auto& holder = plan_.stages.at(static_cast<std::size_t>(s));
      std::size_t degree = static_cast<std::size_t>(holder.tensor_parallel.degree);
      for (std::size_t i = static_cast<std::size_t>(tensor_rank); i < holder.ranks.size(); i += degree)
        ranks.insert(holder.ranks[i]);
      group.sharded = group.sharded || holder.state_sharding != plan::StateSharding::kNone;
    }
    if (held.tensor_parallel.degree > 1) {
      group.key += " tensor rank " + std::to_string(tensor_rank) + (whole ? ", whole" : "");
      // Every rank of the tensor group holds the same whole weights: one of them counts them.
      group.counted_in_norm = !whole || tensor_rank == 0;
    }
    group.ranks.assign(ranks.begin(), ranks.end());
    group.sharded = group.sharded && group.ranks.size() > 1;
    // Every holder lists its copies in the same order, so the summed buffers line up.
    std::sort(weights.begin(), weights.end(), [&](int a, int b) { return params[a].name < params[b].name; });
    group.weights = weights;
    groups.push_back(group);
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.key < b.key; });
  return groups;
}

}  // namespace rannc::runtime
