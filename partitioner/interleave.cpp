#include "partitioner/interleave.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rannc::partition {
namespace {

// Prefix sums of each block's work (forward and backward) on a device of a group that splits it
// so (nullptr: one device) running `sample` of the samples' table.
std::vector<double> work_prefix(const BlockCosts& blocks, int sample, const BlockCosts::Split* split) {
  std::vector<double> prefix{0};
  for (int b = 0; b < blocks.count(); ++b) {
    double work = split ? split->fwd_ms[b][sample] + split->bwd_ms[b][sample] : blocks.fwd_ms[b][sample] + blocks.bwd_ms[b][sample];
    prefix.push_back(prefix.back() + work);
  }
  return prefix;
}

// Cuts [0, n) into `parts` ranges ending at `ends` (ascending, the last n), none with more work
// than `cap`: taking each time the furthest end within it that leaves an end for every later range.
std::optional<std::vector<int>> cuts_within(const std::vector<double>& prefix, const std::vector<int>& ends, int parts,
                                            double cap) {
  const int n = static_cast<int>(prefix.size()) - 1;
  std::vector<int> cuts{0};
  std::size_t from = 0;
  for (int part = 0; part + 1 < parts; ++part) {
    std::optional<std::size_t> furthest;
    for (std::size_t k = from; k < ends.size(); ++k) {
      if (prefix[ends[k]] - prefix[cuts.back()] > cap) break;
      if (static_cast<int>(ends.size() - 1 - k) < parts - 1 - part) break;
      furthest = k;
    }
    if (!furthest) return std::nullopt;
    cuts.push_back(ends[*furthest]);
    from = *furthest + 1;
  }
  if (prefix[n] - prefix[cuts.back()] > cap) return std::nullopt;
  cuts.push_back(n);
  return cuts;
}

// The cuts of `parts` chunks whose largest work is least (to a part in a million), or nullopt
// when there are fewer places to cut than chunks.
std::optional<std::vector<int>> balanced_cuts(const std::vector<double>& prefix, const std::vector<int>& ends, int parts) {
  if (static_cast<int>(ends.size()) < parts) return std::nullopt;
  double low = 0, high = prefix.back();
  auto best = cuts_within(prefix, ends, parts, high);
  while (best && high - low > 1e-6 * high) {
    double middle = (low + high) / 2;
    if (auto cuts = cuts_within(prefix, ends, parts, middle)) best = cuts, high = middle;
    else low = middle;
  }
  return best;
}

// The cuts nearest to equal shares of the work: each at the end closest to k / parts of it that
// leaves an end for every later range.
std::optional<std::vector<int>> even_cuts(const std::vector<double>& prefix, const std::vector<int>& ends, int parts) {
  if (static_cast<int>(ends.size()) < parts) return std::nullopt;
  std::vector<int> cuts{0};
  std::size_t from = 0;
  for (int part = 1; part < parts; ++part) {
    const double target = prefix.back() * part / parts;
    std::size_t last = ends.size() - static_cast<std::size_t>(parts - part) - 1;  // leaves parts - part ends
    std::size_t nearest = from;
    for (std::size_t k = from; k <= last; ++k)
      if (std::abs(prefix[ends[k]] - target) < std::abs(prefix[ends[nearest]] - target)) nearest = k;
    cuts.push_back(ends[nearest]);
    from = nearest + 1;
  }
  cuts.push_back(static_cast<int>(prefix.size()) - 1);
  return cuts;
}

struct Group {
  std::vector<StageOption> chunks;
  double time_ms = 0, end_ms = 0;  // g_j, and AR_j with the offload
};

// The variant of a group's chunks that fits its memory in the least time (M g + AR), or nullopt.
std::optional<Group> best_group(const StageOptions& options, const std::vector<std::pair<int, int>>& ranges, int replicas,
                                int degree, const std::vector<int>& in_flight) {
  const SearchConfig& config = options.config();
  const double limit = static_cast<double>(options.context().cluster->mem_bytes);
  std::optional<Group> best;
  for (bool offload : {false, true})
    for (auto recompute : kRecomputeChoices)
      for (auto sharding : kShardingChoices) {
        if (options.context().recompute && recompute != *options.context().recompute) continue;
        Group group;
        for (auto [begin, end] : ranges) {
          auto chunk = options.evaluate(begin, end, replicas, recompute, sharding, offload, degree);
          if (!chunk) break;
          group.time_ms += chunk->t_ms;
          group.end_ms += chunk->allreduce_ms + chunk->offload_ms;
          group.chunks.push_back(*chunk);
        }
        if (group.chunks.size() != ranges.size()) continue;
        auto score = [&](const Group& g) { return config.microbatches * g.time_ms + g.end_ms; };
        if (best && score(*best) <= score(group)) continue;
        if (group_memory(options, group.chunks, in_flight).total() > limit) continue;
        best = std::move(group);
      }
  return best;
}

// The pipeline of the chunks `cuts` on `groups` groups of `replicas`, or nullopt when a group
// fits no variant.
std::optional<PipelineSolution> interleave_cuts(const StageOptions& options, int groups, int replicas,
                                                const std::vector<int>& cuts) {
  const SearchConfig& config = options.config();
  const int degree = config.tensor_degree.value_or(1);
  const int chunks = config.chunks;
  std::vector<Group> chosen;
  for (int g = 0; g < groups; ++g) {
    std::vector<std::pair<int, int>> ranges;
    for (int c = g; c < groups * chunks; c += groups) ranges.emplace_back(cuts[c], cuts[c + 1]);
    auto group = best_group(options, ranges, replicas, degree, plan::chunks_in_flight_at_peak(groups, g, chunks, config.microbatches));
    if (!group) return std::nullopt;
    chosen.push_back(std::move(*group));
  }
  PipelineSolution solution;
  for (int c = 0; c < groups * chunks; ++c) {
    const StageOption& chunk = chosen[c % groups].chunks[c / groups];
    solution.stages.push_back(chunk);
    solution.sum_ms += chunk.t_ms / chunks;
  }
  for (const Group& group : chosen)
    solution.largest_term_ms = std::max(solution.largest_term_ms, (config.microbatches - 1.0 / chunks) * group.time_ms + group.end_ms);
  return solution;
}

// The pipeline of `groups` groups: the better of the chunks of equal work and those whose largest
// work is least; nullopt when neither fits.
std::optional<PipelineSolution> interleave_on(const StageOptions& options, int groups) {
  const SearchConfig& config = options.config();
  const BlockCosts& blocks = *options.context().blocks;
  const int degree = config.tensor_degree.value_or(1);
  const int replicas = config.pipeline_devices / (groups * config.group_devices(degree));
  const int chunks = config.chunks;
  const BlockCosts::Split* split = options.group_split(degree);
  std::vector<int> ends;
  for (int b = 1; b <= blocks.count(); ++b)
    if (!split || !split->cuts_region_before[b]) ends.push_back(b);
  auto prefix = work_prefix(blocks, blocks.sample_index(config.microbatch_size / replicas), split);
  std::optional<PipelineSolution> best;
  for (const auto& cuts : {even_cuts(prefix, ends, groups * chunks), balanced_cuts(prefix, ends, groups * chunks)}) {
    if (!cuts) continue;
    auto solution = interleave_cuts(options, groups, replicas, *cuts);
    if (solution && (!best || solution->objective_ms() < best->objective_ms())) best = std::move(solution);
  }
  return best;
}

}  // namespace

