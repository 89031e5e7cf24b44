#include "partitioner/planner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <limits>
#include <set>
#include <stdexcept>
#include <thread>

#include "cost_model/comm.h"
#include "partitioner/shared_stage.h"
#include "support/error.h"
#include "support/format.h"

namespace rannc::partition {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

// Ascending divisors of n (n fits an int: the request checks the batch).
std::vector<int> divisors(std::int64_t n) {
  std::vector<int> small, large;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(static_cast<int>(d));
    if (d * d != n) large.push_back(static_cast<int>(n / d));
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

// The tensor-parallel degrees to cost: each of kTensorDegrees that divides a node's devices, or
// the forced one.
std::vector<int> tensor_degrees(const PlanRequest& request) {
  if (request.tensor_degree) return {*request.tensor_degree};
  std::vector<int> degrees;
  for (int degree : kTensorDegrees)
    if (request.cluster.gpus_per_node % degree == 0 && degree <= request.max_tensor_degree) degrees.push_back(degree);
  return degrees;
}

// The degrees a config may run its stages at: the forced one, or 1 and each costed degree that a
// layer region of the model allows.
std::vector<int> config_tensor_degrees(const PlanRequest& request, const TensorRegions& regions) {
  if (request.tensor_degree) return {*request.tensor_degree};
  std::vector<int> degrees{1};
  for (int degree : tensor_degrees(request))
    if (regions.allows_degree(degree)) degrees.push_back(degree);
  return degrees;
}

// The context degrees a config may take: the forced one, or 1 and each of kContextDegrees up to
// --context-parallel whose groups tile the nodes, where the model allows it (not on a mixed
// cluster, whose pipelines hold no group of a size every kind divides).
std::vector<int> context_degrees(const PlanRequest& request, const ContextSplit& split) {
  if (request.context_degree) return {*request.context_degree};
  std::vector<int> degrees{1};
  if (!split.allowed || request.cluster.mixed()) return degrees;
  for (int degree : kContextDegrees)
    if (request.cluster.tiles_nodes(degree) && degree <= request.max_context_degree) degrees.push_back(degree);
  return degrees;
}

// Every per-replica microbatch size some config may run.
std::vector<int> sample_sizes(const std::vector<SearchConfig>& configs) {
  std::set<int> sizes;
  for (const auto& config : configs) {
    for (int r = 1; r <= config.pipeline_devices; ++r)
      if (config.microbatch_size % r == 0) sizes.insert(config.microbatch_size / r);
    for (int shared : shared_stage_samples(config)) sizes.insert(shared);
  }
  return {sizes.begin(), sizes.end()};
}

double whole_step_ms(const ir::Graph& graph, const cost::CostModel& costs, double fraction) {
  cost::StepTime step;
  for (const auto& op : graph.ops()) step.add(costs.op_cost(op.id, fraction));
  return step.ms();
}

// FLOPs scale with the batch: the op works are at the evaluated batch, `fraction` scales them.
double step_model_flops(const ir::Graph& graph, const cost::CostModel& costs, double fraction) {
  double flops = 0;
  for (const auto& op : graph.ops()) flops += costs.work(op.id).flops_fwd + costs.work(op.id).flops_bwd;
  return flops * fraction;
}

// The bounds beside the simulated step. The peak is the best the device does at this precision
// (its matmul peak: tensor cores under mixed precision), so the FLOP bound holds for every op.
// On a mixed cluster the peak is every kind's together.
void set_bounds(plan::Prediction& predicted, const StepBounds& bounds, const cost::Cluster& cluster,
                plan::Precision precision) {
  const double devices = cluster.gpus();
  // The mean peak of a device (its own on a uniform cluster: the same figures to the last bit).
  double peak = cost::peak_flops(cluster.device, precision, cost::OpClass::kMatMul);
  if (cluster.mixed()) {
    double peak_sum = 0;
    for (int kind = 0; kind < cluster.kinds(); ++kind)
      peak_sum += cost::peak_flops(cluster.kind_view(kind).device, precision, cost::OpClass::kMatMul) * cluster.kind_gpus(kind);
    peak = peak_sum / devices;
  }
  const double step_s = predicted.iteration_ms / 1e3;
  predicted.lower_bound_ms = bounds.lower_bound_ms;
  predicted.efficiency = step_s > 0 ? bounds.lower_bound_ms / predicted.iteration_ms : 0;
  predicted.flop_bound_ms = peak > 0 ? bounds.model_flops / (peak * devices) * 1e3 : 0;
  double flops_per_device = step_s > 0 ? bounds.model_flops / step_s / devices : 0;
  predicted.model_tflops_per_device = flops_per_device / 1e12;
  predicted.peak_fraction = peak > 0 ? flops_per_device / peak : 0;
}

// For memory suggestions: the most memory-friendly config of each pipeline width (the most
// microbatches; recomputation is an option of every stage anyway).
bool any_config_fits(const SearchContext& context, const std::vector<SearchConfig>& configs) {
  // Interleaving keeps more in flight, never less: its configs count only where it is forced.
  const bool forced_interleave = std::all_of(configs.begin(), configs.end(), [](const auto& c) { return c.chunks > 1; });
  std::vector<SearchConfig> widest;
  for (const auto& config : configs) {
    if (config.chunks > 1 && !forced_interleave) continue;
    if (!widest.empty() && widest.back().pipeline_devices == config.pipeline_devices) widest.back() = config;
    else widest.push_back(config);
  }
  for (const auto& config : widest) {
    if (config.chunks > 1 ? search_interleaved(StageOptions(context, config), std::numeric_limits<double>::infinity()).has_value()
                          : has_pipeline(SegmentOptions(context, config)))
      return true;
  }
  return false;
}

cost::Cluster with_devices(cost::Cluster cluster, int devices) {
  if (devices <= cluster.gpus_per_node) cluster.gpus_per_node = devices, cluster.nodes = 1;
  else cluster.nodes = devices / cluster.gpus_per_node;
  return cluster;
}

// The most devices what_would_fit tries (docs/contract.md: the least device count that would work).
constexpr int kMaxSuggestedDevices = 65536;

// What would fit, for a request no plan meets: the fewest devices of this memory and the least
// memory on this count, each found with the search's own feasibility test on the changed cluster.
// The count doubles until it fits, then the whole nodes between the last two counts are tried
// (bisected where there are many), so the count named is one that holds the model.
std::string what_would_fit(const ir::Graph& graph, const UnitGraph& units, const Blocking& blocking,
                           const TensorRegions& regions, const ContextSplit& context_split, const cost::CostModel& costs,
                           const cost::ActivationMemory& activations, std::int64_t evaluated_batch,
                           const PlanRequest& request) {
  auto fits = [&](const cost::Cluster& cluster) {
    PlanRequest trial = request;
    trial.cluster = cluster;
    const std::vector<int> contexts = context_degrees(trial, context_split);
    auto configs = candidate_configs(trial, blocking.count(), config_tensor_degrees(trial, regions), contexts);
    if (configs.empty()) return false;
    BlockCosts blocks = block_costs(graph, units, blocking, costs, activations, evaluated_batch, sample_sizes(configs),
                                    regions, tensor_degrees(trial), context_split, contexts);
    RangeTable ranges(blocks);
    SearchContext context{&blocks,           &ranges,           &trial.cluster,         request.optimizer,
                          request.precision, request.state_sharding, request.recompute};
    return any_config_fits(context, configs);
  };
  const cost::Cluster& cluster = request.cluster;
  const std::string memory = human_bytes(static_cast<double>(cluster.mem_bytes));
  auto devices_of = [](std::int64_t count, const std::string& size) {
    return std::to_string(count) + (count == 1 ? " device of " : " devices of ") + size;
  };

  // The fewest devices of this memory. Beyond one device per sample and block, more cannot help.
  const double useful = static_cast<double>(request.global_batch) * blocking.count();
  const int limit = std::min(kMaxSuggestedDevices, cost::kMaxDevices);
  const int per_node = cluster.gpus_per_node;
  int failed = cluster.gpus(), fitting = 0;
  for (int devices = failed * 2; devices <= limit && devices <= useful; devices *= 2) {
    if (fits(with_devices(cluster, devices))) {
      fitting = devices;
      break;
    }
    failed = devices;
  }
  if (fitting) {
    // Counts of whole nodes between the last that failed and the first that fit.
    int low = failed / per_node, high = fitting / per_node;
    constexpr int kScanned = 16;
    if (high - low - 1 <= kScanned) {
      for (int nodes = low + 1; nodes < high; ++nodes)
        if (fits(with_devices(cluster, nodes * per_node))) {
          high = nodes;
          break;
        }
    } else {
      while (high - low > 1) {
        int middle = low + (high - low) / 2;
        (fits(with_devices(cluster, middle * per_node)) ? high : low) = middle;
      }
    }
    fitting = high * per_node;
  }

  // The least memory on this count, within 2%.
  double low = static_cast<double>(cluster.mem_bytes), high = low;
  cost::Cluster trial = cluster;
  for (trial.mem_bytes = static_cast<std::int64_t>(high * 2); trial.mem_bytes <= cost::kMaxMemBytes;
       trial.mem_bytes *= 2) {
    if (fits(trial)) {
      high = static_cast<double>(trial.mem_bytes);
      break;
    }
    low = static_cast<double>(trial.mem_bytes);
  }
  std::string more_memory;
  if (high > low) {
    while (high / low > 1.02) {
      trial.mem_bytes = static_cast<std::int64_t>(std::sqrt(low * high));
      (fits(trial) ? high : low) = static_cast<double>(trial.mem_bytes);
    }
    more_memory = devices_of(cluster.gpus(), human_bytes(high));
  }

  const std::string no_count = failed > cluster.gpus()
                                   ? "no count up to " + devices_of(failed, memory) + " holds it"
                                   : "more devices of " + memory + " do not help at a batch of " +
                                         std::to_string(request.global_batch);
  if (fitting && !more_memory.empty()) return "it would fit on " + devices_of(fitting, memory) + " (or " + more_memory + ")";
  if (fitting) return "it would fit on " + devices_of(fitting, memory) + " (no memory size up to " +
                      human_bytes(static_cast<double>(cost::kMaxMemBytes)) + " on " + std::to_string(cluster.gpus()) + ")";
  if (!more_memory.empty()) return "it would fit on " + more_memory + "; " + no_count;
  return no_count + ", nor " + devices_of(cluster.gpus(), "up to " + human_bytes(static_cast<double>(cost::kMaxMemBytes)));
}

// "16 devices of 40 GiB and 16 of 80 GiB", for messages about a mixed cluster.
std::string cluster_memory(const cost::Cluster& cluster) {
  std::string text;
  for (int kind = 0; kind < cluster.kinds(); ++kind) {
    const cost::Cluster view = cluster.kind_view(kind);
    text += (kind == 0 ? plural(view.gpus(), "device") : (kind + 1 == cluster.kinds() ? " and " : ", ") + std::to_string(view.gpus())) +
            " of " + human_bytes(static_cast<double>(view.mem_bytes));
  }
  return text;
}

}  // namespace

namespace {

// The model chunks per device group a request allows: the forced count, else 1 and (under 1F1B,
// with the stage count free) each of kInterleaveChunks up to the request's most.
std::vector<int> chunk_choices(const PlanRequest& request) {
  if (request.interleave) return {*request.interleave};
  std::vector<int> choices{1};
  if (request.schedule != plan::Schedule::k1F1B || request.stages || request.fixed_microbatch) return choices;
  for (int chunks : kInterleaveChunks)
    if (chunks <= request.max_interleave) choices.push_back(chunks);
  return choices;
}

}  // namespace

namespace {

// How the devices split into pipelines: P pipelines of D devices, and on a mixed cluster the
// devices of each kind in one pipeline, in pipeline order.
struct PipelineWidth {
  int devices = 1;
  int pipelines = 1;
  std::vector<KindSegment> segments;
};

// The orders of a mixed cluster's kinds along a pipeline: every one for up to 3 kinds, else the
// given one and its reverse.
std::vector<std::vector<int>> kind_orders(int kinds) {
  std::vector<int> order(static_cast<std::size_t>(kinds));
  for (int k = 0; k < kinds; ++k) order[static_cast<std::size_t>(k)] = k;
  std::vector<std::vector<int>> orders;
  if (kinds <= 3) {
    do orders.push_back(order);
    while (std::next_permutation(order.begin(), order.end()));
    return orders;
  }
  orders.push_back(order);
  std::reverse(order.begin(), order.end());
  orders.push_back(order);
  return orders;
}

// Pipelines sit on identical node groups: a uniform cluster's every width that tiles nodes; a
// mixed cluster's pipeline takes an equal part of every kind (each part tiling that kind's
// nodes), its kinds in each order.
std::vector<PipelineWidth> pipeline_widths(const cost::Cluster& cluster) {
  std::vector<PipelineWidth> widths;
  if (!cluster.mixed()) {
    for (int width : divisors(cluster.gpus()))
      // Pipelines sit on identical node groups.
      if (cluster.tiles_nodes(width)) widths.push_back({width, cluster.gpus() / width, {}});
    return widths;
  }
  for (int pipelines : divisors(cluster.kind_gpus(0))) {
    bool tiles = true;
    for (int kind = 0; kind < cluster.kinds(); ++kind) {
      const int devices = cluster.kind_gpus(kind);
      tiles = tiles && devices % pipelines == 0 && cluster.tiles_nodes(devices / pipelines);
    }
    if (!tiles) continue;
    for (const auto& order : kind_orders(cluster.kinds())) {
      PipelineWidth width{0, pipelines, {}};
      for (int kind : order) width.segments.push_back({kind, cluster.kind_gpus(kind) / pipelines});
      for (const auto& segment : width.segments) width.devices += segment.devices;
      widths.push_back(width);
    }
  }
  // Ascending devices per pipeline, as on a uniform cluster.
  std::stable_sort(widths.begin(), widths.end(), [](const auto& a, const auto& b) { return a.devices < b.devices; });
  return widths;
}

// Whether every stage of a degree can sit on each kind: the degree divides every segment.
bool segments_allow(const PipelineWidth& width, int degree) {
  if (width.devices % degree != 0) return false;
  return std::all_of(width.segments.begin(), width.segments.end(), [&](const KindSegment& s) { return s.devices % degree == 0; });
}

}  // namespace

std::vector<SearchConfig> candidate_configs(const PlanRequest& request, int blocks, const std::vector<int>& tensor_degrees,
                                            const std::vector<int>& context_degrees) {
  std::vector<SearchConfig> configs;
  const std::vector<int> chunk_options = chunk_choices(request);
  for (const PipelineWidth& layout : pipeline_widths(request.cluster)) {
    const int width = layout.devices;
    if (request.stages && *request.stages > width) continue;
    int pipelines = layout.pipelines;
    if (request.pipelines && pipelines != *request.pipelines) continue;
    if (request.global_batch % pipelines != 0) continue;
    std::int64_t per_pipeline = request.global_batch / pipelines;
    for (int microbatches : divisors(per_pipeline)) {
      if (microbatches > kMaxMicrobatches) break;
      if (request.microbatches && microbatches != *request.microbatches) continue;
      for (int context : context_degrees)
      for (int degree : tensor_degrees) {
        const int group = degree * context;  // the devices of one replica
        if (!segments_allow(layout, group) || !request.cluster.tiles_nodes(group)) continue;
        SearchConfig config;
        config.pipelines = pipelines;
        config.pipeline_devices = width;
        config.segments = layout.segments;
        config.microbatches = microbatches;
        config.microbatch_size = static_cast<int>(per_pipeline / microbatches);
        if (request.fixed_microbatch && config.microbatch_size != *request.fixed_microbatch) continue;
        config.replica_samples = request.fixed_microbatch;
        // A pipeline has at most one stage per block and a stage at most one replica per sample
        // (of a tensor-parallel group each).
        if (static_cast<std::int64_t>(width) > static_cast<std::int64_t>(blocks) * config.microbatch_size * group) continue;
        config.schedule = request.schedule;
        config.stages = request.stages;
        config.tensor_degree = degree;
        config.context_degree = context;
        for (int chunks : chunk_options) {
          // Interleaving needs two groups at least, each with a microbatch, and two blocks a chunk;
          // a mixed pipeline's chunks would straddle its kinds.
          if (chunks > 1 && (width / group < 2 || microbatches < 2 || 2 * chunks > blocks || config.mixed())) continue;
          config.chunks = chunks;
          configs.push_back(config);
        }
      }
    }
  }
  // Interleaved configs first: their search is quick, and the best of them bounds the others'
  // (the configs of one round then share their cost evenly over the cores).
  std::stable_partition(configs.begin(), configs.end(), [](const SearchConfig& c) { return c.chunks > 1; });
  return configs;
}

namespace {

// A config's best pipeline below `beat`: the stage search's, or on a mixed config the stage its
// kinds share (shared_stage.h) where that is better.
std::optional<PipelineSolution> best_pipeline(const SearchContext& context, const SegmentOptions& options, double beat) {
  auto found = search_pipeline(options, beat);
  auto shared = search_shared_stage(context, options.config(), found ? found->objective_ms() : beat);
  return shared ? shared : found;
}

// A small search also tries every other stage count of each config within the slack, each
// stage count's best pipeline whatever the formula makes of it: on few blocks and devices the
// bubble and the transfers, which the formula only estimates, decide, and the simulation orders
// them (a tensor-parallel config the formula ranks first would otherwise push a faster stage
// count of another config out of the slack).
void add_stage_counts(const SearchContext& context, std::vector<ConfigChoice>& near, SearchCensus& census) {
  const double beat = std::numeric_limits<double>::infinity();
  const std::size_t free_choices = near.size();
  const int blocks = context.blocks->count();
  for (std::size_t i = 0; i < free_choices; ++i) {
    SearchConfig forced = near[i].config;
    if (forced.stages || forced.chunks > 1 ||
        static_cast<std::int64_t>(blocks) * forced.pipeline_devices > kExhaustiveStageCounts)
      continue;
    const int chosen = static_cast<int>(near[i].solution.stages.size());
    for (int stages = 1; stages <= std::min(forced.pipeline_devices, blocks); ++stages) {
      if (stages == chosen) continue;
      forced.stages = stages;
      SegmentOptions options(context, forced, beat);
      ++census.searched;
      if (auto solution = best_pipeline(context, options, beat)) near.push_back({forced, *solution});
    }
  }
}

}  // namespace

namespace {

// kRankingSlack, or kSmallSearchSlack on a small search.
double ranking_slack(const SearchContext& context, const std::vector<SearchConfig>& configs) {
  const std::int64_t blocks = context.blocks->count();
  bool small = std::all_of(configs.begin(), configs.end(), [&](const SearchConfig& c) {
    return blocks * c.pipeline_devices <= kExhaustiveStageCounts;
  });
  return small ? kSmallSearchSlack : kRankingSlack;
}

// One config searched against the best objective known when its round began.
struct ConfigOutcome {
  bool bounded_out = false;
  std::optional<PipelineSolution> solution;  // below the slack of that best
  std::optional<PipelineSolution> slower;    // with `explain`, when none is: its best at all
};

ConfigOutcome search_config(const SearchContext& context, const SearchConfig& config, double beat, bool explain) {
  ConfigOutcome outcome;
  // No step of the config is shorter than M times the balanced share of a microbatch's work.
  if (config.microbatches * balanced_ms(context, config) >= beat) {
    outcome.bounded_out = true;
    return outcome;
  }
  // Most configs that cannot win are ruled out at a fraction of the cost of listing their
  // stages; --explain searches them again without the bound, so it lists them all.
  // (A mixed config's stage shared by its kinds is not among them: it is tried still.)
  if (!explain && !may_beat(context, config, beat)) {
    outcome.solution = search_shared_stage(context, config, beat);
    return outcome;
  }
  // --explain searches the config again without the bound: every stage must be listed then.
  const double listed_beat = explain ? std::numeric_limits<double>::infinity() : beat;
  std::optional<StageOptions> interleaved;
  std::optional<SegmentOptions> segments;
  if (config.chunks > 1) interleaved.emplace(context, config, listed_beat);
  else segments.emplace(context, config, listed_beat);
  auto search = [&](double below) {
    return interleaved ? search_interleaved(*interleaved, below) : best_pipeline(context, *segments, below);
  };
  outcome.solution = search(beat);
  if (!outcome.solution && explain) outcome.slower = search(std::numeric_limits<double>::infinity());
  return outcome;
}

}  // namespace

std::size_t search_threads() {
  return std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, kSearchRound);
}

