#include "partitioner/stage_search.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cost_model/comm.h"

namespace rannc::partition {
namespace {

constexpr double kMs = 1e3;
// Relative to the objective: far above the round-off of a sum of stage times, far below any
// difference between pipelines that matters. Bounds that sum in another order than the search
// give way by it, so that round-off never rules out a pipeline that could win.
constexpr double kRoundOffMargin = 1e-9;

// The ranks that synchronise a weight slice of a stage with `members` devices per pipeline
// holding it, as the placement lays them out: one device in every `stride` (a tensor-parallel
// group's devices of one tensor rank) from the first device of every pipeline (of its kind's
// devices in each, on a mixed cluster: the ranks are then those of the kind's view). Collective
// times depend only on how these spread over nodes.
std::vector<int> canonical_ranks(const SearchConfig& config, int kind, int members, int stride) {
  std::vector<int> ranks;
  for (int p = 0; p < config.pipelines; ++p)
    for (int i = 0; i < members; ++i) ranks.push_back(p * config.kind_devices(kind) + i * stride);
  return ranks;
}

// A pipeline inside one node talks over the intra-node link, else (conservatively) the network;
// a mixed cluster's pipeline spans the nodes of its kinds.
const cost::Link& pipeline_link(const cost::Cluster& cluster, const SearchConfig& config) {
  return config.pipeline_devices <= cluster.gpus_per_node && !config.mixed() ? cluster.intra_node : cluster.inter_node;
}

// A range's options on as many devices compete: only those no other beats in time, end-of-step
// work and microbatches in flight stay (ties keep the first listed). The variants of one replica
// count (recomputed, sharded, offloaded) compete so, and with tensor parallelism so do the ways
// of using a device count (8 replicas, or 4 of 2 devices each, ...).
void keep_undominated(std::vector<StageOption>& options) {
  auto place = [&](std::size_t i) { return std::make_pair(options[i].end, options[i].devices()); };
  std::vector<std::size_t> order(options.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return place(a) < place(b); });
  auto at_least_as_good = [](const StageOption& a, const StageOption& b) {
    return a.t_ms <= b.t_ms && a.term_ms <= b.term_ms && a.max_in_flight >= b.max_in_flight;
  };
  std::vector<bool> beaten(options.size(), false);
  for (std::size_t first = 0; first < order.size();) {
    std::size_t last = first;
    while (last < order.size() && place(order[last]) == place(order[first])) ++last;
    for (std::size_t x = first; x < last; ++x) {
      const std::size_t i = order[x];
      for (std::size_t y = first; y < last && !beaten[i]; ++y) {
        const std::size_t j = order[y];
        beaten[i] = j != i && at_least_as_good(options[j], options[i]) && (j < i || !at_least_as_good(options[i], options[j]));
      }
    }
    first = last;
  }
  std::vector<StageOption> kept;
  for (std::size_t i = 0; i < options.size(); ++i)
    if (!beaten[i]) kept.push_back(options[i]);
  options = std::move(kept);
}
}  // namespace

double balanced_ms(const SearchContext& context, const SearchConfig& config) {
  // On a mixed cluster each block at its fastest kind's time: kinds may differ in which blocks
  // they run fastest.
  std::vector<const SearchContext*> kinds{&context};
  if (config.mixed()) {
    kinds.clear();
    for (const auto& segment : config.segments) kinds.push_back(&context.of_kind(segment.kind));
  }
  cost::PassTime fwd, bwd;
  for (int block = 0; block < context.blocks->count(); ++block) {
    double fwd_ms = std::numeric_limits<double>::infinity(), fwd_host = fwd_ms, bwd_ms = fwd_ms, bwd_host = fwd_ms;
    for (const SearchContext* kind : kinds) {
      const BlockCosts& blocks = *kind->blocks;
      const int whole_microbatch = blocks.sample_index(config.microbatch_size);
      fwd_ms = std::min(fwd_ms, blocks.fwd_ms[block][whole_microbatch]);
      fwd_host = std::min(fwd_host, blocks.fwd_host(block, whole_microbatch));
      bwd_ms = std::min(bwd_ms, blocks.bwd_ms[block][whole_microbatch]);
      bwd_host = std::min(bwd_host, blocks.bwd_host(block, whole_microbatch));
    }
    fwd.add(fwd_ms, fwd_host);
    bwd.add(bwd_ms, bwd_host);
  }
  return (fwd.ms() + bwd.ms()) / config.pipeline_devices;
}

StageOptions::StageOptions(const SearchContext& context, const SearchConfig& config, double beat, Listing listing)
    : context_(context), config_(config), beat_(beat), listing_(listing) {
  const BlockCosts& blocks = *context.blocks;
  const int devices = config.kind_devices(context.kind);
  for (int r = 1; r * config.context_degree <= devices; ++r) {
    if (config.microbatch_size % r != 0) continue;
    if (config.replica_samples && config.microbatch_size / r != *config.replica_samples) continue;
    replica_choices_.push_back(r);
  }
  if (config.tensor_degree) {
    tensor_degrees_ = {*config.tensor_degree};
  } else {
    tensor_degrees_ = {1};
    for (const auto& split : blocks.splits)
      if (split.context == config.context_degree && split.degree > 1 &&
          context.cluster->tiles_nodes(config.group_devices(split.degree)) &&
          devices % config.group_devices(split.degree) == 0)
        tensor_degrees_.push_back(split.degree);
  }
  tabulate_sync();
  by_begin_.resize(static_cast<std::size_t>(blocks.count()));
  if (listing == Listing::kNone) return;
  balanced_ms_ = partition::balanced_ms(context, config);
  if (config.chunks > 1) return;
  // On a mixed cluster the other blocks may run on a faster kind: this kind's least work bounds
  // nothing there, and the listing leaves out only stages that alone cannot beat.
  if (beat < std::numeric_limits<double>::infinity() && !config.mixed()) tabulate_least_work();
  for (int begin = 0; begin < blocks.count(); ++begin) {
    for (int degree : tensor_degrees_)
      for (int replicas : replica_choices_)
        if (replicas * config.group_devices(degree) <= devices) add_ranges_from(begin, replicas, degree);
    if (tensor_degrees_.size() > 1) keep_undominated(by_begin_[begin]);
  }
}

