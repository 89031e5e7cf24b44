// The plan: what partition decides and every other tool reads (show, verify, rannc-run, the
// launch files and pictures). plan.json is this structure written out (plan/plan_json.h);
// docs/plan-format.md describes each field and docs/plan.schema.json is its JSON Schema.
//
// Shapes are per microbatch per replica. Times are milliseconds and sizes bytes, as predicted
// by the cost model for one training step.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <utility>
#include <optional>
#include <string>
#include <vector>

#include "plan/options.h"
#include "plan/schedule.h"

namespace rannc::plan {

inline constexpr const char* kFormat = "rannc-plan";
inline constexpr int kVersion = 1;
// The largest tensor- or context-parallel degree a plan may hold: a node of 8 devices is the
// usual tensor group, a few nodes a context group's; 64 bounds what a hostile plan may ask for.
inline constexpr int kMaxParallelDegree = 64;

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;             // ir::dtype_name spelling: "float32", "int64", ...
  int batch_dim = -1;            // where the runtime slices a microbatch among replicas; -1: not sliced
  std::int64_t index_bound = 0;  // integer model inputs: valid values are below it (0: not given)
  // Stage inputs only: where the tensor comes from, a model input, an earlier stage's output or
  // (sharded plans) the pooled lookups of an embedding table of the sharding section.
  std::optional<std::string> model_input;
  std::optional<std::string> embedding;
  int from_stage = -1, from_output = -1;
  // Stage outputs only.
  bool model_output = false;
};

struct Weight {
  std::string name;        // qualified name in the model ("blocks.0.qkv.weight")
  std::string stage_name;  // attribute name in the stage module ("p3", "b0")
  std::int64_t numel = 0, bytes = 0;
  std::vector<int> shared_with;  // other stages holding the same (tied) weight
};

// Memory of one device, by what it holds. The training state (weights, gradients, optimizer
// state) stays all step; the passes' memory (activations, workspace, comm_buffers) is freed after
// the last backward, before the optimizer step allocates its own (step_buffers: the flat gradient
// copy the allreduce sums or the reduce-scatter's buckets, and the optimizer's temporaries), so
// the peak is the larger of the two.
struct MemoryBreakdown {
  double weights = 0, grads = 0, optimizer = 0, activations = 0, workspace = 0, comm_buffers = 0, step_buffers = 0;
  double passes() const { return activations + workspace + comm_buffers; }
  double total() const { return weights + grads + optimizer + std::max(passes(), step_buffers); }
};

struct StagePrediction {
  double fwd_ms = 0, bwd_ms = 0;     // per microbatch on one replica (bwd includes recomputation)
  double p2p_ms = 0;                 // receiving the inputs of one microbatch
  // The stage's gradients among its ranks, once per step: an allreduce, or with sharded state a
  // reduce-scatter of the gradients plus an all-gather of the updated weights.
  double allreduce_ms = 0;
  // Offloaded stages: the weights copied to the device and the gradients back, and the optimizer
  // step on the host, once per step.
  double offload_ms = 0;
  int in_flight = 0;                 // microbatches kept between forward and backward
  double mem_bytes = 0;              // per device: memory.total() in plans partition writes
  MemoryBreakdown memory;
  double host_mem_bytes = 0;         // per rank, in host memory: the offloaded state
  // A mixed cluster's: the memory of the device `mem_bytes` is held to (its kind's; for a stage
  // the kinds share, its fullest kind's). 0: the device of its ranks (Plan::mem_limit_of).
  std::int64_t mem_limit_bytes = 0;
};

// A file the plan names, relative to plan.json's folder, with its SHA-256 as written.
struct PlanFile {
  std::string file, sha256;
};

