// Stage search: cuts the block sequence into pipeline stages (contiguous block ranges), gives
// each stage a replica count and a recomputation choice, under the memory limit of a device.
//
// One search covers one SearchConfig: P identical pipelines of D devices each (the pipelines
// are data-parallel copies of each other across node groups), M microbatches of b samples per
// pipeline and step. A stage over blocks [begin, end) with r replicas runs b / r samples per
// replica and microbatch; per microbatch it takes
//
//   t = fwd + bwd (+ fwd again when recomputing, or the attention cores' forward when
//       recomputing selectively) + 2 x p2p(inputs received from earlier stages)
//
// and after its last backward it synchronises its gradients among its P x r replicas (AR: an
// allreduce, or with sharded optimizer state a reduce-scatter plus an all-gather; costed as
// if its replicas were laid from the first device of each pipeline, a tensor-parallel group's
// at its stride: a stage placed further on, across a node boundary, may take longer, which the
// simulation of the placed plan then reports). The
// iteration time of the pipeline is modelled as
//
//   T = sum_s t_s + max_s ((M - 1) t_s + AR_s)
//
// the fill and drain of every stage plus the steady state of the slowest one, whose gradient
// allreduce cannot overlap; a faster stage's allreduce overlaps the slower stage's work. The
// max-plus-sum objective is not separable, so the search is exact by enumerating the bound:
// for a bound g on the stage terms (M - 1) t_s + AR_s, a dynamic program over (first block,
// devices used, stages after) finds the least sum of t_s. Starting from no bound, each round
// bounds strictly below the previous solution's largest term, which visits every Pareto point
// of (largest term, sum) in turn; it stops once no later point can beat the best objective.
// A stage whose t_s + term alone reach the objective to beat (the best of earlier configs, or of
// earlier rounds) cannot be in a better pipeline, so the program leaves it out.
//
// More of what cannot beat that objective B is left out, by bounds that cost little:
// - each block takes at least its least work on a stage of at most the devices left (its time on
//   the fastest such stage, tensor-parallel all-reduces included), so a stage whose t + term with
//   the least work of the other blocks reaches B is not listed, and a suffix whose sum with the
//   least work before it and its first stage's term (or the largest term's floor) reaches B is
//   left out of the program;
// - a later round's pipeline has a sum no lower and a largest term no lower than the least of any
//   pipeline (a program of its own, once): the next round is bounded at B - sum at once, and none
//   is run once that bound is at most the least largest term;
// - before its variants are listed, a config's program runs once over optimistic stages (per
//   range, the least time and end-of-step work of its variants, memory only of its weights):
//   when none of those beats B, neither does any pipeline of variants (may_beat).
// None of this changes the pipeline found below B, nor which of equal ones: leaving out stages
// and suffixes that no pipeline below B holds keeps the least sum of every suffix that remains,
// and its tie, so a round finds the same pipeline whenever that one is below B; the rounds it
// skips, or finds otherwise, could not beat B. A test compares the search below a beat with the
// search without one, stage for stage.
//
// Context parallelism (SearchConfig::context_degree = c) makes each replica a group of c times its
// tensor-parallel devices, each running 1/c of every sample's positions: its blocks' times are
// those of the group's split (BlockCosts::Split of that tensor and context degree), what it keeps
// and transfers is 1/c of a replica's, and its gradients synchronise over c times the replicas.
//
// Memory: 1F1B keeps min(stages after + 1, M) microbatches in flight at a stage, GPipe all M;
// the dynamic program tracks the stages after each suffix (capped at M) to check this exactly.
#pragma once

#include <array>
#include <limits>
#include <optional>
#include <vector>

#include "cost_model/cluster.h"
#include "cost_model/memory.h"
#include "partitioner/block_costs.h"