std::vector<ConfigChoice> search_configs(const SearchContext& context, const std::vector<SearchConfig>& configs,
                                         SearchCensus* census_out, const PhaseObserver& observe, std::size_t threads) {
  if (threads == 0) threads = search_threads();
  SearchCensus local;
  SearchCensus& census = census_out ? *census_out : local;
  census.candidates += static_cast<int>(configs.size());
  std::vector<ConfigChoice> near;
  double best = std::numeric_limits<double>::infinity();
  const double slack = ranking_slack(context, configs);
  census.slack = slack;
  auto told = Clock::now();
  // Rounds of kSearchRound configs, shared by the threads, each config searched against
  // the best of the rounds before: the outcome depends on the rounds, never on which thread takes
  // which config, so the census is the same on every run, and the plan the same as one config at a
  // time would give (every config within the slack of the final best is found whatever bound it
  // was searched with).
  std::vector<ConfigOutcome> round(kSearchRound);
  for (std::size_t first = 0; first < configs.size(); first += kSearchRound) {
    if (observe && elapsed_ms(told) >= 1000) {
      observe("searching: " + std::to_string(first) + " of " + std::to_string(configs.size()) + " candidate layouts");
      told = Clock::now();
    }
    const double beat = best * slack;
    const std::size_t count = std::min(kSearchRound, configs.size() - first);
    std::atomic<std::size_t> next{0};
    // A config that throws (out of memory) fails the search as it would on one thread: the
    // first config's exception in the round's order is rethrown once every thread has stopped.
    std::vector<std::exception_ptr> thrown(count);
    auto work = [&] {
      for (std::size_t k = next++; k < count; k = next++) {
        try {
          round[k] = search_config(context, configs[first + k], beat, census.explain);
        } catch (...) {
          thrown[k] = std::current_exception();
        }
      }
    };
    std::vector<std::thread> helpers;
    for (std::size_t t = 1; t < std::min(threads, count); ++t) helpers.emplace_back(work);
    work();
    for (auto& helper : helpers) helper.join();
    for (const auto& exception : thrown)
      if (exception) std::rethrow_exception(exception);
    for (std::size_t k = 0; k < count; ++k) {
      const ConfigOutcome& outcome = round[k];
      if (outcome.bounded_out) {
        ++census.bounded_out;
        continue;
      }
      ++census.searched;
      if (!outcome.solution) {
        ++census.failed;
        if (outcome.slower) census.beyond_slack.push_back({configs[first + k], *outcome.slower});
        else if (census.explain) ++census.no_fit;
        continue;
      }
      best = std::min(best, outcome.solution->objective_ms());
      near.push_back({configs[first + k], *outcome.solution});
    }
  }
  auto beyond_slack = [&](const ConfigChoice& c) { return c.solution.objective_ms() >= best * slack; };
  // Those found before a better best came along may lie beyond its slack.
  auto kept = std::stable_partition(near.begin(), near.end(), [&](const ConfigChoice& c) { return !beyond_slack(c); });
  census.slower += static_cast<int>(near.end() - kept);
  if (census.explain) census.beyond_slack.insert(census.beyond_slack.end(), kept, near.end());
  near.erase(kept, near.end());
  census.near += static_cast<int>(near.size());
  add_stage_counts(context, near, census);
  return near;
}

