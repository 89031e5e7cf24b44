// The parts of the compiler that need libtorch live in a plugin, librannc_torch.so, that is
// loaded on first use. Loading libtorch costs about 0.5 s and 160 MB before any work, so
// commands that never touch a TorchScript model (planning a shape-only ONNX model, showing a
// plan) stay fast and small. Only the plugin's sources include torch headers.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "compiler/model.h"
#include "cost_model/device.h"
#include "cost_model/profile_db.h"
#include "compiler/stage_source.h"
#include "plan/plan_json.h"
#include "emit/stage_layout.h"

namespace rannc {

class TorchPlugin {
 public:
  virtual ~TorchPlugin() = default;

  // The TorchScript frontend: load, inline, lower attribute reads to named parameters and
  // buffers, remove mutation, record shapes by running the graph on the example inputs.
  virtual Model load_torchscript(const std::string& path, const LoadOptions& options) = 0;

  // The profiler (torch_side/torch_profiler.cpp). It runs on the first GPU when libtorch has
  // CUDA and one is there (docs/gpu.md; RANNC_PROFILE_DEVICE=cpu keeps it on the CPU), else on
  // the CPU with libtorch's default thread count, the way a training step of the model would.

  // Where it runs: "cpu", or the GPU's name ("NVIDIA H100 80GB HBM3"); the profile DB's key.
  virtual std::string profiled_device() = 0;

  // Peak sgemm FLOP/s, copy bandwidth and the per-op overhead (on the CPU as measure_cpu takes
  // them); ops left empty.
  virtual cost::DeviceProfile measure_device() = 0;

  // This machine's CPU as a training step uses it, whatever GPU there is: the `cpu` preset's
  // figures (cost::MachineFigures, measured as for measure_device, bf16 too) in about a second.
  struct CpuMeasurement {
    cost::MachineFigures figures;
    std::string description;  // "AMD EPYC, 1 threads, libtorch 1.13.0"
  };
  virtual CpuMeasurement measure_cpu() = 0;

  // Forward and backward time (median of `reps` after a warm-up) and memory of each op of a
  // model loaded by load_torchscript, run alone on the values a forward pass gives its inputs.
  // Inputs in `requires_grad` (by ir::ValueId) get gradients. An op that cannot run alone gives
  // nullopt. `progress` is called after each op.
  using Progress = std::function<void(std::size_t done, std::size_t total)>;
  virtual std::vector<std::optional<cost::OpMeasurement>> profile_ops(const Model& model,
                                                                      const std::vector<ir::OpId>& ops,
                                                                      const std::vector<bool>& requires_grad, int reps,
                                                                      const Progress& progress) = 0;

  // rannc-run's training loss (cost/op_work.h's loss_work) of an output of `shape`, timed and
  // measured like an op; nullopt when it cannot run (then the roofline costs it).
  virtual std::optional<cost::OpMeasurement> profile_loss(const std::vector<std::int64_t>& shape, int reps) = 0;

  // One training step of the whole model in libtorch (forward, then backward of rannc-run's
  // loss of its first output): the median time of `reps` steps after a warm-up, and the peak
  // memory: weights, buffers and gradients plus the most allocated during a step.
  struct StepMeasurement {
    double step_ms = 0;
    double host_ms = 0;  // the host's time to issue a step (the median of the same steps)
    std::int64_t peak_bytes = 0;
    int reps = 0;
  };
  virtual StepMeasurement measure_training_step(const Model& model, int reps) = 0;

  // Stage files (frontends/torchscript/torchscript_stages.cpp). A TorchScript model's stage is its own nodes
  // cloned into a new module; an ONNX model's is generated source compiled with define().
  // Both save to `path`; errors are InputError naming the stage. With `tensor_rank` >= 0, a
  // TorchScript stage of tensor-parallel degree > 1 is cut for that rank (emit::TensorShard).
  virtual void save_torchscript_stage(const Model& model, const emit::StageLayout& stage, const std::string& path,
                                      int tensor_rank = -1) = 0;
  virtual void save_source_stage(const StageSource& stage, const std::string& path) = 0;
  // A sharded plan's shards of one rank: each slice of a table of the tables file (a stage file
  // holding every table whole), saved at `path` as a state dict by table name.
  struct TableSlice {
    std::string table, stage_name;  // its name in the plan, its attribute in the tables file
    std::int64_t row_begin = 0, rows = 0, col_begin = 0, cols = 0;
  };
  virtual void save_table_slices(const std::string& tables_file, const std::vector<TableSlice>& slices,
                                 const std::string& path) = 0;