namespace rannc::partition {

// A mixed cluster's pipeline holds devices of each kind: `devices` of kind `kind`, in a run.
struct KindSegment {
  int kind = 0;
  int devices = 0;
};

struct SearchConfig {
  int pipelines = 1;          // P: identical pipeline replicas
  int pipeline_devices = 1;   // D: devices of one pipeline
  int microbatches = 1;       // M per pipeline and step
  int microbatch_size = 1;    // b: samples per microbatch
  plan::Schedule schedule = plan::Schedule::k1F1B;
  std::optional<int> stages;  // force the stage count
  std::optional<int> replica_samples;  // every replica runs exactly this many samples (a fixed-batch model)
  // Every stage's tensor-parallel degree (the planner's configs, --layout tp=); nullopt: each
  // stage chooses among the costed degrees (StageOptions::tensor_degrees).
  std::optional<int> tensor_degree;
  // Interleaved 1F1B (partitioner/interleave.h): model chunks per device group; `stages` then
  // counts the groups.
  int chunks = 1;
  // Context parallelism (partitioner/context_parallel.h): every stage's replicas are groups of
  // tensor_degree x context_degree devices, in one node or over whole nodes, each of
  // context_degree devices running 1/context_degree of each sample's positions.
  int context_degree = 1;
  // A mixed cluster's pipeline: its devices by kind, in pipeline order (the first stages run on
  // the first segment), adding up to pipeline_devices; every device is used, and each stage lies
  // within one segment, but for one stage that every kind shares (shared_stage.h). Empty: one kind.
  std::vector<KindSegment> segments{};

  // A shared stage's part on one kind (shared_stage.h): the copies of the stage's state over every
  // kind, which sharded state splits over. nullopt: pipelines x the stage's replicas.
  std::optional<int> state_copies{};

  bool mixed() const { return !segments.empty(); }
  // The devices of one replica of a stage of tensor degree `tensor_degree`: its tensor-parallel
  // group times the context degree.
  int group_devices(int tensor_degree) const { return tensor_degree * context_degree; }
  // The devices of a pipeline that a stage of kind `kind` may take.
  int kind_devices(int kind) const {
    for (const auto& segment : segments)
      if (segment.kind == kind) return segment.devices;
    return pipeline_devices;
  }
};

// The model and the cluster the configs are searched on.
struct SearchContext {
  const BlockCosts* blocks = nullptr;
  const RangeTable* ranges = nullptr;
  const cost::Cluster* cluster = nullptr;
  plan::Optimizer optimizer = plan::Optimizer::kAdam;
  plan::Precision precision = plan::Precision::kFp32;
  std::optional<plan::StateSharding> state_sharding;  // forced on every replicated stage; nullopt: each stage's choice
  std::optional<plan::Recompute> recompute;  // forced on every stage (--recompute); nullopt: each stage's choice
  // A mixed cluster: the device kind this context costs (its blocks, ranges and cluster are that
  // kind's: cost::Cluster::kind_view), and every kind's context by kind; nullptr when uniform.
  int kind = 0;
  const std::vector<SearchContext>* kinds = nullptr;

  const SearchContext& of_kind(int k) const { return kinds ? (*kinds)[static_cast<std::size_t>(k)] : *this; }
};

// The variants of a stage the search weighs (with or without offload).
inline constexpr std::array<plan::Recompute, 3> kRecomputeChoices{plan::Recompute::kNone, plan::Recompute::kSelective,
                                                                  plan::Recompute::kFull};
inline constexpr std::array<plan::StateSharding, 2> kShardingChoices{plan::StateSharding::kNone,
                                                                     plan::StateSharding::kOptimizer};

// A stage shared by a mixed pipeline's kinds (partitioner/shared_stage.h): a kind's replicas per
// pipeline and the samples each runs per microbatch.
struct KindShare {
  int kind = 0;
  int replicas = 0;
  int samples = 0;
};

struct StageOption {
  int begin = 0, end = 0;  // blocks [begin, end)
  int replicas = 1;        // per pipeline
  // Tensor parallelism: each replica is a group of this many devices in one node, splitting the
  // regions that allow it (BlockCosts::Split); 1 runs every op whole on one device.
  int tensor_degree = 1;
  // Context parallelism: each replica's group is as many times larger again (the config's
  // SearchConfig::context_degree), each device running a share of each sample's positions.
  int context_degree = 1;
  int kind = 0;  // the device kind of its devices (SearchContext::kind)
  plan::Recompute recompute = plan::Recompute::kNone;
  plan::StateSharding sharding = plan::StateSharding::kNone;
  bool offload = false;           // state in host memory (cost_model/memory.h, StateLayout)
  double fwd_ms = 0, bwd_ms = 0;  // per microbatch and replica; bwd includes what is recomputed
  double p2p_ms = 0;              // receiving inputs and sending their gradients back
  double allreduce_ms = 0;        // the gradient synchronisation
  double offload_ms = 0;          // host transfers and the host's optimizer step, once per step
  double t_ms = 0;                // fwd + bwd + p2p
  double term_ms = 0;             // (M - 1) t + allreduce + offload
  int max_in_flight = 0;          // microbatches in flight that fit in memory (up to the most it may keep)
  // A stage over every kind of a mixed pipeline, its microbatch shared unequally: each kind's
  // share, in the pipeline's segment order (`replicas` is their sum); empty on one kind.
  std::vector<KindShare> shares{};
  int group_devices() const { return tensor_degree * context_degree; }  // of one replica
  int devices() const { return replicas * group_devices(); }           // per pipeline
};

// Every stage option of a config that fits in memory with one microbatch in flight, by first block.
// An interleaved config (chunks > 1) lists none: its search evaluates the chunks it cuts.
class StageOptions {
 public:
  // How a range is listed: as its variants, or (kOptimistic) as one stage that takes the least
  // time and end-of-step work of any of them and may keep every microbatch its schedule allows in
  // flight, its memory unchecked but for its weights. Every pipeline of variants has a pipeline
  // of optimistic stages at least as good, so when none of those beats an objective, none of
  // these does (may_beat); they are listed for a fraction of the cost.
  // kNone lists nothing: the options only evaluate() and memory() stages asked for.
  enum class Listing { kVariants, kOptimistic, kNone };
  // `beat`: the objective a pipeline must stay below (search_pipeline's); a stage whose t + term
  // alone reach it is never listed (no pipeline holding it can), and its memory never computed.
  StageOptions(const SearchContext& context, const SearchConfig& config,
               double beat = std::numeric_limits<double>::infinity(), Listing listing = Listing::kVariants);