std::vector<double> StageOptions::block_work(int replicas, int degree) const {
  const BlockCosts& blocks = *context_.blocks;
  const BlockCosts::Split* split = group_split(degree);
  const int sample = blocks.sample_index(config_.microbatch_size / replicas);
  std::vector<double> work;
  for (int b = 0; b < blocks.count(); ++b) {
    if (!split) {
      work.push_back(blocks.fwd_ms[b][sample] + blocks.bwd_ms[b][sample]);
      continue;
    }
    // A range's all-reduces are affine in their bytes and count: the sum of its blocks'.
    double reduced = tensor_allreduce_ms(split->fwd_reduced_bytes[b], split->fwd_collectives[b], replicas, degree) +
                     tensor_allreduce_ms(split->bwd_reduced_bytes[b], split->bwd_collectives[b], replicas, degree);
    if (!split->exchanged_bytes.empty())
      reduced += context_exchange_ms(split->exchanged_bytes[b], split->exchanges[b], replicas, degree, false) +
                 context_exchange_ms(split->exchanged_bytes[b], split->exchanges[b], replicas, degree, true);
    work.push_back(split->fwd_ms[b][sample] + split->bwd_ms[b][sample] + reduced);
  }
  return work;
}

void StageOptions::tabulate_least_work() {
  // Every way to run a stage, by the devices it takes.
  std::vector<std::pair<int, int>> ways;  // devices, replicas
  for (int degree : tensor_degrees_)
    for (int replicas : replica_choices_)
      if (replicas * config_.group_devices(degree) <= config_.pipeline_devices)
        ways.emplace_back(replicas * config_.group_devices(degree), replicas);
  std::sort(ways.begin(), ways.end());
  least_work_way_.assign(static_cast<std::size_t>(config_.pipeline_devices + 1), -1);
  std::vector<double> least(static_cast<std::size_t>(block_count()), std::numeric_limits<double>::infinity());
  for (std::size_t w = 0; w < ways.size(); ++w) {
    auto [devices, replicas] = ways[w];
    auto work = block_work(replicas, devices / replicas / config_.context_degree);
    for (std::size_t b = 0; b < least.size(); ++b) least[b] = std::min(least[b], work[b]);
    if (w + 1 < ways.size() && ways[w + 1].first == devices) continue;
    std::vector<double> prefix{0};
    for (double block : least) prefix.push_back(prefix.back() + block);
    least_work_prefix_.push_back(std::move(prefix));
    std::fill(least_work_way_.begin() + devices, least_work_way_.end(), static_cast<int>(least_work_prefix_.size() - 1));
  }
}

const std::vector<double>* StageOptions::least_work_prefix(int devices) const {
  int way = least_work_way_[static_cast<std::size_t>(devices)];
  return way < 0 ? nullptr : &least_work_prefix_[static_cast<std::size_t>(way)];
}

double StageOptions::others_least_ms(int begin, int end, int devices) const {
  if (least_work_prefix_.empty()) return 0;
  const auto* prefix = least_work_prefix(config_.pipeline_devices - devices);
  if (!prefix) return begin > 0 || end < block_count() ? std::numeric_limits<double>::infinity() : 0;
  return (*prefix)[begin] + (prefix->back() - (*prefix)[end]);
}

void StageOptions::add_ranges_from(int begin, int replicas, int degree) {
  const BlockCosts& blocks = *context_.blocks;
  const RangeTable& ranges = *context_.ranges;
  double limit = static_cast<double>(context_.cluster->mem_bytes);
  // The least state a weight element can take at this replica count.
  double least_state = std::numeric_limits<double>::infinity();
  for (auto sharding : kShardingChoices)
    if (allows(sharding, replicas))
      least_state = std::min(least_state, cost::param_state_bytes(context_.optimizer, context_.precision,
                                                                  state_layout(replicas, sharding, false)).total());
  if (can_offload())
    least_state = std::min(least_state, cost::param_state_bytes(context_.optimizer, context_.precision,
                                                                state_layout(replicas, plan::StateSharding::kNone, true)).total());
  int sample = blocks.sample_index(config_.microbatch_size / replicas);
  const BlockCosts::Split* split = group_split(degree);
  if (split && split->cuts_region_before[begin]) return;
  RangeWork work;
  for (int end = begin + 1; end <= blocks.count(); ++end) {
    // Weights only grow with the range: once they alone overflow, every longer range does too.
    if (ranges.param_elements(begin, end, degree) * least_state + ranges.buffer_bytes(begin, end) > limit) break;
    work.add(blocks, split, end - 1, sample);
    // Every variant of the range takes at least its work as the stage time, M times over with
    // its term: when that leaves no room below the beat, evaluate() would list none (this test
    // gives way by a wider margin, so it never drops a variant that evaluate() keeps). A longer
    // range only takes longer.
    const double least_step = config_.microbatches * (work.fwd.ms() + work.bwd.ms());
    const double beyond = beat_ + 2 * beat_ * kRoundOffMargin;
    if (least_step >= beyond) break;
    if (split && split->cuts_region_before[end]) continue;
    if (least_step + others_least_ms(begin, end, replicas * config_.group_devices(degree)) >= beyond) continue;
    add_variants(begin, end, replicas, degree, work);
  }
}