// Tensor parallelism of a stage: each data-parallel replica is a group of `degree` devices in
// one node (consecutive ranks, tensor ranks 0..degree-1) that split the regions listed.
struct TensorParallel {
  int degree = 1;
  // A region split across the group (partitioner/tensor_regions.h): its ops, in op order; its
  // column ops split their weights by output features, its row op by input features, and the
  // row op's output is all-reduced. A vocabulary embedding's lookup is both its column and row
  // op; an output layer (the vocabulary head) has no row op: its logits stay split for the
  // runtime's parallel cross entropy.
  struct Region {
    RegionKind kind = RegionKind::kLayer;
    std::string module;  // the model's module of its ops ("" when the frontend knows none)
    std::vector<int> column_ops, ops;
    int row_op = -1;     // -1: none (the vocabulary head)
  };
  // A weight of the stage, split into `degree` slices along `dim` (each of `groups` equal parts
  // of that dim split so: a fused QKV's q, k and v).
  struct SplitWeight {
    std::string name;
    int dim = 0, groups = 1;
  };
  // A candidate left whole on every device of the group, and why.
  struct Unsplit {
    std::vector<int> column_ops;
    std::string reason;
  };
  std::vector<Region> regions;
  // The ops outside the regions that run on 1/degree of the sequence (sequence parallelism:
  // norms, residual adds, dropout), ascending.
  std::vector<int> sequence_ops;
  std::vector<SplitWeight> weights;
  std::vector<Unsplit> unsplit;
  // Each tensor rank's stage file, "stage_<id>_tp<rank>.pt": its slices of the split weights
  // (plan/tensor_slices.h), its share of the regions' ops and the group's collectives. The
  // SHA-256 is "" in --plan-only plans; no files where the model's frontend cannot cut its
  // stages (the stage file still holds the whole stage).
  std::vector<PlanFile> files;

  // The split of weight `name`; null when the stage holds it whole (or not at all).
  const SplitWeight* split_of(const std::string& name) const {
    auto found = std::find_if(weights.begin(), weights.end(), [&](const SplitWeight& w) { return w.name == name; });
    return found == weights.end() ? nullptr : &*found;
  }
};

struct Stage {
  int id = 0;
  std::string file;    // the stage file, relative to the plan's folder
  std::string sha256;  // of the stage file as partition wrote it ("" in --plan-only plans)
  // Every replica of every pipeline, pipeline by pipeline: ascending, but for a stage shared by a
  // mixed cluster's kinds, whose pipelines each take ranks of every kind.
  std::vector<int> ranks;
  int replicas_per_pipeline = 1;
  // Samples of each microbatch that each replica of a pipeline runs, where they differ (a stage
  // shared by the kinds of a mixed cluster); empty: microbatch_size / replicas_per_pipeline each.
  std::vector<int> replica_samples{};
  std::vector<int> blocks;  // [begin, end) of the block sequence (empty: not recorded)
  std::string op_range;     // "first op .. last op"
  // The model's blocks its ops come from, in op order (ir::module_blocks: "embed", "layers.0",
  // ...); empty when the frontend knew no op's module.
  std::vector<std::string> modules;
  std::vector<int> ops;     // the model's ops the stage computes (ir op ids)
  std::vector<Tensor> inputs, outputs;
  std::vector<Weight> params, buffers;
  Recompute recompute = Recompute::kNone;
  bool offload = false;
  StateSharding state_sharding = StateSharding::kNone;  // among all of the stage's ranks
  TensorParallel tensor_parallel;  // written only when degree > 1
  // Context parallelism (partitioner/context_parallel.h): each replica's group is this many times
  // tensor_parallel.degree devices, in one node or over whole nodes, each running 1/context_degree of each sample's
  // positions; its ranks are tensor ranks within context ranks. Written only when > 1.
  int context_degree = 1;
  StagePrediction predicted;
  // The devices of one replica: its tensor-parallel group, times its context groups.
  int group_devices() const { return tensor_parallel.degree * context_degree; }
  // Data-parallel copies of the stage: its ranks, one per device of each replica's group.
  std::size_t replicas() const { return ranks.size() / static_cast<std::size_t>(group_devices()); }
  // The samples of a microbatch that replica r of a pipeline runs: [first, first + length).
  std::pair<std::int64_t, std::int64_t> replica_rows(int replica, std::int64_t microbatch_size) const {
    if (replica_samples.empty()) {
      const std::int64_t length = microbatch_size / replicas_per_pipeline;
      return {replica * length, length};
    }
    std::int64_t first = 0;
    for (int r = 0; r < replica; ++r) first += replica_samples[static_cast<std::size_t>(r)];
    return {first, replica_samples[static_cast<std::size_t>(replica)]};
  }
  // The longest slice of a microbatch that every replica's samples are a whole number of.
  std::int64_t common_slice(std::int64_t microbatch_size) const {
    if (replica_samples.empty()) return microbatch_size / replicas_per_pipeline;
    std::int64_t slice = 0;
    for (int samples : replica_samples) slice = std::gcd(slice, static_cast<std::int64_t>(samples));
    return slice;
  }
  // Whether the stage holds `name` as a trainable weight, and (buffers_too) as a buffer.
  bool holds(const std::string& name, bool buffers_too = true) const {
    auto named = [&](const Weight& weight) { return weight.name == name; };
    return std::any_of(params.begin(), params.end(), named) ||
           (buffers_too && std::any_of(buffers.begin(), buffers.end(), named));
  }
};