  // The options the search considers: of a range's variants (recomputed or not, sharded state or
  // not, offloaded or not), those no other variant beats in time, end-of-step work and
  // microbatches in flight.
  const std::vector<StageOption>& from(int begin) const { return by_begin_[begin]; }
  // Any stage, evaluated afresh; nullopt when it does not fit in memory with one microbatch in
  // flight, its replica count does not divide the microbatch, the sharding is not allowed
  // (forced otherwise, or a stage of one replica in all), or it offloads where it cannot (no host
  // memory, too little of it, or sharded state).
  std::optional<StageOption> evaluate(int begin, int end, int replicas, plan::Recompute recompute,
                                      plan::StateSharding sharding = plan::StateSharding::kNone,
                                      bool offload = false, int tensor_degree = 1) const;
  const std::vector<int>& replica_choices() const { return replica_choices_; }
  // The tensor-parallel degrees a stage may take: 1, and each costed degree whose groups (times
  // the context degree) tile the nodes and divide the pipeline's devices, or the forced one.
  const std::vector<int>& tensor_degrees() const { return tensor_degrees_; }
  // The blocks' split on a replica's group: `tensor_degree` devices, times the config's context
  // degree; nullptr for one device.
  const BlockCosts::Split* group_split(int tensor_degree) const;
  // `shared_replicas`: the copies of every stage holding the weights the option's stage shares
  // with others (0: only its own, the search's conservative count).
  plan::MemoryBreakdown memory(const StageOption& option, int in_flight, int shared_replicas = 0) const;
  int block_count() const { return static_cast<int>(by_begin_.size()); }
  // The work of one microbatch spread evenly over the pipeline's devices: the longest stage time
  // is never shorter (splitting a microbatch over r replicas never makes the work smaller:
  // r * c(b / r) >= c(b) for the roofline's fixed overheads and weight reads), so no step is
  // shorter than M times it.
  double balanced_ms() const { return balanced_ms_; }
  // With a finite beat, a lower bound on the sum of the stage times of blocks [0, begin) on at
  // most `devices` devices: each block's least work (its time and its tensor-parallel
  // all-reduces) on a stage of that many devices at most; 0 without a beat.
  double least_work_before(int begin, int devices) const {
    if (least_work_prefix_.empty() || begin == 0) return 0;
    const int way = least_work_way_[static_cast<std::size_t>(devices)];
    return way < 0 ? std::numeric_limits<double>::infinity() : least_work_prefix_[static_cast<std::size_t>(way)][begin];
  }
  const SearchConfig& config() const { return config_; }
  const SearchContext& context() const { return context_; }