  // verify (torch_side/torch_verify.cpp): chains the plan's stage files over one pipeline's
  // microbatches and compares forward outputs and parameter gradients with the unpartitioned
  // model. For an ONNX model, `reference` is the whole model as one generated stage and
  // `reference_names` maps its attribute names to the model's weight names.
  struct VerifyRequest {
    const Model* model = nullptr;
    const plan::Plan* plan = nullptr;
    std::optional<StageSource> reference;
    std::map<std::string, std::string> reference_names;
    std::uint64_t seed = 0;
    bool skip_random = false;  // a random op in training mode: report it as `skipped`, do not throw
    // A gradient that is zero in exact arithmetic (the bias of attention keys, which softmax
    // ignores; a bias before BatchNorm) comes out as rounding noise on both sides, with no
    // relative agreement to find: each gradient is measured against at least this fraction of
    // the largest gradient of the model. A wrong gradient of a size that matters still shows.
    double gradient_floor = 1e-4;
    // The model in float32 is itself compared with the model in float64 (float64_reference.h)
    // unless `float64_off` says why not (its size); beyond `float64_tolerance` (a relative
    // difference, measured as above) the op where they part is looked for.
    std::string float64_off;
    double float64_tolerance = 1e-3;
  };
  struct Difference {
    std::string what;  // "output logits", "gradient tok_emb.weight"
    double max_abs = 0, max_rel = 0;
    bool reference_not_finite = false;  // the model itself gives NaN or infinity here
  };
  // The first op, in graph order, whose float32 output or input gradient departs from float64
  // when it runs alone on the float64 values of the model rounded to float32.
  struct Departure {
    std::int64_t op = -1;  // its ir::OpId; -1 in an ONNX model (its reference's op)
    std::string kind;      // "aten::sub"
    std::string value;     // what it computes, "h.3" (an ONNX model's tensor name)
    bool in_backward = false;  // its input gradient departs (its output does not)
    double max_rel = 0;
    std::string location;  // "model.py:12", the model's source line of the op; empty if unknown
  };
  // The model in float32 (the reference of the stages) against the model in float64.
  struct Float64Check {
    bool ran = false;
    std::string not_run;  // why there is no float64 run, when there is none
    std::vector<Difference> outputs, gradients;
    std::optional<Departure> departure;  // where they part, when beyond float64_tolerance
    // Beyond it and no op named: every op was tried alone and none accounts for it (the rounding
    // of many ops adds up: the model is ill-conditioned in float32 at these inputs and weights).
    bool builds_up = false;
    std::string not_located;  // why no op is named, when beyond and none is
  };
  // The tensor ranks' stage files (plan::TensorParallel::files) chained as well, the ranks of a
  // group as threads of one process: the model outputs and gradients joined from the ranks' slices
  // against the model, and what every rank computes whole (replicated weights' gradients, outputs
  // other than split logits) on ranks 1.. against rank 0's. Their problems are the report's.
  struct TensorRankCheck {
    int degree = 0;           // 0: not chained
    std::string not_chained;  // why not, where stages have rank files
    std::vector<Difference> outputs, gradients, across_ranks;
  };
  struct VerifyReport {
    std::int64_t samples = 0;       // one pipeline's share of the global batch
    std::int64_t reference_chunk = 0;  // samples per reference forward (see torch_verify.cpp)
    std::vector<Difference> outputs, gradients;
    std::vector<std::string> problems;  // parameters missing on one side, shape mismatches
    std::string note;                   // how the plan had to be adapted to be comparable, if it was
    std::string skipped;                // why nothing was compared (skip_random), else empty
    Float64Check float64;
    TensorRankCheck tensor_ranks;
  };
  virtual VerifyReport verify(const VerifyRequest& request) = 0;

  // export (torch_side/checkpoint_export.cpp): the stage files' state dicts merged into one at
  // `output` (a name in several stages, a tied weight, taken once). With a TorchScript `model`,
  // in its state_dict's order, with what no stage holds taken from it; with `module_output`,
  // the model with the merged values saved there.
  struct ExportRequest {
    // A stage's files: one, or one per tensor rank of a tensor-parallel stage, whose `split`
    // weights join from the ranks' slices (plan/tensor_slices.h) and whose others are whole in each.
    struct StageFiles {
      std::vector<std::string> files;
      std::vector<plan::TensorParallel::SplitWeight> split;
    };
    std::vector<StageFiles> stages;
    std::string model;  // empty: not TorchScript
    std::string output, module_output;
    // Not TorchScript: the model's state_dict names when its frontend knows them (a .pt2's
    // parameters and persistent buffers); the stages' other tensors (constants) are left out.
    std::vector<std::string> state_dict_names;
    // Names of the state_dict that no stage holds as such, each with the name it aliases (a
    // tied weight's other names): written as that tensor, after it.
    std::vector<std::pair<std::string, std::string>> state_dict_aliases;
  };
  struct ExportResult {
    int trained = 0;    // tensors from the checkpoint
    int untouched = 0;  // tensors of the model that no stage holds
  };
  virtual ExportResult export_checkpoint(const ExportRequest& request) = 0;

  // For frontends without a TorchScript module (frontends/pt2): whether this libtorch registers
  // an operator ("aten::scaled_dot_product_attention"), its version ("1.13.0"), and the tensors
  // of a torch.save file held in memory (a .pt2's state dict), contiguous, by name. InputError
  // naming `what` when the bytes are no such file.
  virtual bool has_operator(const std::string& qualified_name) = 0;
  virtual std::string torch_version() = 0;
  virtual std::map<std::string, StoredTensor> read_saved_tensors(const std::string& bytes, const std::string& what) = 0;
};

// Loads the plugin once: from $RANNC_TORCH_PLUGIN, else from the executable's folder (build
// tree) or ../lib/rannc-partition beside it (install tree). Throws Error when it cannot be found or loaded.
TorchPlugin& torch_plugin();

}  // namespace rannc

// The plugin's one exported symbol; returns a process-lifetime instance.
extern "C" __attribute__((visibility("default"))) rannc::TorchPlugin* rannc_torch_plugin_instance();
