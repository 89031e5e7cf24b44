#include "partitioner/shared_stage.h"

#include <algorithm>
#include <limits>

#include "cost_model/comm.h"

namespace rannc::partition {
namespace {

// Kind k's part of a shared stage as a one-kind config: its D_k replicas per pipeline, each with
// `samples` samples of the microbatch.
SearchConfig kind_part(const SearchConfig& config, const KindSegment& segment, int samples) {
  SearchConfig part = config;
  part.segments.clear();
  part.pipeline_devices = segment.devices;
  part.microbatch_size = samples * segment.devices;
  part.stages = 1;
  part.tensor_degree = 1;
  part.state_copies = config.pipelines * config.pipeline_devices;
  return part;
}

// Each replica of every kind and pipeline, as the placement numbers them.
std::vector<int> shared_ranks(const cost::Cluster& cluster, const SearchConfig& config) {
  std::vector<int> ranks;
  for (const auto& segment : config.segments)
    for (int p = 0; p < config.pipelines; ++p)
      for (int i = 0; i < segment.devices; ++i)
        ranks.push_back(cluster.first_rank_of_kind(segment.kind) + p * segment.devices + i);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Every way the segments' replicas share the microbatch: samples per replica, in segment order,
// each a size the kind's blocks were costed at.
void enumerate_shares(const SearchContext& context, const SearchConfig& config, std::size_t segment, int left,
                      std::vector<int>& samples, std::vector<std::vector<int>>& shares) {
  const KindSegment& part = config.segments[segment];
  const auto& costed = context.of_kind(part.kind).blocks->samples;
  auto allowed = [&](int s) { return s <= kMaxSharedSamples && std::binary_search(costed.begin(), costed.end(), s); };
  if (shares.size() >= kMaxShares) return;
  if (segment + 1 == config.segments.size()) {
    if (left % part.devices == 0 && allowed(left / part.devices)) {
      samples.push_back(left / part.devices);
      shares.push_back(samples);
      samples.pop_back();
    }
    return;
  }
  for (int s = 1; s * part.devices < left; ++s) {
    if (!allowed(s)) continue;
    samples.push_back(s);
    enumerate_shares(context, config, segment + 1, left - s * part.devices, samples, shares);
    samples.pop_back();
  }
}

// Each segment's part of a share, made once for all of the share's variants.
std::vector<StageOptions> share_parts(const SearchContext& context, const SearchConfig& config, const std::vector<int>& samples) {
  std::vector<StageOptions> parts;
  for (std::size_t j = 0; j < config.segments.size(); ++j) {
    const KindSegment& segment = config.segments[j];
    parts.emplace_back(context.of_kind(segment.kind), kind_part(config, segment, samples[j]),
                       std::numeric_limits<double>::infinity(), StageOptions::Listing::kNone);
  }
  return parts;
}

// The shared stage of one share and variant; nullopt when a kind's part does not fit.
std::optional<StageOption> shared_stage(const SearchContext& context, const SearchConfig& config,
                                        const std::vector<StageOptions>& parts, const std::vector<int>& samples,
                                        plan::Recompute recompute, plan::StateSharding sharding) {
  const int blocks = context.blocks->count();
  StageOption shared;
  shared.end = blocks;
  shared.recompute = recompute;
  shared.sharding = sharding;
  shared.kind = config.segments.front().kind;
  shared.replicas = 0;  // the kinds' replicas, added below
  shared.max_in_flight = std::numeric_limits<int>::max();
  for (std::size_t j = 0; j < config.segments.size(); ++j) {
    const KindSegment& segment = config.segments[j];
    auto option = parts[j].evaluate(0, blocks, segment.devices, recompute, sharding);
    if (!option) return std::nullopt;
    // Every replica runs each pass at once: a pass takes its slowest kind's time.
    shared.fwd_ms = std::max(shared.fwd_ms, option->fwd_ms);
    shared.bwd_ms = std::max(shared.bwd_ms, option->bwd_ms);
    shared.max_in_flight = std::min(shared.max_in_flight, option->max_in_flight);
    shared.replicas += segment.devices;
    shared.shares.push_back({segment.kind, segment.devices, samples[j]});
  }
  const double elements = context.ranges->param_elements(0, blocks, 1);
  if (elements > 0)
    shared.allreduce_ms =
        cost::gradient_sync_seconds(*context.cluster, shared_ranks(*context.cluster, config), elements, sharding, context.precision) * 1e3;
  shared.t_ms = shared.fwd_ms + shared.bwd_ms;
  shared.term_ms = (config.microbatches - 1) * shared.t_ms + shared.allreduce_ms;
  return shared;
}

}  // namespace

std::vector<int> shared_stage_samples(const SearchConfig& config) {
  if (!config.mixed() || config.replica_samples || config.chunks > 1 || config.tensor_degree.value_or(1) > 1) return {};
  int fewest = config.pipeline_devices;
  for (const auto& segment : config.segments) fewest = std::min(fewest, segment.devices);
  std::vector<int> sizes;
  for (int s = 1; s <= std::min(kMaxSharedSamples, config.microbatch_size / fewest); ++s) sizes.push_back(s);
  return sizes;
}

std::optional<PipelineSolution> search_shared_stage(const SearchContext& context, const SearchConfig& config,
                                                    double beat_ms) {
  if (shared_stage_samples(config).empty() || config.stages.value_or(1) != 1) return std::nullopt;
  std::vector<int> samples;
  std::vector<std::vector<int>> shares;
  enumerate_shares(context, config, 0, config.microbatch_size, samples, shares);
  std::optional<PipelineSolution> best;
  for (const auto& share : shares) {
    const std::vector<StageOptions> parts = share_parts(context, config, share);
    for (auto recompute : kRecomputeChoices) {
      if (context.recompute && recompute != *context.recompute) continue;
      for (auto sharding : kShardingChoices) {
        auto stage = shared_stage(context, config, parts, share, recompute, sharding);
        // One stage keeps the microbatches its schedule lets it (no stage after it).
        if (!stage || stage->max_in_flight < plan::microbatches_in_flight(config.schedule, 0, config.microbatches)) continue;
        const double objective = stage->t_ms + stage->term_ms;
        if (objective >= beat_ms || (best && objective >= best->objective_ms())) continue;
        best = PipelineSolution{{*stage}, stage->t_ms, stage->term_ms};
      }
    }
  }
  return best;
}

SharedStageMemory shared_stage_memory(const SearchContext& context, const SearchConfig& config, const StageOption& stage,
                                      int in_flight) {
  std::vector<int> samples;
  for (const auto& share : stage.shares) samples.push_back(share.samples);
  const std::vector<StageOptions> parts = share_parts(context, config, samples);
  SharedStageMemory fullest;
  double fullest_fraction = -1;
  for (std::size_t j = 0; j < stage.shares.size(); ++j) {
    const KindShare& share = stage.shares[j];
    const SearchContext& kind = context.of_kind(share.kind);
    StageOption option = stage;
    option.replicas = share.replicas;
    option.shares.clear();
    auto memory = parts[j].memory(option, in_flight);
    const double fraction = memory.total() / static_cast<double>(kind.cluster->mem_bytes);
    if (fraction > fullest_fraction) fullest = {memory, kind.cluster->mem_bytes}, fullest_fraction = fraction;
  }
  return fullest;
}

}  // namespace rannc::partition