 private:
  // The time of a range's work, and its largest workspace, at one replica count and
  // tensor-parallel degree (`split`, nullptr for 1), with what its group all-reduces.
  struct RangeWork {
    cost::PassTime fwd, bwd;
    double core_fwd_ms = 0;  // the attention cores' forward (BlockCosts::Cores)
    double workspace = 0;
    double exchanged_bytes = 0;  // a context group's keys and values (BlockCosts::Split)
    int exchanges = 0;
    double fwd_reduced_bytes = 0, bwd_reduced_bytes = 0;  // at the evaluated batch
    int fwd_collectives = 0, bwd_collectives = 0;
    void add(const BlockCosts& blocks, const BlockCosts::Split* split, int block, int sample) {
      const BlockCosts::Cores& cores = split ? split->cores : blocks.cores;
      if (!cores.fwd_ms.empty()) core_fwd_ms += cores.fwd_ms[block][sample];
      if (!split) {
        fwd.add(blocks.fwd_ms[block][sample], blocks.fwd_host(block, sample));
        bwd.add(blocks.bwd_ms[block][sample], blocks.bwd_host(block, sample));
        workspace = std::max(workspace, blocks.workspace_bytes[block][sample]);
        return;
      }
      fwd.add(split->fwd_ms[block][sample], blocks.fwd_host(block, sample));
      bwd.add(split->bwd_ms[block][sample], blocks.bwd_host(block, sample));
      workspace = std::max(workspace, split->workspace_bytes[block][sample]);
      fwd_reduced_bytes += split->fwd_reduced_bytes[block];
      bwd_reduced_bytes += split->bwd_reduced_bytes[block];
      fwd_collectives += split->fwd_collectives[block];
      bwd_collectives += split->bwd_collectives[block];
      if (!split->exchanged_bytes.empty()) exchanged_bytes += split->exchanged_bytes[block], exchanges += split->exchanges[block];
    }
  };
  // What every variant of a range shares: its footprint (the workspace included), its passes
  // with the group's all-reduces, the attention cores' forward and the point-to-point transfers.
  struct RangeStage {
    int begin = 0, end = 0, replicas = 1, tensor_degree = 1;
    cost::StageFootprint footprint;
    cost::PassTime fwd, bwd;
    double core_fwd_ms = 0, p2p_ms = 0;
    std::size_t replica_choice = 0;  // index into replica_choices_
    std::size_t degree_choice = 0;   // index into tensor_degrees_
    int most_in_flight = 1;
    double others_least_ms = 0;  // others_least_ms() of the range
  };
  RangeStage range_stage(int begin, int end, int replicas, int tensor_degree, const RangeWork& work) const;
  cost::StageFootprint footprint(int begin, int end, int replicas, int tensor_degree) const;
  // The most microbatches a stage ending before block `end` on `devices` can keep in flight: its
  // schedule's bound with as many stages after it as could follow.
  int most_in_flight(int end, int devices) const;
  // Each block's time on a stage of `replicas` groups of `degree` (its tensor-parallel all-reduces
  // included): what any stage holding it takes for it at least, whatever its other variants.
  std::vector<double> block_work(int replicas, int degree) const;
  // With a finite beat: the least work of each block on a stage of at most each device count.
  void tabulate_least_work();
  // The prefix sums of the least work on at most `devices`; nullptr when no stage is that small.
  const std::vector<double>* least_work_prefix(int devices) const;
  // A lower bound on the sum of the stage times of the blocks outside [begin, end) on the
  // devices the range leaves: what a stage of the range must leave below the beat to be listed.
  double others_least_ms(int begin, int end, int devices) const;
  std::optional<StageOption> evaluate(const RangeStage& range, plan::Recompute recompute,
                                      plan::StateSharding sharding, bool offload) const;
  std::optional<StageOption> optimistic(const RangeStage& range) const;
  // The gradient synchronisation of a range's stage.
  double sync_ms(const RangeStage& range, plan::StateSharding sharding) const;
  // Whether a stage's time and term leave room below the beat, with the least work of the others.
  bool below_beat(const StageOption& option, const RangeStage& range) const;
  void add_ranges_from(int begin, int replicas, int tensor_degree);
  void add_variants(int begin, int end, int replicas, int tensor_degree, const RangeWork& work);
  // The all-reduces of a pass within a tensor-parallel group, per microbatch.
  double tensor_allreduce_ms(double bytes_at_evaluated_batch, int collectives, int replicas, int tensor_degree) const;
  // A context group's ring passes of keys and values in forward, and in backward (again, with
  // their gradients), per microbatch: `exchanges` rings passing these bytes in all. Affine in the
  // bytes and the count, as the all-reduces are: a range's is the sum of its blocks'.
  double context_exchange_ms(double bytes_at_evaluated_batch, int exchanges, int replicas, int tensor_degree,
                             bool backward) const;
  // The share of the evaluated batch each device of a replica's group runs per microbatch: its
  // samples, and of each its share of the positions.
  double device_fraction(int replicas) const;