namespace {

// Where each stage's devices start in its pipeline, and (last) the devices a pipeline takes.
// Without tensor parallelism the stages follow each other. With it, the stages of the largest
// degree come first, then the next, ...: every group then starts at a multiple of its size, so
// none straddles a node (group sizes are powers of two that divide a node's devices or fill
// whole nodes), and the pipelines take a multiple of the largest group each, so the next one
// starts aligned too.
std::vector<int> stage_offsets(const std::vector<StageOption>& stages) {
  std::vector<std::size_t> order(stages.size());
  for (std::size_t s = 0; s < order.size(); ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return stages[a].group_devices() > stages[b].group_devices(); });
  std::vector<int> offsets(stages.size() + 1, 0);
  int next = 0;
  for (auto s : order) offsets[s] = next, next += stages[s].devices();
  int largest = stages.empty() ? 1 : stages[order.front()].group_devices();
  offsets.back() = (next + largest - 1) / largest * largest;
  return offsets;
}

// A mixed pipeline's stages follow each other along its segments, every device used (the search
// keeps each stage within its kind's segment).
std::vector<int> mixed_stage_offsets(const std::vector<StageOption>& stages) {
  std::vector<int> offsets{0};
  for (const auto& stage : stages) offsets.push_back(offsets.back() + stage.devices());
  return offsets;
}