struct RankPlacement {
  // `stage`: with Plan::interleave > 1, the first stage of the rank's device group (0..p-1).
  int rank = 0, node = 0, local_rank = 0, stage = 0, replica = 0;
  int tensor_rank = 0;  // its place in the replica's tensor-parallel group (Stage::tensor_parallel)
  std::string device{};  // a mixed cluster's: the rank's device kind (Cluster::node_groups); empty otherwise
  int context_rank = 0;  // its share of the positions in the replica's group (Stage::context_degree)
};

struct Model {
  std::string path;  // the model file partition read (absolute; a relative one is from the plan's folder)
  std::string sha256;
  std::string format;  // "onnx" | "torchscript"
  std::int64_t params = 0, param_bytes = 0;
  std::int64_t evaluated_batch = 1;
  std::vector<Tensor> inputs;  // the example inputs, at the evaluated batch
};

struct Link {
  double bandwidth_gbps = 0, latency_us = 0;
};

// Where offloaded state lives: host memory per node, the host-device link, and the host's
// memory bandwidth (per node) the optimizer step on the host runs at.
struct Host {
  std::int64_t mem_bytes = 0;
  Link link;
  double mem_bandwidth_gbps = 0;
};

// One device kind of a mixed cluster: its nodes take the ranks after the groups before it.
struct NodeGroup {
  int nodes = 1;
  std::string device;
  std::int64_t mem_bytes = 0;
  Link intra_node;
  std::optional<Host> host;
};

struct Cluster {
  int gpus = 1, nodes = 1, gpus_per_node = 1;
  // A mixed cluster's: the least memory of a device, and its kinds joined by "+"
  // ("a100-40g+h100-80g"); each kind's memory, intra-node link and host are in node_groups.
  std::int64_t mem_bytes = 0;
  std::string device;  // preset or custom device name
  std::optional<Link> intra_node, inter_node;
  std::optional<Host> host;
  std::vector<NodeGroup> node_groups{};  // a mixed cluster's, two or more; empty when uniform

  // A mixed cluster's group of rank r; nullptr when uniform.
  const NodeGroup* group_of_rank(int rank) const {
    for (const auto& group : node_groups) {
      if (rank < group.nodes * gpus_per_node) return &group;
      rank -= group.nodes * gpus_per_node;
    }
    return nullptr;
  }
  std::int64_t mem_of_rank(int rank) const {
    const NodeGroup* group = group_of_rank(rank);
    return group ? group->mem_bytes : mem_bytes;
  }
};

struct Batch {
  std::int64_t global = 1;  // pipelines x microbatches x microbatch_size
  int pipelines = 1, microbatches = 1, microbatch_size = 1;
};

struct Prediction {
  double iteration_ms = 0, samples_per_s = 0, bubble_fraction = 0, lower_bound_ms = 0, peak_mem_bytes = 0;
  double efficiency = 0;  // lower_bound_ms / iteration_ms
  // The physical bound: the step's model FLOPs (forward and backward, recomputation not
  // counted) at the device's peak for the precision, spread over every device of the cluster;
  // and the model FLOP/s per device the predicted step reaches, alone and as a share of that peak
  // (the figure compared across systems: peak_fraction = flop_bound_ms / iteration_ms).
  double flop_bound_ms = 0, model_tflops_per_device = 0, peak_fraction = 0;
};

// Devices of the cluster that carry no stage, and why.
struct Unused {
  std::vector<int> ranks;
  std::string reason;
};

// Recommendation models: the embedding tables sharded over the ranks, the dense part a stage of
// every rank (docs/plan-format.md, "sharding").
struct EmbeddingShard {
  int rank = 0;
  std::int64_t row_begin = 0, rows = 0, col_begin = 0, cols = 0;
};

// What a table or the dense part adds to each rank it is on, per training step.
struct ShardLoad {
  double lookup_ms = 0, all_to_all_ms = 0, allreduce_ms = 0, mem_bytes = 0, host_mem_bytes = 0;
};