bool StageOptions::allows(plan::StateSharding sharding, int replicas) const {
  const int copies = state_layout(replicas, sharding, false).replicas;
  if (context_.state_sharding && copies > 1) return sharding == *context_.state_sharding;
  // Sharding among one copy is no sharding.
  return sharding == plan::StateSharding::kNone || copies > 1;
}

cost::StateLayout StageOptions::state_layout(int replicas, plan::StateSharding sharding, bool offload) const {
  return {config_.state_copies.value_or(config_.pipelines * replicas * config_.context_degree), sharding, offload};
}

bool StageOptions::can_offload() const { return context_.cluster->host.mem_bytes > 0; }

// Recomputing only costs time, sharding only adds a collective's latency (or saves time where the
// weights gather in 16 bits), offloading costs host transfers and a slow optimizer step: a
// variant is worth an option unless another one is at least as good in time, end-of-step work
// and microbatches in flight (ties keep the first listed).
void StageOptions::add_variants(int begin, int end, int replicas, int tensor_degree, const RangeWork& work) {
  if (replicas > 1 && context_.ranges->sends_batch_free(begin, end)) return;
  const RangeStage stage = range_stage(begin, end, replicas, tensor_degree, work);
  if (listing_ == Listing::kOptimistic) {
    if (auto option = optimistic(stage)) by_begin_[begin].push_back(*option);
    return;
  }
  std::vector<StageOption> variants;
  variants.reserve(2 * kRecomputeChoices.size() * kShardingChoices.size());
  for (bool offload : {false, true})
    for (auto recompute : kRecomputeChoices) {
      if (context_.recompute && recompute != *context_.recompute) continue;
      for (auto sharding : kShardingChoices)
        if (auto variant = evaluate(stage, recompute, sharding, offload)) variants.push_back(*variant);
    }
  keep_undominated(variants);
  by_begin_[begin].insert(by_begin_[begin].end(), variants.begin(), variants.end());
}

cost::StageFootprint StageOptions::footprint(int begin, int end, int replicas, int tensor_degree) const {
  const RangeTable& ranges = *context_.ranges;
  const double fraction = device_fraction(replicas);
  cost::StageFootprint footprint;
  footprint.param_elements = ranges.param_elements(begin, end, tensor_degree);
  footprint.largest_param_elements = ranges.largest_param_elements(begin, end, tensor_degree);
  footprint.tied_grad_bytes = ranges.largest_tied_grad_bytes(begin, end);
  footprint.buffer_bytes = ranges.buffer_bytes(begin, end);
  footprint.kept_bytes = ranges.kept_bytes(begin, end, tensor_degree) * fraction + ranges.fixed_kept_bytes(begin, end);
  footprint.core_kept_bytes = ranges.core_kept_bytes(begin, end, tensor_degree) * fraction;
  footprint.largest_core_bytes = ranges.largest_core_bytes(begin, end, tensor_degree) * fraction;
  footprint.input_bytes = (ranges.received_bytes(begin, end) + ranges.model_input_bytes(begin, end)) * fraction;
  const double sent_to_stages = ranges.sent_bytes(begin, end) - ranges.final_output_bytes(begin, end);
  footprint.output_bytes = sent_to_stages * fraction;
  footprint.final_output_bytes = ranges.final_output_bytes(begin, end, tensor_degree) * fraction;
  footprint.shared_param_elements = ranges.shared_param_elements(begin, end, tensor_degree);
  footprint.held_output_bytes = (sent_to_stages - ranges.saved_sent_bytes(begin, end)) * fraction;
  footprint.pass_receive_bytes = std::max(ranges.received_bytes(begin, end), sent_to_stages) * fraction;
  return footprint;
}

double StageOptions::tensor_allreduce_ms(double bytes_at_evaluated_batch, int collectives, int replicas,
                                         int tensor_degree) const {
  if (collectives == 0) return 0;
  const cost::Link& link = context_.cluster->intra_node;  // a tensor-parallel group never spans nodes
  double latency = cost::ring_allreduce_seconds(0, tensor_degree, link);
  double all = cost::ring_allreduce_seconds(bytes_at_evaluated_batch * device_fraction(replicas), tensor_degree, link);
  return (all + (collectives - 1) * latency) * kMs;
}

// Each device ends a ring pass with every position's keys and values of its samples: an
// all-gather of them over the context group, in forward; backward passes them again (the ring's
// chunks are not kept) and their gradients back, a reduce-scatter of as many bytes. Counted as
// not overlapped with the attention that Transformer Engine runs beside it: at most a few per
// cent of the core's time for grouped-query attention.
double StageOptions::context_exchange_ms(double bytes_at_evaluated_batch, int exchanges, int replicas,
                                         int tensor_degree, bool backward) const {
  if (exchanges == 0 || config_.context_degree == 1) return 0;
  // Within a node, or around the nodes a group spans (each device over its own link out).
  const cost::Link& link = config_.group_devices(tensor_degree) > context_.cluster->gpus_per_node
                               ? context_.cluster->inter_node
                               : context_.cluster->intra_node;
  // A tensor rank's ring passes its own heads' keys and values.
  const double group_bytes = bytes_at_evaluated_batch * device_fraction(replicas) * config_.context_degree / tensor_degree;
  const double latency = cost::allgather_seconds(0, config_.context_degree, link);
  const double pass = cost::allgather_seconds(group_bytes, config_.context_degree, link) + (exchanges - 1) * latency;
  return (backward ? 2 * pass : pass) * kMs;
}

double StageOptions::device_fraction(int replicas) const {
  return (config_.microbatch_size / replicas) / context_.blocks->evaluated_batch / config_.context_degree;
}