plan::MemoryBreakdown group_memory(const StageOptions& options, const std::vector<StageOption>& chunks_of_group,
                                   const std::vector<int>& in_flight) {
  std::vector<plan::MemoryBreakdown> parts;
  for (std::size_t c = 0; c < chunks_of_group.size(); ++c) parts.push_back(options.memory(chunks_of_group[c], in_flight[c]));
  return cost::chunks_memory(parts);
}

std::optional<PipelineSolution> search_interleaved(const StageOptions& options, double beat_ms) {
  const SearchConfig& config = options.config();
  const int group = config.group_devices(config.tensor_degree.value_or(1));  // devices of a replica
  const auto& replica_choices = options.replica_choices();
  std::optional<PipelineSolution> best;
  for (int groups = 2; groups * group <= config.pipeline_devices; ++groups) {
    if (config.pipeline_devices % (groups * group) != 0 || config.microbatches % groups != 0) continue;
    if (config.stages && groups != *config.stages) continue;
    if (groups * config.chunks > options.block_count()) break;
    int replicas = config.pipeline_devices / (groups * group);
    if (std::find(replica_choices.begin(), replica_choices.end(), replicas) == replica_choices.end()) continue;
    auto solution = interleave_on(options, groups);
    if (solution && solution->objective_ms() < beat_ms) beat_ms = solution->objective_ms(), best = std::move(solution);
  }
  return best;
}

}  // namespace rannc::partition