// The rank at `position` of pipeline p: pipelines take consecutive ranks (`used` each) on a
// uniform cluster; on a mixed one, a segment's positions are the pipeline's part of its kind's
// ranks.
int pipeline_rank(const cost::Cluster& cluster, const SearchConfig& config, int used, int pipeline, int position) {
  if (!config.mixed()) return pipeline * used + position;
  for (const auto& segment : config.segments) {
    if (position < segment.devices)
      return cluster.first_rank_of_kind(segment.kind) + pipeline * segment.devices + position;
    position -= segment.devices;
  }
  throw std::logic_error("a stage beyond its mixed pipeline's devices");
}

// The pipeline on its ranks, simulated: what ranking the candidates needs, without their memory.
PlacedPipeline place(const SearchContext& context, const ConfigChoice& choice, std::int64_t global_batch) {
  const SearchConfig& config = choice.config;
  const cost::Cluster& cluster = *context.cluster;
  PlacedPipeline placed;
  placed.config = config;
  placed.global_batch = global_batch;
  placed.search_objective_ms = choice.solution.objective_ms();
  std::vector<SimulatedStage> simulated;
  std::vector<int> replicas;
  // Pipelines take consecutive ranks, so the ranks in use are 0..R-1 (what `mpirun -np R`
  // starts) and devices a pipeline leaves unused come last. A mixed cluster's pipeline takes its
  // part of each kind's ranks, every one of them (pipeline_rank).
  // Interleaved, the chunks s, s + groups, ... share the devices of group s.
  const auto& stages = choice.solution.stages;
  const std::size_t groups = stages.size() / static_cast<std::size_t>(config.chunks);
  const std::vector<StageOption> first_chunks(stages.begin(), stages.begin() + static_cast<std::ptrdiff_t>(groups));
  auto offsets = config.mixed() ? mixed_stage_offsets(first_chunks) : stage_offsets(first_chunks);
  int used = offsets.back();
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const StageOption& option = stages[s];
    PlannedStage stage;
    stage.option = option;
    for (int p = 0; p < config.pipelines; ++p)
      for (int i = 0; i < option.devices(); ++i)
        stage.ranks.push_back(pipeline_rank(cluster, config, used, p, offsets[s % groups] + i));
    // Each device synchronises its slice of the weights with the devices of the same tensor rank
    // (of every context rank too), over its kind's links (its ranks numbered within the kind's nodes).
    double elements = context.ranges->param_elements(option.begin, option.end, option.tensor_degree);
    // A stage shared by the kinds synchronises over the whole cluster.
    const bool shared = !option.shares.empty();
    const int kind_first_rank = shared ? 0 : cluster.first_rank_of_kind(option.kind);
    std::vector<int> sync_ranks;
    for (std::size_t i = 0; i < stage.ranks.size(); i += static_cast<std::size_t>(option.tensor_degree))
      sync_ranks.push_back(stage.ranks[i] - kind_first_rank);
    if (elements > 0)
      stage.allreduce_ms = cost::gradient_sync_seconds(shared ? cluster : *context.of_kind(option.kind).cluster, sync_ranks,
                                                       elements, option.sharding, context.precision) * 1e3;
    stage.host_mem_bytes = cost::host_memory_bytes(
        elements, context.optimizer, {config.pipelines * option.replicas * option.context_degree, option.sharding, option.offload});
    // The host's part of an offloaded stage follows its last backward, as the allreduce does.
    simulated.push_back({option.fwd_ms, option.bwd_ms, option.p2p_ms / 2, stage.allreduce_ms + option.offload_ms});
    replicas.push_back(option.replicas);
    placed.stages.push_back(std::move(stage));
  }
  placed.simulation = simulate(simulated, replicas, config.microbatches, config.schedule, config.chunks);
  for (int rank = config.pipelines * used; rank < config.pipelines * config.pipeline_devices; ++rank)
    placed.unused_ranks.push_back(rank);
  return placed;
}