const BlockCosts::Split* StageOptions::group_split(int tensor_degree) const {
  if (tensor_degree == 1 && config_.context_degree == 1) return nullptr;
  const BlockCosts::Split* split = context_.blocks->split(tensor_degree, config_.context_degree);
  // Whole samples' times for a share of their positions would be wrong, not conservative.
  if (!split && config_.context_degree > 1) throw std::logic_error("a context-parallel config whose split was not costed");
  return split;
}

StageOptions::RangeStage StageOptions::range_stage(int begin, int end, int replicas, int tensor_degree,
                                                  const RangeWork& work) const {
  RangeStage stage;
  stage.begin = begin;
  stage.end = end;
  stage.replicas = replicas;
  stage.tensor_degree = tensor_degree;
  stage.footprint = footprint(begin, end, replicas, tensor_degree);
  stage.footprint.workspace_bytes = work.workspace;
  // A tensor-parallel group waits for its all-reduces between the ops that need them.
  stage.fwd = work.fwd;
  stage.bwd = work.bwd;
  stage.fwd.add(tensor_allreduce_ms(work.fwd_reduced_bytes, work.fwd_collectives, replicas, tensor_degree), 0);
  stage.bwd.add(tensor_allreduce_ms(work.bwd_reduced_bytes, work.bwd_collectives, replicas, tensor_degree), 0);
  stage.fwd.add(context_exchange_ms(work.exchanged_bytes, work.exchanges, replicas, tensor_degree, false), 0);
  stage.bwd.add(context_exchange_ms(work.exchanged_bytes, work.exchanges, replicas, tensor_degree, true), 0);
  stage.core_fwd_ms = work.core_fwd_ms;
  double received = context_.ranges->received_bytes(begin, end) * device_fraction(replicas);
  if (received > 0) stage.p2p_ms = 2 * cost::p2p_seconds(received, pipeline_link(*context_.cluster, config_)) * kMs;
  stage.replica_choice = static_cast<std::size_t>(
      std::find(replica_choices_.begin(), replica_choices_.end(), replicas) - replica_choices_.begin());
  stage.degree_choice = static_cast<std::size_t>(
      std::find(tensor_degrees_.begin(), tensor_degrees_.end(), tensor_degree) - tensor_degrees_.begin());
  stage.most_in_flight = most_in_flight(end, replicas * config_.group_devices(tensor_degree));
  stage.others_least_ms = others_least_ms(begin, end, replicas * config_.group_devices(tensor_degree));
  return stage;
}

// Memory never shrinks with more microbatches in flight (cost::stage_memory: the passes' memory
// grows linearly, the optimizer step's does not): the largest count that fits, up to `most`, by
// bisection, probing first where the line through 1 and 2 meets the limit, which is the answer
// whenever the passes outweigh the step. 0: not even one fits.
template <typename Total>
int most_that_fit(int most, double limit, Total total) {
  auto fits = [&](int n) { return total(n) <= limit; };
  const double one = total(1);
  if (!(one <= limit)) return 0;  // fits(1)
  int low = 1, high = most;       // fits(low); the answer lies in [low, high]
  double per_microbatch = most > 1 ? total(2) - one : 0;
  if (per_microbatch > 0) {
    int guess = static_cast<int>(std::clamp(1 + std::floor((limit - one) / per_microbatch), 1.0, double(most)));
    if (fits(guess)) low = guess;
    else high = guess - 1;
    if (low < high && !fits(low + 1)) high = low;
  }
  while (low < high) {
    int middle = low + (high - low + 1) / 2;
    if (fits(middle)) low = middle;
    else high = middle - 1;
  }
  return low;
}

std::optional<StageOption> StageOptions::evaluate(const RangeStage& range, plan::Recompute recompute,
                                                  plan::StateSharding sharding, bool offload) const {
  if (!allows(sharding, range.replicas)) return std::nullopt;
  if (offload && (!can_offload() || sharding != plan::StateSharding::kNone)) return std::nullopt;
  if (recompute == plan::Recompute::kSelective &&
      (context_.blocks->cuts_core(range.begin) || context_.blocks->cuts_core(range.end)))
    return std::nullopt;
  const cost::StageFootprint& stage = range.footprint;
  const cost::Cluster& cluster = *context_.cluster;
  StageOption option;
  option.begin = range.begin;
  option.end = range.end;
  option.replicas = range.replicas;
  option.tensor_degree = range.tensor_degree;
  option.context_degree = config_.context_degree;
  option.kind = context_.kind;
  option.recompute = recompute;
  option.sharding = sharding;
  option.offload = offload;
  cost::PassTime bwd = range.bwd;
  option.fwd_ms = range.fwd.ms();
  // Recomputation runs the forward, or the attention cores' forward, again within the backward pass.
  if (recompute == plan::Recompute::kFull) bwd.add(range.fwd.device_ms, range.fwd.host_ms);
  if (recompute == plan::Recompute::kSelective) bwd.add(range.core_fwd_ms, 0);
  option.bwd_ms = bwd.ms();
  option.p2p_ms = range.p2p_ms;
  option.allreduce_ms = sync_ms(range, sharding);
  if (offload)
    option.offload_ms = cost::offload_seconds(cluster, stage.param_elements, context_.optimizer, context_.precision) * kMs;
  option.t_ms = option.fwd_ms + option.bwd_ms + option.p2p_ms;
  option.term_ms = (config_.microbatches - 1) * option.t_ms + option.allreduce_ms + option.offload_ms;
  if (!below_beat(option, range)) return std::nullopt;
  cost::StateLayout state = state_layout(range.replicas, sharding, offload);
  // The node's devices share its host memory.
  double host_share = static_cast<double>(cluster.host.mem_bytes) / cluster.gpus_per_node;
  if (cost::host_memory_bytes(stage.param_elements, context_.optimizer, state) > host_share) return std::nullopt;
  double limit = static_cast<double>(context_.cluster->mem_bytes);
  auto total = [&](int n) {
    return cost::stage_memory(stage, n, recompute, state, context_.optimizer, context_.precision).total();
  };
  // Up to the most the stage can ever keep: counting beyond would only keep variants (less
  // recomputed, more kept) that no pipeline can tell apart.
  option.max_in_flight = most_that_fit(range.most_in_flight, limit, total);
  if (option.max_in_flight == 0) return std::nullopt;
  return option;
}