  bool allows(plan::StateSharding sharding, int replicas) const;
  bool can_offload() const;
  cost::StateLayout state_layout(int replicas, plan::StateSharding sharding, bool offload) const;
  RangeWork range_work(int begin, int end, int replicas, int tensor_degree) const;
  SearchContext context_;
  SearchConfig config_;
  std::vector<int> replica_choices_;
  std::vector<int> tensor_degrees_;
  // The gradient synchronisation is affine in the parameters: per sharding, of the stages of a
  // replica choice and a tensor degree, at [replica choice * tensor degrees + degree choice].
  struct SyncCost {
    std::array<double, 2> fixed_ms{}, ms_per_element{};
  };
  void tabulate_sync();
  std::vector<SyncCost> sync_;
  std::vector<std::vector<StageOption>> by_begin_;
  // tabulate_least_work(): [way][block] prefix sums of each block's least work on at most a
  // number of devices, and [devices]: the way of at most so many (-1: no stage is that small).
  std::vector<std::vector<double>> least_work_prefix_;
  std::vector<int> least_work_way_;
  double balanced_ms_ = 0;
  double beat_ = std::numeric_limits<double>::infinity();
  Listing listing_ = Listing::kVariants;
};

// balanced_ms() without building the options, to skip configs that cannot win.
double balanced_ms(const SearchContext& context, const SearchConfig& config);

// The stage options of a config on each segment of its pipeline, which the search picks from by
// the position a stage takes: one StageOptions over the whole pipeline on a uniform cluster, one
// per kind on a mixed one (SearchConfig::segments, each kind's options from its own context).
class SegmentOptions {
 public:
  explicit SegmentOptions(const StageOptions& options);  // not owned
  SegmentOptions(const SearchContext& context, const SearchConfig& config,
                 double beat = std::numeric_limits<double>::infinity(),
                 StageOptions::Listing listing = StageOptions::Listing::kVariants);
  // The lists point into owned_.
  SegmentOptions(const SegmentOptions&) = delete;
  SegmentOptions& operator=(const SegmentOptions&) = delete;

  int count() const { return static_cast<int>(lists_.size()); }
  const StageOptions& of(int segment) const { return *lists_[static_cast<std::size_t>(segment)]; }
  // The pipeline positions [first, end) of a segment's devices.
  int first_position(int segment) const { return starts_[static_cast<std::size_t>(segment)]; }
  int end_position(int segment) const { return starts_[static_cast<std::size_t>(segment) + 1]; }
  const SearchConfig& config() const { return lists_.front()->config(); }
  int block_count() const { return lists_.front()->block_count(); }
  // StageOptions::balanced_ms: on a mixed cluster every block at its fastest kind's time.
  double balanced_ms() const;
  double least_work_before(int begin, int devices) const;

 private:
  std::vector<StageOptions> owned_;
  std::vector<const StageOptions*> lists_;
  std::vector<int> starts_;  // segment s at positions [starts_[s], starts_[s + 1])
};

struct PipelineSolution {
  std::vector<StageOption> stages;
  double sum_ms = 0;         // sum of t_s
  double largest_term_ms = 0;  // max of (M - 1) t_s + AR_s
  double objective_ms() const { return sum_ms + largest_term_ms; }
};

// The objective of a given pipeline (for tests and the baselines): nullopt if a stage does not
// fit with the microbatches it keeps in flight.
std::optional<PipelineSolution> evaluate_pipeline(const StageOptions& options, std::vector<StageOption> stages);

// The best pipeline of a config whose objective is below `beat_ms`, or nullopt.
std::optional<PipelineSolution> search_pipeline(const SegmentOptions& options, double beat_ms);
inline std::optional<PipelineSolution> search_pipeline(const StageOptions& options, double beat_ms) {
  return search_pipeline(SegmentOptions(options), beat_ms);
}

// Whether any pipeline of the config fits in memory (one round of the dynamic program).
bool has_pipeline(const SegmentOptions& options);
inline bool has_pipeline(const StageOptions& options) { return has_pipeline(SegmentOptions(options)); }

// False when no pipeline of the config (chunks = 1) can come below `beat_ms`, by one round of the
// dynamic program over its optimistic stages (StageOptions::Listing): most configs that cannot
// win are ruled out so for a fraction of listing their variants.
bool may_beat(const SearchContext& context, const SearchConfig& config, double beat_ms);

}  // namespace rannc::partition