struct ShardedTable {
  std::string name;        // the weight
  std::string stage_name;  // its attribute in the tables file ("p0"); empty in --plan-only plans
  std::vector<int> lookup_args;  // which outputs of the indices module its lookup reads (ids, then offsets)
  std::int64_t rows = 0, dim = 0;
  std::string dtype, pooling_mode;
  double pooling = 1;  // lookups per sample
  std::vector<std::string> indexed_by;
  std::string type;   // "data_parallel", "table_wise", "column_wise", "row_wise", "table_row_wise"
  std::string tier;   // "device", or "host": in host memory behind a device cache
  // Host tier: the share of each shard's rows its device caches, and the lookups it serves.
  double cache_fraction = 0, hit_rate = 0;
  std::vector<EmbeddingShard> shards;
  ShardLoad per_rank;  // on each rank of its shards
};

struct ShardedRank {
  int rank = 0;
  double lookup_ms = 0, all_to_all_ms = 0, allreduce_ms = 0, dense_ms = 0, step_ms = 0, mem_bytes = 0, host_mem_bytes = 0;
};

// What a sharded plan's ranks load (absent from --plan-only plans): the indices module, whose
// forward takes the model inputs `index_inputs` and returns every tensor the lookups read (the
// tables' ids, and bag offsets where a lookup takes them) in the argument order of the tables
// module, which holds every table whole (what the shards were cut from) and returns each
// table's pooled lookups in table order; and each rank's shards (a state dict by table name).
struct ShardingFiles {
  PlanFile indices;
  std::vector<std::string> index_inputs;
  PlanFile tables;
  std::vector<PlanFile> shards;  // per rank
};

struct Sharding {
  std::int64_t batch_per_rank = 0;
  std::string comm_dtype = "fp32", comm_dtype_bwd = "fp32";  // of the all-to-alls, forward and backward
  std::string sparse_optimizer;                              // the tables' optimizer
  std::vector<ShardedTable> tables;
  std::vector<ShardedRank> ranks;
  std::optional<ShardingFiles> files;
};

// Who wrote the plan and how: the tool, its version and the command line, so that a plan handed
// on can be made again. Absent from plans written by hand or by older versions.
struct Generator {
  std::string tool;
  std::string version;
  std::string command;  // as a shell would take it back (plan/command_line.h)
};

struct Plan {
  std::optional<Generator> generator;
  Model model;
  Cluster cluster;
  Batch batch;
  Schedule schedule = Schedule::k1F1B;
  // Model chunks per rank (Megatron's virtual pipeline stages, 1F1B only). With interleave v > 1,
  // `stages` are the p x v chunks in model order and stage s runs on the ranks of stage s mod p
  // (the same replicas and tensor-parallel degree), p = pipeline_stages() device groups; a
  // RankPlacement names its group's first stage, 0..p-1. Written only when above 1.
  int interleave = 1;
  Optimizer optimizer = Optimizer::kAdam;
  Precision precision = Precision::kFp32;
  // How the training stack the predictions are for runs attention cores (--attention) and
  // connected elementwise ops (--elementwise). Written only when fused; rannc-run runs unfused
  // plans only.
  Fusion attention = Fusion::kUnfused;
  Fusion elementwise = Fusion::kUnfused;
  std::vector<Stage> stages;
  std::vector<RankPlacement> ranks;
  Prediction predicted;
  Unused unused;
  std::optional<Sharding> sharding;

  // Where the plan was read from, or is written to; stage files are relative to its folder.
  std::string path;
  std::string folder() const;
  // A stage file's path on disk.
  std::string stage_path(const Stage& stage) const;
  // What a rank of `tensor_rank` loads: its file of a tensor-parallel stage that has them
  // (TensorParallel::files), else the stage file.
  std::string stage_path(const Stage& stage, int tensor_rank) const;
  // The model's path on disk: model.path, which partition writes absolute; a relative one (a
  // plan written by hand) is taken from the plan's folder, like the stage files.
  std::string model_file() const;

  int stage_count() const { return static_cast<int>(stages.size()); }
  // The memory a stage's prediction is held to: its own record (a mixed cluster's stage), else
  // its first rank's device's.
  std::int64_t mem_limit_of(const Stage& stage) const {
    if (stage.predicted.mem_limit_bytes > 0) return stage.predicted.mem_limit_bytes;
    return stage.ranks.empty() ? cluster.mem_bytes : cluster.mem_of_rank(stage.ranks.front());
  }
  // p, the pipeline's device groups: stage_count() / interleave.
  int pipeline_stages() const { return stage_count() / interleave; }
  // Stages after `stage` in its pipeline (what the schedule's rules are written in); for
  // non-interleaved plans (interleave 1), where each stage is its own device group.
  int stages_after(int stage) const { return stage_count() - 1 - stage; }
};

}  // namespace rannc::plan