// Per replica count and tensor degree: a context group's devices synchronise their whole weights
// as replicas do, and a tensor-parallel group's devices each their slice, at a stride of the
// group's devices, which may take the synchronisation across nodes where replicas side by side
// would stay in one.
void StageOptions::tabulate_sync() {
  const int devices = config_.kind_devices(context_.kind);
  for (int r : replica_choices_) {
    for (int degree : tensor_degrees_) {
      SyncCost cost;  // no stage of more devices than the pipeline's: never read
      cost.fixed_ms.fill(std::numeric_limits<double>::infinity());
      if (r * config_.group_devices(degree) <= devices) {
        auto ranks = canonical_ranks(config_, context_.kind, r * config_.context_degree, degree);
        for (auto sharding : kShardingChoices) {
          auto at = static_cast<std::size_t>(sharding);
          auto seconds = [&](double elements) {
            return cost::gradient_sync_seconds(*context_.cluster, ranks, elements, sharding, context_.precision);
          };
          cost.fixed_ms[at] = seconds(0) * kMs;
          cost.ms_per_element[at] = (seconds(1e9) * kMs - cost.fixed_ms[at]) / 1e9;
        }
      }
      sync_.push_back(cost);
    }
  }
}

double StageOptions::sync_ms(const RangeStage& range, plan::StateSharding sharding) const {
  if (range.footprint.param_elements <= 0) return 0;
  auto at = static_cast<std::size_t>(sharding);
  const SyncCost& cost = sync_[range.replica_choice * tensor_degrees_.size() + range.degree_choice];
  return cost.fixed_ms[at] + cost.ms_per_element[at] * range.footprint.param_elements;
}

bool StageOptions::below_beat(const StageOption& option, const RangeStage& range) const {
  if (option.t_ms + option.term_ms >= beat_) return false;
  // The other stages' blocks take their least work at least, on the devices left to them.
  return option.t_ms + option.term_ms + range.others_least_ms < beat_ + beat_ * kRoundOffMargin;
}

// No recomputation, no offload and the sharding of the least synchronisation: no variant takes
// less time or end-of-step work (recomputation and offload only add to them).
std::optional<StageOption> StageOptions::optimistic(const RangeStage& range) const {
  StageOption option;
  option.begin = range.begin;
  option.end = range.end;
  option.replicas = range.replicas;
  option.tensor_degree = range.tensor_degree;
  option.context_degree = config_.context_degree;
  option.kind = context_.kind;
  option.fwd_ms = range.fwd.ms();
  option.bwd_ms = range.bwd.ms();
  option.p2p_ms = range.p2p_ms;
  option.allreduce_ms = std::numeric_limits<double>::infinity();
  for (auto sharding : kShardingChoices) {
    if (!allows(sharding, range.replicas) || sync_ms(range, sharding) >= option.allreduce_ms) continue;
    option.sharding = sharding;
    option.allreduce_ms = sync_ms(range, sharding);
  }
  option.t_ms = option.fwd_ms + option.bwd_ms + option.p2p_ms;
  option.term_ms = (config_.microbatches - 1) * option.t_ms + option.allreduce_ms;
  if (!below_beat(option, range)) return std::nullopt;
  option.max_in_flight = range.most_in_flight;
  return option;
}

int StageOptions::most_in_flight(int end, int devices) const {
  // The most stages after this one: one block and one device (one group of a forced degree)
  // each, or the forced count.
  int stage_devices = config_.group_devices(config_.tensor_degree.value_or(1));
  int stages_after = std::min(block_count() - end, (config_.pipeline_devices - devices) / stage_devices);
  if (config_.stages) stages_after = std::min(stages_after, *config_.stages - 1);
  return plan::microbatches_in_flight(config_.schedule, std::max(stages_after, 0), config_.microbatches);
}

StageOptions::RangeWork StageOptions::range_work(int begin, int end, int replicas, int tensor_degree) const {
  int sample = context_.blocks->sample_index(config_.microbatch_size / replicas);
  const BlockCosts::Split* split = group_split(tensor_degree);
  RangeWork work;
  for (int block = begin; block < end; ++block) work.add(*context_.blocks, split, block, sample);
  return work;
}

std::optional<StageOption> StageOptions::evaluate(int begin, int end, int replicas, plan::Recompute recompute,
                                                  plan::StateSharding sharding, bool offload, int tensor_degree) const {
  if (std::find(replica_choices_.begin(), replica_choices_.end(), replicas) == replica_choices_.end()) return std::nullopt;
  if (std::find(tensor_degrees_.begin(), tensor_degrees_.end(), tensor_degree) == tensor_degrees_.end()) return std::nullopt;
  if (replicas * config_.group_devices(tensor_degree) > config_.kind_devices(context_.kind)) return std::nullopt;
  const BlockCosts::Split* split = group_split(tensor_degree);
  if (split && (split->cuts_region_before[begin] || split->cuts_region_before[end])) return std::nullopt;
  if (replicas > 1 && context_.ranges->sends_batch_free(begin, end)) return std::nullopt;
  return evaluate(range_stage(begin, end, replicas, tensor_degree, range_work(begin, end, replicas, tensor_degree)), recompute,
                  sharding, offload);
}

