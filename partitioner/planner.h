// The planner: from atomic units to a placed, simulated plan.
//
//   units (units.h) -> blocks (coarsen.h) -> block costs (block_costs.h)
//     -> for every config (pipelines x microbatches): stage search (stage_search.h)
//     -> rank placement -> simulation (simulate.h)
//
// Configs: a pipeline spans D devices where D divides the devices of a node or is a whole
// number of nodes, so the P = N / D pipeline replicas sit on identical node groups; the
// microbatch count M divides the samples per pipeline. The best config by the search's
// objective wins; the plan then reports the simulated step.
#pragma once

#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cost_model/cluster.h"
#include "cost_model/cost_model.h"
#include "cost_model/memory.h"
#include "partitioner/block_costs.h"
#include "partitioner/coarsen.h"
#include "partitioner/interleave.h"
#include "partitioner/simulate.h"
#include "partitioner/stage_search.h"
#include "partitioner/units.h"
#include "plan/plan.h"

namespace rannc::partition {

// More microbatches per step than this only add per-microbatch overhead (and make the
// simulation of a step as long as the batch): the search considers no more.
inline constexpr int kMaxMicrobatches = 4096;
// The tensor-parallel degrees the search considers (within a node, as Megatron-LM uses them).
inline constexpr std::array<int, 3> kTensorDegrees{2, 4, 8};
// The context-parallel degrees the search considers (groups of them times the tensor degree in a
// node or over whole nodes: partitioner/context_parallel.h).
inline constexpr std::array<int, 3> kContextDegrees{2, 4, 8};
// The model chunks per device group the search considers beside 1 (interleaved 1F1B,
// partitioner/interleave.h).
inline constexpr std::array<int, 5> kInterleaveChunks{2, 3, 4, 6, 8};

struct PlanRequest {
  cost::Cluster cluster;
  std::int64_t global_batch = 1;
  plan::Schedule schedule = plan::Schedule::k1F1B;
  plan::Optimizer optimizer = plan::Optimizer::kAdam;
  plan::Precision precision = plan::Precision::kFp32;
  // --attention and --elementwise: how the training stack runs attention cores and elementwise ops.
  plan::Fusion attention = plan::Fusion::kUnfused;
  plan::Fusion elementwise = plan::Fusion::kUnfused;
  std::optional<int> stages;        // --stages
  std::optional<int> microbatches;  // --microbatches
  std::optional<plan::StateSharding> state_sharding;  // --shard-state: forced on replicated stages; nullopt: chosen per stage
  std::optional<plan::Recompute> recompute;  // --recompute none|selective|full: forced on every stage; nullopt: chosen per stage
  std::optional<int> fixed_microbatch;  // a model that runs only at this batch: microbatch size, one replica per stage
  int max_blocks = 192;             // coarsening target
  std::optional<int> pipelines;     // --layout dp=: force the count of pipeline replicas
  std::optional<int> tensor_degree; // --layout tp=: force every stage's tensor-parallel degree
  int max_tensor_degree = 1;        // --tensor-parallel: the largest degree the search considers
  bool sequence_parallel = true;    // --sequence-parallel: TensorRegions::sequence_ops split with the regions
  std::optional<int> context_degree;  // --layout cp=: force every stage's context-parallel degree
  int max_context_degree = 1;         // --context-parallel: the largest degree the search considers
  std::optional<int> interleave;    // --layout vp=: force the model chunks per device group
  int max_interleave = 1;           // the most model chunks per device group the search considers
  int runners_up = 0;               // --explain: also keep this many simulated layouts that lost
};

struct PlannedStage {
  StageOption option;             // blocks, replicas per pipeline, recompute, times per microbatch
  std::vector<int> ranks;         // every replica of every pipeline (plan::Stage::ranks)
  int in_flight = 0;              // microbatches kept between forward and backward
  plan::MemoryBreakdown memory;   // per device
  double allreduce_ms = 0;        // the gradient synchronisation among its actual ranks
  double host_mem_bytes = 0;      // per rank, when offloaded
  std::int64_t mem_limit_bytes = 0;  // a mixed cluster's: the memory `memory` is held to (plan::StagePrediction)
};

// The chosen pipeline, placed on ranks and simulated (emit/plan_builder.h makes the Plan of it).
struct PlacedPipeline {
  SearchConfig config;
  std::int64_t global_batch = 1;
  std::vector<PlannedStage> stages;
  std::vector<plan::RankPlacement> ranks;
  Simulation simulation;
  plan::Prediction predicted;
  double search_objective_ms = 0;
  std::vector<int> unused_ranks;
  std::string unused_reason;  // why some devices carry no stage
};

// Wall time of each planning phase, for the benchmark.
struct PhaseTimes {
  double units_ms = 0, coarsen_ms = 0, costs_ms = 0, search_ms = 0, simulate_ms = 0;
};

// Everything the planner derived from the model, which emit needs to write the stages out.
struct Partitioning {
  UnitGraph units;
  Blocking blocking;
  TensorRegions regions;
  ContextSplit context_split;  // found before --sequence-parallel off clears the sequence ops
  BlockCosts blocks;
};

// A config and the best pipeline of it by the search's formula.
struct ConfigChoice {
  SearchConfig config;
  PipelineSolution solution;
};

// How the configs fared in the search (--explain): each config the request allows lands in one
// count but `failed`, which with `explain` is split into no_fit and the rest.
struct SearchCensus {
  int candidates = 0;   // configs the request allows
  int bounded_out = 0;  // not searched: M x the balanced share of a microbatch alone cannot beat the best
  int searched = 0;     // their stages searched
  int failed = 0;       // searched: no pipeline both fits in memory and comes within the slack of the best
  int no_fit = 0;       // of those, with `explain` (a second search each): none fits in memory at all
  int slower = 0;       // found, then beyond the slack of a better best found later
  int near = 0;         // within the slack: ranked by their simulated step
  double slack = 0;     // the slack search_configs used: kRankingSlack, or kSmallSearchSlack
  bool explain = false;
  // With `explain`: the best pipeline of each config that fits but is beyond the slack, for the
  // runners-up (never the plan: with or without --explain, the plan is the same).
  std::vector<ConfigChoice> beyond_slack;
};

// Told each planning phase's outcome as it ends ("searched 412 layouts"): progress lines.
using PhaseObserver = std::function<void(const std::string& outcome)>;

// Throws Error(kCannotMeet) with what would fit when no config has a plan that fits in memory.
struct PlanResult {
  Partitioning partitioning;
  PlacedPipeline pipeline;
  std::vector<PlacedPipeline> runners_up;  // request.runners_up simulated candidates that lost, fastest first
  SearchCensus census;
  PhaseTimes times;
};
PlanResult plan_model(const ir::Graph& graph, std::int64_t evaluated_batch, const cost::CostModel& costs,
                      const PlanRequest& request, const PhaseObserver& observe = nullptr);
// A mixed cluster's plan: `kind_costs[k]` costs the ops on device kind k (the cluster's
// kind_view(k).device); a uniform cluster's takes one.
PlanResult plan_model(const ir::Graph& graph, std::int64_t evaluated_batch,
                      const std::vector<const cost::CostModel*>& kind_costs, const PlanRequest& request,
                      const PhaseObserver& observe = nullptr);

// The configs a request allows on a sequence of `blocks` blocks, in search order.
// With `tensor_degrees`, each layout once per degree that divides its pipeline's devices: every
// stage of the config runs at that degree (SearchConfig::tensor_degree). The stage search can
// give each stage its own degree, but that multiplies its options by the degrees and makes a
// 175B model's search on 1024 devices 10x slower; one degree per layout is how Megatron-LM
// runs, and the layouts of every degree are searched.
// With `context_degrees`, each such layout once more per context degree c > 1 whose groups of
// t x c devices tile the nodes (cost::Cluster::tiles_nodes) and divide its pipeline's devices
// (SearchConfig::context_degree).
std::vector<SearchConfig> candidate_configs(const PlanRequest& request, int blocks,
                                            const std::vector<int>& tensor_degrees = {1},
                                            const std::vector<int>& context_degrees = {1});

// The formula (a sum of stage times plus the largest stage term) ranks pipelines; the plan is
// then the one whose simulated step is shortest among every config's best that comes within
// this factor of the best formula value. The formula misjudges a simulated step by up to 6%
// (GPT-3 on 4096 devices: fewer microbatches than stages overlap more than it counts), and
// undercounts the tail a first stage adds after the pipeline drains; 1.1 covers both.
inline constexpr double kRankingSlack = 1.1;
// On a small search (at most kExhaustiveStageCounts blocks x devices per pipeline) the formula
// misjudges more: with stages of a few microseconds the transfers and the bubble decide (the
// sample GPT on 8 devices: a tensor-parallel pipeline of 2 stages it ranks over 10% ahead of 5
// stages of one device each, which simulate faster); there the search is cheap, and wider.
inline constexpr double kSmallSearchSlack = 1.2;
// The configs are searched in rounds of kSearchRound, shared by the threads: the rounds, not the
// threads, decide the outcome, so plans and --explain's counts are the same on any machine and
// with any count of threads.
inline constexpr std::size_t kSearchRound = 8;
// One thread per core, up to a round's configs.
std::size_t search_threads();
// Searches of at most this many blocks x devices per pipeline (the samples, not GPT-3) also rank
// every stage count of each such config by its simulated step.
inline constexpr std::int64_t kExhaustiveStageCounts = 1024;

// Each config's best pipeline whose objective is within kRankingSlack of the best one's, in
// search order, then (small searches) the best of each other stage count of those configs
// within it too; empty when none fits.
// `observe` hears how far the search is, at most once a second. `threads`: 0 for search_threads().
std::vector<ConfigChoice> search_configs(const SearchContext& context, const std::vector<SearchConfig>& configs,
                                         SearchCensus* census = nullptr, const PhaseObserver& observe = nullptr,
                                         std::size_t threads = 0);

// Places the chosen pipeline on ranks and simulates it.
// What no plan of the step can beat, for the report: the cost model's whole step on one device
// over N (`lower_bound_ms`) and the step's model FLOPs, which the physical bound puts at the
// device's peak.
struct StepBounds {
  double lower_bound_ms = 0;
  double model_flops = 0;  // forward and backward of the global batch, recomputation not counted
};
PlacedPipeline place_and_simulate(const SearchContext& context, const ConfigChoice& choice, std::int64_t global_batch,
                                  const StepBounds& bounds);

}  // namespace rannc::partition
