// Interleaved 1F1B in the search (plan/schedule.h has the schedule). A config with
// SearchConfig::chunks = v > 1 runs on p equal device groups, each r replicas of the config's
// tensor degree t (p r t = D), and cuts the blocks into p v chunks, chunk c on group c mod p, as
// Megatron-LM runs it. The fill and drain of the pipeline shrink to 1/v of 1F1B's, for v times
// the point-to-point transfers and the memory of more microbatches in flight on early groups.
//
// The chunks are cut two ways, to equal shares of the work and so that the largest chunk's work is
// least (a bisection over it, cutting greedily), and the better pipeline of the two is kept; each
// group takes the recomputation, sharding and offload variant that fits its memory (its chunks'
// sum at the schedule's peak) in the least time. With chunk
// times t_k and group times g_j = sum of its chunks' t_k, the objective extends the stage search's:
//
//   T = (1/v) sum_k t_k + max_j ((M - 1/v) g_j + AR_j)
//
// which for v = 1 is sum_s t_s + max_s ((M - 1) t_s + AR_s), and for equal chunks of time c is
// M v c + (p - 1) c: the steady state plus Narayanan et al.'s bubble (p - 1) / v of a group's time.
// Every group count p is tried (M must be a multiple of p); unlike the stage search this is not
// exhaustive over the cuts: equal chunks are what interleaving is for.
#pragma once

#include <optional>
#include <vector>

#include "partitioner/stage_search.h"

namespace rannc::partition {

// The best interleaved pipeline of `options`' config (chunks > 1) below `beat_ms`, its stages
// the chunks in model order; nullopt when none fits or beats it.
std::optional<PipelineSolution> search_interleaved(const StageOptions& options, double beat_ms);

// The memory of one device holding `chunks_of_group` (a group's chunks, in model order) with
// `in_flight` microbatches in flight each.
plan::MemoryBreakdown group_memory(const StageOptions& options, const std::vector<StageOption>& chunks_of_group,
                                   const std::vector<int>& in_flight);

}  // namespace rannc::partition