plan::MemoryBreakdown StageOptions::memory(const StageOption& option, int in_flight, int shared_replicas) const {
  RangeWork work = range_work(option.begin, option.end, option.replicas, option.tensor_degree);
  const RangeStage range = range_stage(option.begin, option.end, option.replicas, option.tensor_degree, work);
  cost::StateLayout state = state_layout(option.replicas, option.sharding, option.offload);
  state.shared_replicas = shared_replicas;
  return cost::stage_memory(range.footprint, in_flight, option.recompute, state, context_.optimizer, context_.precision);
}

std::optional<PipelineSolution> evaluate_pipeline(const StageOptions& options, std::vector<StageOption> stages) {
  const SearchConfig& config = options.config();
  int stage_count = static_cast<int>(stages.size());
  if (config.stages && *config.stages != stage_count) return std::nullopt;
  PipelineSolution solution;
  int devices = 0;
  for (int s = 0; s < stage_count; ++s) {
    const StageOption& stage = stages[s];
    int kept = plan::microbatches_in_flight(config.schedule, stage_count - 1 - s, config.microbatches);
    if (kept > stage.max_in_flight) return std::nullopt;
    devices += stage.devices();
    solution.sum_ms += stage.t_ms;
    solution.largest_term_ms = std::max(solution.largest_term_ms, stage.term_ms);
  }
  if (devices > config.pipeline_devices) return std::nullopt;
  solution.stages = std::move(stages);
  return solution;
}

SegmentOptions::SegmentOptions(const StageOptions& options) : lists_{&options}, starts_{0, options.config().pipeline_devices} {}

SegmentOptions::SegmentOptions(const SearchContext& context, const SearchConfig& config, double beat,
                               StageOptions::Listing listing) {
  if (!config.mixed()) {
    owned_.emplace_back(context, config, beat, listing);
    lists_ = {&owned_.front()};
    starts_ = {0, config.pipeline_devices};
    return;
  }
  owned_.reserve(config.segments.size());
  starts_ = {0};
  for (const auto& segment : config.segments) {
    owned_.emplace_back(context.of_kind(segment.kind), config, beat, listing);
    starts_.push_back(starts_.back() + segment.devices);
  }
  for (const auto& options : owned_) lists_.push_back(&options);
}

double SegmentOptions::balanced_ms() const { return lists_.front()->balanced_ms(); }

double SegmentOptions::least_work_before(int begin, int devices) const {
  if (lists_.size() == 1) return lists_.front()->least_work_before(begin, devices);
  double least = std::numeric_limits<double>::infinity();
  for (const auto* list : lists_) least = std::min(least, list->least_work_before(begin, devices));
  return least;
}

namespace {

constexpr double kUnbounded = std::numeric_limits<double>::infinity();

// What the dynamic program minimises over a suffix's stages: the sum of their times (the
// objective's first part), or their largest term (whose least value over every pipeline bounds
// the second part of any round's objective, search_pipeline).
enum class Measure { kSumOfTimes, kLargestTerm };

// The dynamic program for one bound. A state is a suffix of the blocks: (first block, devices it
// uses); its frontier holds, per count of stages in the suffix (capped where it no longer
// matters), the least measure, keeping only entries not beaten by one with fewer stages. The
// suffix takes the last devices of the pipeline, so a stage's first block and the devices after
// it say which positions it takes, and so which segment's options (which kind) it may be.
//
// The blocks are solved last to first. The frontiers of the block being solved grow in one
// working row indexed by devices; once the block is done they are stored back to back, in
// ascending devices, and only read from then on.
class BoundedProgram {
 public:
  explicit BoundedProgram(const SegmentOptions& options)
      : options_(options),
        config_(options.config()),
        blocks_(options.block_count()),
        cells_(static_cast<std::size_t>(blocks_ + 1)),
        entries_(static_cast<std::size_t>(blocks_ + 1)),
        work_(static_cast<std::size_t>(config_.pipeline_devices + 1)) {
    cap_ = config_.stages ? *config_.stages : config_.schedule == plan::Schedule::kGPipe ? 1 : config_.microbatches;
    for (int stages = 0; stages <= cap_; ++stages)
      in_flight_.push_back(plan::microbatches_in_flight(config_.schedule, stages, config_.microbatches));
  }

  // The pipeline of the least measure with every stage term below `bound` (strictly), among
  // stages that can be part of a pipeline whose objective is below `beat` (t + term below it).
  // `term_floor`: no largest term of such a pipeline is lower. The sum program then leaves out
  // the suffixes that no pipeline below the beat can hold (prune_limit): whenever the pipeline it
  // finds without that is below the beat, it finds the same one.
  std::optional<PipelineSolution> solve(double bound, double beat, Measure measure = Measure::kSumOfTimes,
                                        double term_floor = 0);

 private:
  struct Entry {
    double value = 0;       // the measure of the suffix
    int stages = 0;
    int segment = 0;        // whose options the first stage is
    int option = -1;        // index into options.of(segment).from(first block)
    int next_devices = -1;  // state after the first stage
    int next_stages = -1;
  };
  // A non-empty frontier of a solved block: entries_[block][first, first + count).
  struct Cell {
    int devices = 0;
    int first = 0, count = 0;
  };
  void relax(int segment, int option_index, const StageOption& option, Measure measure);
  double prune_limit(const StageOption& option, int devices) const;
  void insert(std::vector<Entry>& entries, const Entry& entry) const;
  void store(int begin);
  const Cell* find_cell(int begin, int devices) const;
  PipelineSolution rebuild(int devices, const Entry& entry) const;