// For each stage, the copies over which sharded state splits the weights it shares with other
// stages (rannc-run's gradient group of a tied weight spans every holder): the least such count
// over its shared weights; 0 where it shares none.
std::vector<int> shared_weight_replicas(const BlockCosts& blocks, const PlacedPipeline& placed) {
  std::vector<int> shared(placed.stages.size(), 0);
  auto holds = [](const BlockCosts::Weight& weight, const StageOption& option) {
    return weight.read_in(option.begin, option.end);
  };
  for (const auto& weight : blocks.weights) {
    if (weight.blocks.size() < 2 || weight.param_elements == 0) continue;
    int holders = 0, holding_stages = 0;
    for (const auto& stage : placed.stages)
      if (holds(weight, stage.option))
        holders += placed.config.pipelines * stage.option.replicas * stage.option.context_degree, ++holding_stages;
    if (holding_stages < 2) continue;
    for (std::size_t s = 0; s < placed.stages.size(); ++s)
      if (holds(weight, placed.stages[s].option)) shared[s] = shared[s] == 0 ? holders : std::min(shared[s], holders);
  }
  return shared;
}

// The memory of every rank and the predictions, from the placed pipeline's simulation.
void predict(const SearchContext& context, const StepBounds& bounds, PlacedPipeline& placed) {
  const cost::Cluster& cluster = *context.cluster;
  // Each stage's memory on its kind.
  std::vector<StageOptions> options;
  for (int kind = 0; kind < cluster.kinds(); ++kind)
    options.emplace_back(context.of_kind(kind), placed.config, std::numeric_limits<double>::infinity(), StageOptions::Listing::kNone);
  const std::size_t groups = placed.stages.size() / static_cast<std::size_t>(placed.config.chunks);
  const std::vector<int> shared_replicas = shared_weight_replicas(*context.blocks, placed);
  for (std::size_t s = 0; s < placed.stages.size(); ++s) {
    auto& stage = placed.stages[s];
    stage.in_flight = placed.simulation.max_in_flight[s];
    if (stage.option.shares.empty()) {
      stage.memory = options[static_cast<std::size_t>(stage.option.kind)].memory(stage.option, stage.in_flight, shared_replicas[s]);
      if (cluster.mixed()) stage.mem_limit_bytes = cluster.kind_view(stage.option.kind).mem_bytes;
    } else {
      auto shared = shared_stage_memory(context, placed.config, stage.option, stage.in_flight);
      stage.memory = shared.memory;
      stage.mem_limit_bytes = shared.limit_bytes;
    }
  }
  for (std::size_t s = 0; s < groups; ++s) {
    // A device's memory: its group's chunks together (one stage without interleaving).
    std::vector<plan::MemoryBreakdown> chunks;
    for (std::size_t c = s; c < placed.stages.size(); c += groups) chunks.push_back(placed.stages[c].memory);
    placed.predicted.peak_mem_bytes = std::max(placed.predicted.peak_mem_bytes, cost::chunks_memory(chunks).total());
    const auto& stage = placed.stages[s];
    for (int i = 0; i < static_cast<int>(stage.ranks.size()); ++i) {
      int rank = stage.ranks[i];
      const int degree = stage.option.tensor_degree;
      plan::RankPlacement placement{rank, cluster.node_of(rank), rank % cluster.gpus_per_node, static_cast<int>(s), i,
                                    i % degree,
                                    cluster.mixed() ? cluster.kind_view(cluster.kind_of_rank(rank)).device.name : std::string()};
      placement.context_rank = i / degree % stage.option.context_degree;
      placed.ranks.push_back(std::move(placement));
    }
  }
  std::sort(placed.ranks.begin(), placed.ranks.end(), [](const plan::RankPlacement& a, const plan::RankPlacement& b) { return a.rank < b.rank; });
  if (!placed.unused_ranks.empty()) {
    placed.unused_reason = "no stage runs faster with more replicas of its " + std::to_string(placed.config.microbatch_size) +
                         "-sample microbatches (replica counts divide the microbatch) once their gradient allreduce is counted";
  }
  const double step_ms = placed.simulation.iteration_ms;
  placed.predicted.iteration_ms = step_ms;
  placed.predicted.samples_per_s = step_ms > 0 ? placed.global_batch / (step_ms / 1e3) : 0;
  placed.predicted.bubble_fraction = placed.simulation.bubble_fraction;
  set_bounds(placed.predicted, bounds, cluster, context.precision);
}

}  // namespace

