// A stage shared by every kind of a mixed pipeline: data parallelism over devices of unequal speed.
//
// The stage search puts each stage of a mixed pipeline on one kind (stage_search.h). A model that
// fits on one device trains fastest data-parallel on every device, and the kinds then take
// unequal shares of each microbatch: kind k's D_k replicas per pipeline run s_k samples each,
// sum_k D_k s_k = b, each pass taking as long as its slowest kind. The shares are enumerated
// (a few kinds, s_k up to kMaxSharedSamples), each kind's part evaluated on its own costs and
// memory; the gradients synchronise over every replica of every kind.
#pragma once

#include <optional>
#include <vector>

#include "partitioner/stage_search.h"

namespace rannc::partition {

// The most samples a replica of a shared stage runs per microbatch: each size is costed per block.
inline constexpr int kMaxSharedSamples = 128;
// The most shares of a microbatch a config's shared stage weighs (the first in the order of the
// first kinds' samples): with three kinds or more they would multiply.
inline constexpr std::size_t kMaxShares = 1024;

// The per-replica microbatch sizes a mixed config's shared stage may run (none for a config of
// one kind, a forced replica batch or interleaving), for costing.
std::vector<int> shared_stage_samples(const SearchConfig& config);

// The best one-stage pipeline of a mixed config whose kinds share each microbatch, with an
// objective below `beat_ms`; nullopt when no share fits in memory or beats it.
std::optional<PipelineSolution> search_shared_stage(const SearchContext& context, const SearchConfig& config,
                                                    double beat_ms);

// The memory of a shared stage's devices with `in_flight` microbatches kept: its fullest kind's
// (by share of that kind's memory), and that kind's memory.
struct SharedStageMemory {
  plan::MemoryBreakdown memory;
  std::int64_t limit_bytes = 0;
};
SharedStageMemory shared_stage_memory(const SearchContext& context, const SearchConfig& config, const StageOption& stage,
                                      int in_flight);

}  // namespace rannc::partition