  const SegmentOptions& options_;
  const SearchConfig& config_;
  int blocks_;
  int cap_;
  std::vector<std::vector<Cell>> cells_;      // [first block]: its non-empty frontiers, ascending devices
  std::vector<std::vector<Entry>> entries_;   // [first block]: their entries, sorted by stage count within each
  std::vector<std::vector<Entry>> work_;      // [devices]: the frontiers of the block being solved
  std::vector<int> touched_;                  // devices whose working frontier is not empty
  std::vector<int> in_flight_;  // microbatches a stage keeps in flight, by the stages after it (at most cap_)
  double beat_ = std::numeric_limits<double>::infinity(), term_floor_ = 0;  // of the round being solved, for pruning
};

// A frontier holds at most one entry per stage count, sorted by it. Without a forced stage count
// its values also fall strictly as the counts rise (an entry with fewer stages and no more time
// beats the other), so the entries an insertion beats follow where it goes.
void BoundedProgram::insert(std::vector<Entry>& entries, const Entry& entry) const {
  auto at = std::lower_bound(entries.begin(), entries.end(), entry.stages,
                             [](const Entry& e, int stages) { return e.stages < stages; });
  if (config_.stages) {
    // Only equal counts compare.
    if (at != entries.end() && at->stages == entry.stages) {
      if (at->value <= entry.value) return;
      *at = entry;
      return;
    }
    entries.insert(at, entry);
    return;
  }
  // Fewer stages after a stage is never worse for memory, so an entry with no more stages and
  // no more time dominates: the one with the most stages up to this count has the least time.
  auto upto = at != entries.end() && at->stages == entry.stages ? at + 1 : at;
  if (upto != entries.begin() && std::prev(upto)->value <= entry.value) return;
  auto beaten_end = at;
  while (beaten_end != entries.end() && beaten_end->value >= entry.value) ++beaten_end;
  if (beaten_end == at) {
    entries.insert(at, entry);
  } else {
    *at = entry;
    entries.erase(at + 1, beaten_end);
  }
}

// The sum at which a suffix that starts with `option` on `devices` can no longer be part of a
// pipeline below the beat: with the least work before it, and the largest term's floor or the
// option's own term, the objective would reach the beat (a margin over round-off keeps every
// pipeline that could win). Leaving out such suffixes changes no pipeline the search finds below
// the beat (stage_search.h).
double BoundedProgram::prune_limit(const StageOption& option, int devices) const {
  if (beat_ == kUnbounded) return kUnbounded;
  const double term = std::max(term_floor_, option.term_ms);
  return beat_ + beat_ * kRoundOffMargin - term - options_.least_work_before(option.begin, config_.pipeline_devices - devices);
}

void BoundedProgram::relax(int segment, int option_index, const StageOption& option, Measure measure) {
  const Entry* after_entries = entries_[option.end].data();
  // The stage takes positions [D - devices, D - cell.devices): within its segment. Ascending
  // devices, so once one is too many every later one is.
  const int least_after = config_.pipeline_devices - options_.end_position(segment);
  const int most = config_.pipeline_devices - options_.first_position(segment);
  const auto& cells = cells_[option.end];
  auto first = least_after == 0 ? cells.begin()
                                : std::lower_bound(cells.begin(), cells.end(), least_after,
                                                   [](const Cell& c, int d) { return c.devices < d; });
  for (auto at = first; at != cells.end(); ++at) {
    const Cell& cell = *at;
    int devices = cell.devices + option.devices();
    if (devices > most) break;
    auto& entries = work_[devices];
    bool was_empty = entries.empty();
    const double limit = measure == Measure::kSumOfTimes ? prune_limit(option, devices) : kUnbounded;
    for (const Entry* after = after_entries + cell.first, *last = after + cell.count; after != last; ++after) {
      // Entries are sorted by stage count, and the microbatches in flight only grow with it.
      if (in_flight_[after->stages] > option.max_in_flight) break;
      double value = measure == Measure::kSumOfTimes ? after->value + option.t_ms : std::max(after->value, option.term_ms);
      if (value >= limit) continue;
      int stages = after->stages + 1;
      if (config_.stages) {
        // With a forced count, the blocks and devices before this stage must take the rest, one each at least.
        int before = cap_ - stages;
        if (before < 0) break;
        if (before > option.begin || devices + before > config_.pipeline_devices) continue;
      }
      insert(entries, {value, std::min(stages, cap_), segment, option_index, cell.devices, after->stages});
    }
    // A frontier never empties again once it has an entry.
    if (was_empty && !entries.empty()) touched_.push_back(devices);
  }
}

void BoundedProgram::store(int begin) {
  std::sort(touched_.begin(), touched_.end());
  auto& cells = cells_[begin];
  auto& entries = entries_[begin];
  cells.clear();
  entries.clear();
  for (int devices : touched_) {
    auto& work = work_[devices];
    cells.push_back({devices, static_cast<int>(entries.size()), static_cast<int>(work.size())});
    entries.insert(entries.end(), work.begin(), work.end());
    work.clear();
  }
  touched_.clear();
}

const BoundedProgram::Cell* BoundedProgram::find_cell(int begin, int devices) const {
  const auto& cells = cells_[begin];
  auto at = std::lower_bound(cells.begin(), cells.end(), devices, [](const Cell& c, int d) { return c.devices < d; });
  return at != cells.end() && at->devices == devices ? &*at : nullptr;
}

std::optional<PipelineSolution> BoundedProgram::solve(double bound, double beat, Measure measure, double term_floor) {
  beat_ = beat;
  term_floor_ = term_floor;
  cells_[blocks_] = {{0, 0, 1}};
  entries_[blocks_] = {{0, 0, 0, -1, -1, -1}};
  for (int begin = blocks_ - 1; begin >= 0; --begin) {
    for (int segment = 0; segment < options_.count(); ++segment) {
      const auto& list = options_.of(segment).from(begin);
      for (int i = 0; i < static_cast<int>(list.size()); ++i)
        if (list[i].term_ms < bound && list[i].t_ms + list[i].term_ms < beat) relax(segment, i, list[i], measure);
    }
    store(begin);
  }
  const Entry* best = nullptr;
  int best_devices = 0;
  for (const Cell& cell : cells_[0]) {
    // A mixed pipeline's positions are its kinds' ranks: each is used (the placement has no
    // unused ranks between kinds).
    if (config_.mixed() && cell.devices != config_.pipeline_devices) continue;
    for (int k = cell.first; k < cell.first + cell.count; ++k) {
      const Entry& entry = entries_[0][k];
      if (entry.stages < 1 || (config_.stages && entry.stages != *config_.stages)) continue;
      if (!best || entry.value < best->value) best = &entry, best_devices = cell.devices;
    }
  }
  if (!best) return std::nullopt;
  return rebuild(best_devices, *best);
}

PipelineSolution BoundedProgram::rebuild(int devices, const Entry& first) const {
  PipelineSolution solution;
  int begin = 0;
  const Entry* entry = &first;
  while (begin < blocks_) {
    const StageOption& option = options_.of(entry->segment).from(begin)[entry->option];
    solution.stages.push_back(option);
    solution.sum_ms += option.t_ms;
    solution.largest_term_ms = std::max(solution.largest_term_ms, option.term_ms);
    begin = option.end;
    devices = entry->next_devices;
    int stages = entry->next_stages;
    const Cell* cell = find_cell(begin, devices);
    const Entry* entries = entries_[begin].data() + cell->first;
    entry = std::find_if(entries, entries + cell->count, [&](const Entry& e) { return e.stages == stages; });
  }
  return solution;
}

}  // namespace