PlacedPipeline place_and_simulate(const SearchContext& context, const ConfigChoice& choice, std::int64_t global_batch,
                                  const StepBounds& bounds) {
  PlacedPipeline placed = place(context, choice, global_batch);
  predict(context, bounds, placed);
  return placed;
}

namespace {

// "1,234 units" and the like, for progress lines.
std::string counted(std::size_t n, const char* noun) { return with_commas(static_cast<std::int64_t>(n)) + " " + noun; }

// The formula picks each stage's recomputation within a config, and may prefer a mix (offload
// here, no recomputation there) that simulates slower than one choice on every stage: the 1T GPT
// on 512 A100, where selective recomputation everywhere simulates 3.7% faster than the mix the
// formula ranks 0.1% ahead. So the config of the best formula value is also searched with each
// choice forced on every stage, and takes the pipeline that simulates fastest of those and its own.
void try_uniform_recomputation(const SearchContext& context, std::int64_t global_batch, std::vector<ConfigChoice>& choices,
                               SearchCensus& census) {
  if (context.recompute) return;
  auto best = std::min_element(choices.begin(), choices.end(), [](const ConfigChoice& a, const ConfigChoice& b) {
    return a.solution.objective_ms() < b.solution.objective_ms();
  });
  double fastest_ms = place(context, *best, global_batch).simulation.iteration_ms;
  const std::vector<StageOption> stages = best->solution.stages;
  for (auto recompute : kRecomputeChoices) {
    // The forced search finds the pipeline it has when each of its stages makes that choice.
    if (std::all_of(stages.begin(), stages.end(), [&](const StageOption& s) { return s.recompute == recompute; })) continue;
    SearchContext uniform = context;
    uniform.recompute = recompute;
    // A mixed cluster's kinds are forced alike.
    std::vector<SearchContext> uniform_kinds;
    if (context.kinds) {
      uniform_kinds = *context.kinds;
      for (auto& kind : uniform_kinds) kind.recompute = recompute, kind.kinds = &uniform_kinds;
      uniform.kinds = &uniform_kinds;
    }
    const double beat = std::numeric_limits<double>::infinity();
    SegmentOptions options(uniform, best->config, beat);
    ++census.searched;
    auto solution = best_pipeline(uniform, options, beat);
    if (!solution) continue;
    double ms = place(context, {best->config, *solution}, global_batch).simulation.iteration_ms;
    if (ms < fastest_ms) fastest_ms = ms, best->solution = *solution;
  }
}

// The plan: of the candidates within the slack, the shortest simulated step (of equal ones, the
// first in search order). With --explain, the `runners_up` shortest of the others, those beyond
// the slack included, are kept too.
void rank_candidates(const SearchContext& context, const std::vector<ConfigChoice>& choices, const PlanRequest& request,
                     const StepBounds& bounds, PlanResult& result) {
  auto shorter = [](const PlacedPipeline& a, const PlacedPipeline& b) { return a.simulation.iteration_ms < b.simulation.iteration_ms; };
  std::vector<PlacedPipeline> placed;
  for (const auto& choice : choices) placed.push_back(place(context, choice, request.global_batch));
  std::stable_sort(placed.begin(), placed.end(), shorter);
  result.pipeline = std::move(placed[0]);
  predict(context, bounds, result.pipeline);
  if (request.runners_up <= 0) return;
  std::vector<PlacedPipeline> lost(std::make_move_iterator(placed.begin() + 1), std::make_move_iterator(placed.end()));
  for (const auto& choice : result.census.beyond_slack) lost.push_back(place(context, choice, request.global_batch));
  std::stable_sort(lost.begin(), lost.end(), shorter);
  lost.resize(std::min(lost.size(), static_cast<std::size_t>(request.runners_up)));
  for (auto& pipeline : lost) predict(context, bounds, pipeline);
  result.runners_up = std::move(lost);
}

}  // namespace

PlanResult plan_model(const ir::Graph& graph, std::int64_t evaluated_batch, const cost::CostModel& model_costs,
                      const PlanRequest& request, const PhaseObserver& observe) {
  return plan_model(graph, evaluated_batch, std::vector<const cost::CostModel*>{&model_costs}, request, observe);
}

namespace {

// A mixed cluster's search contexts: each kind's blocks costed on it, its ranges and its view of
// the cluster; `context` (the first kind's costs on the whole cluster) then points at them.
struct KindContexts {
  std::vector<BlockCosts> blocks;
  std::vector<RangeTable> ranges;
  std::vector<cost::Cluster> views;
  std::vector<SearchContext> contexts;
};

}  // namespace

PlanResult plan_model(const ir::Graph& graph, std::int64_t evaluated_batch,
                      const std::vector<const cost::CostModel*>& kind_costs, const PlanRequest& request,
                      const PhaseObserver& observe) {
  if (static_cast<int>(kind_costs.size()) != request.cluster.kinds())
    throw std::logic_error("plan_model: one cost model per device kind");
  auto tell = [&](const std::string& outcome) {
    if (observe) observe(outcome);
  };
  PlanResult result;
  auto start = Clock::now();
  result.partitioning.regions = find_tensor_regions(graph);
  result.partitioning.context_split = find_context_split(graph, result.partitioning.regions);
  if (!request.sequence_parallel) result.partitioning.regions.sequence_ops.clear();
  // Fused kernels: a plan for Megatron-LM's stack, not rannc-run's.
  result.partitioning.regions.regather_inputs =
      request.attention == plan::Fusion::kFused || request.elementwise == plan::Fusion::kFused;
  // Every cost below, the bounds' included, is of the kernels the training stack runs.
  std::vector<cost::CostModel> fused;
  if (auto kernels = fused_kernels(graph, result.partitioning.regions, request.attention, request.elementwise);
      !kernels.empty()) {
    for (const auto* kind : kind_costs) {
      fused.push_back(*kind);
      fused.back().fuse(graph, kernels);
    }
  }
  auto costs_of_kind = [&](int kind) -> const cost::CostModel& {
    return fused.empty() ? *kind_costs[static_cast<std::size_t>(kind)] : fused[static_cast<std::size_t>(kind)];
  };
  const cost::CostModel& costs = costs_of_kind(0);
  result.partitioning.units = build_units(graph);
  const UnitGraph& units = result.partitioning.units;
  std::vector<double> unit_ms = unit_step_ms(units, costs);
  result.times.units_ms = elapsed_ms(start);
  tell("grouped " + counted(graph.ops().size(), "ops") + " into " + counted(units.units.size(), "units"));

  int units_count = static_cast<int>(units.units.size());
  if (request.stages && *request.stages > units_count) {
    throw Error(ExitStatus::kCannotMeet, "--stages " + std::to_string(*request.stages) + ": the model has only " +
                                             std::to_string(units_count) + " ops that can start a stage");
  }
  start = Clock::now();
  result.partitioning.blocking = coarsen(graph, units, unit_ms, std::max(request.max_blocks, request.stages.value_or(1)));
  result.times.coarsen_ms = elapsed_ms(start);
  tell("coarsened them into " + counted(static_cast<std::size_t>(result.partitioning.blocking.count()), "blocks"));

  auto degrees = config_tensor_degrees(request, result.partitioning.regions);
  if (request.tensor_degree && *request.tensor_degree > 1 && !result.partitioning.regions.allows_degree(degrees.front())) {
    throw Error(ExitStatus::kCannotMeet, "tensor parallelism of " + std::to_string(*request.tensor_degree) +
                                             ": no region of the model splits that many ways (" +
                                             counted(result.partitioning.regions.regions.size(), "split regions") + " found)");
  }
  const ContextSplit& context_split = result.partitioning.context_split;
  if (request.context_degree && *request.context_degree > 1 && !context_split.allowed) {
    throw Error(ExitStatus::kCannotMeet, "context parallelism of " + std::to_string(*request.context_degree) +
                                             ": the model cannot split its sequences: " + context_split.reason);
  }
  const std::vector<int> contexts = context_degrees(request, context_split);
  auto configs = candidate_configs(request, result.partitioning.blocking.count(), degrees, contexts);
  if (configs.empty()) {
    throw Error(ExitStatus::kCannotMeet, "no pipeline layout splits a batch of " + std::to_string(request.global_batch) +
                                             " samples evenly over " + std::to_string(request.cluster.gpus()) +
                                             " devices with the forced stage, pipeline and microbatch counts");
  }
  start = Clock::now();
  auto activations = cost::activation_memory(graph, costs.requires_grad(), request.precision, costs.fused_kernels());
  result.partitioning.blocks = block_costs(graph, units, result.partitioning.blocking, costs, activations,
                                           evaluated_batch, sample_sizes(configs), result.partitioning.regions,
                                           tensor_degrees(request), context_split, contexts);
  RangeTable ranges(result.partitioning.blocks);
  SearchContext context{&result.partitioning.blocks, &ranges, &request.cluster, request.optimizer, request.precision,
                        request.state_sharding, request.recompute};
  KindContexts kinds;
  if (request.cluster.mixed()) {
    const int count = request.cluster.kinds();
    kinds.blocks.reserve(static_cast<std::size_t>(count));
    kinds.ranges.reserve(static_cast<std::size_t>(count));
    kinds.views.reserve(static_cast<std::size_t>(count));
    for (int kind = 0; kind < count; ++kind) {
      kinds.blocks.push_back(kind == 0 ? result.partitioning.blocks
                                       : block_costs(graph, units, result.partitioning.blocking, costs_of_kind(kind),
                                                     activations, evaluated_batch, sample_sizes(configs),
                                                     result.partitioning.regions, tensor_degrees(request)));
      kinds.ranges.emplace_back(kinds.blocks.back());
      kinds.views.push_back(request.cluster.kind_view(kind));
      SearchContext kind_context = context;
      kind_context.blocks = &kinds.blocks.back();
      kind_context.ranges = &kinds.ranges.back();
      kind_context.cluster = &kinds.views.back();
      kind_context.kind = kind;
      kinds.contexts.push_back(kind_context);
    }
    for (auto& kind_context : kinds.contexts) kind_context.kinds = &kinds.contexts;
    context.kinds = &kinds.contexts;
  }
  result.times.costs_ms = elapsed_ms(start);
  tell("costed the blocks");

  start = Clock::now();
  result.census.explain = request.runners_up > 0;
  auto choices = search_configs(context, configs, &result.census, observe);
  if (!choices.empty()) try_uniform_recomputation(context, request.global_batch, choices, result.census);
  result.times.search_ms = elapsed_ms(start);
  tell("searched " + counted(configs.size(), "candidate layouts") + ": " + plural(static_cast<std::int64_t>(choices.size()), "pipeline") +
       " within " + std::to_string(static_cast<int>(std::lround((result.census.slack - 1) * 100))) + "% of the best");
  if (choices.empty() && request.cluster.mixed()) {
    throw Error(ExitStatus::kCannotMeet, "the model does not fit in the mixed cluster's " + cluster_memory(request.cluster) +
                                             " (each pipeline takes an equal part of every kind)");
  }
  if (choices.empty()) {
    throw Error(ExitStatus::kCannotMeet,
                "the model does not fit in " + plural(request.cluster.gpus(), "device") + " of " +
                    human_bytes(static_cast<double>(request.cluster.mem_bytes)) + ": " +
                    what_would_fit(graph, units, result.partitioning.blocking, result.partitioning.regions,
                                   result.partitioning.context_split, costs, activations, evaluated_batch, request));
  }
  start = Clock::now();
  double fraction = static_cast<double>(request.global_batch) / static_cast<double>(evaluated_batch);
  // Every device working on the step at its own speed.
  double lower_bound_ms = whole_step_ms(graph, costs, fraction) / request.cluster.gpus();
  if (request.cluster.mixed()) {
    double steps_per_ms = 0;
    for (int kind = 0; kind < request.cluster.kinds(); ++kind)
      steps_per_ms += request.cluster.kind_gpus(kind) / whole_step_ms(graph, costs_of_kind(kind), fraction);
    lower_bound_ms = 1 / steps_per_ms;
  }
  StepBounds bounds{lower_bound_ms, step_model_flops(graph, costs, fraction)};
  rank_candidates(context, choices, request, bounds, result);
  result.times.simulate_ms = elapsed_ms(start);
  tell("simulated them: the best takes " + human_ms(result.pipeline.predicted.iteration_ms) + " a step");
  return result;
}

}  // namespace rannc::partition