namespace {

// The least largest term of a pipeline whose terms are below `bound` and whose stages are below
// `beat`, which every later round's pipeline (a bound and a beat no higher) has at least;
// infinity when there is none.
double least_largest_term_below(BoundedProgram& program, double bound, double beat) {
  auto solution = program.solve(bound, beat, Measure::kLargestTerm);
  return solution ? solution->largest_term_ms : std::numeric_limits<double>::infinity();
}

double least_stage_term(const SegmentOptions& options) {
  double least = kUnbounded;
  for (int segment = 0; segment < options.count(); ++segment)
    for (int begin = 0; begin < options.block_count(); ++begin)
      for (const auto& option : options.of(segment).from(begin)) least = std::min(least, option.term_ms);
  return least;
}

// What no pipeline's largest term is below: the least stage term, and (M - 1) times the balanced
// share of a microbatch's work (StageOptions::balanced_ms).
double largest_term_floor(const SegmentOptions& options, double least_term) {
  return std::max(least_term, (options.config().microbatches - 1) * options.balanced_ms());
}

}  // namespace

bool has_pipeline(const SegmentOptions& options) {
  return BoundedProgram(options).solve(kUnbounded, kUnbounded).has_value();
}

bool may_beat(const SearchContext& context, const SearchConfig& config, double beat_ms) {
  if (config.chunks > 1 || beat_ms == kUnbounded) return true;
  SegmentOptions optimistic(context, config, beat_ms, StageOptions::Listing::kOptimistic);
  // The round leaves out only what no pipeline of these stages below the beat holds, and every
  // pipeline of variants has a pipeline of these that is no slower, stage by stage: when the
  // round finds none, no pipeline of variants comes below the beat.
  const double floor = largest_term_floor(optimistic, least_stage_term(optimistic));
  return BoundedProgram(optimistic).solve(kUnbounded, beat_ms, Measure::kSumOfTimes, floor).has_value();
}

std::optional<PipelineSolution> search_pipeline(const SegmentOptions& options, double beat_ms) {
  const SearchConfig& config = options.config();
  const double least_term = least_stage_term(options);
  int most_stages = config.stages ? *config.stages : std::min(config.pipeline_devices, options.block_count());
  BoundedProgram program(options);
  std::optional<PipelineSolution> best;
  std::optional<double> least_largest_term;
  double term_floor = largest_term_floor(options, least_term);
  auto solution = program.solve(kUnbounded, beat_ms, Measure::kSumOfTimes, term_floor);
  while (solution) {
    if (solution->objective_ms() < beat_ms) beat_ms = solution->objective_ms(), best = solution;
    // Later rounds never lower the sum; their largest term is at least the least option's,
    // (M - 1) times the mean stage time, and (M - 1) times the balanced share of the work.
    double spread = (config.microbatches - 1) * std::max(solution->sum_ms / most_stages, options.balanced_ms());
    if (solution->sum_ms + std::max(least_term, spread) >= beat_ms) break;
    // Nor can a later pipeline beat `beat_ms` with a largest term of beat_ms - sum or more: the
    // next round is bounded there at once, which skips only rounds that could not win, and
    // finds the pipeline the first round below it would (a margin over round-off keeps every
    // pipeline that could win).
    double bound = std::min(solution->largest_term_ms, beat_ms - solution->sum_ms + beat_ms * kRoundOffMargin);
    // No pipeline has all its terms below the least largest term: once that is the bound, the
    // round would find nothing (one program more, computed once, spares it).
    if (!least_largest_term) {
      least_largest_term = least_largest_term_below(program, bound, beat_ms);
      term_floor = std::max(term_floor, *least_largest_term);
    }
    if (*least_largest_term >= bound) break;
    solution = program.solve(bound, beat_ms, Measure::kSumOfTimes, term_floor);
  }
  return best;
}

}  // namespace rannc::partition
