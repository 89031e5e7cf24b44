// A model as the compiler sees it: the IR graph plus the frontend's own handle on the original.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "compiler/input_spec.h"
#include "compiler/stage_source.h"
#include "ir/graph.h"

namespace rannc {
namespace emit {
struct StageLayout;
}

enum class ModelFormat { kTorchScript, kOnnx, kPt2 };

// "torchscript", "onnx", "pt2": the frontend's name (frontends/frontend.h).
std::string_view model_format_name(ModelFormat format);

struct Model;

// What a frontend keeps of the original model (the TorchScript module, the ONNX proto, the
// exported program) so that emit can rebuild parts of it. Each frontend subclasses it; the rest
// of the compiler only holds it and asks it the questions below.
class ModelSource {
 public:
  virtual ~ModelSource() = default;

  // A stage as generated TorchScript source, for a model that has no TorchScript module of its
  // own (ONNX, .pt2); nullopt for a TorchScript model, whose stages the plugin clones from it.
  // With `tensor_rank` >= 0, a stage of tensor-parallel degree > 1 as that rank runs it
  // (compiler/source_rank_cut.h); -1, the whole stage.
  virtual std::optional<StageSource> stage_source(const Model& model, const emit::StageLayout& stage,
                                                  int tensor_rank = -1) const {
    (void)model, (void)stage, (void)tensor_rank;
    return std::nullopt;
  }
  // How verify's reference relates to the original: "" when the reference is the model itself
  // (TorchScript), else a note that the whole model runs through the same generated mapping.
  virtual std::string reference_note() const { return ""; }
};

struct LoadOptions {
  std::vector<InputSpec> inputs;       // example inputs, by name
  std::optional<std::int64_t> batch;   // fills a symbolic batch dim not given by an input spec
};

struct Model {
  std::string path;
  ModelFormat format = ModelFormat::kOnnx;
  ir::Graph graph;
  std::int64_t batch = 1;  // the batch size the shapes in `graph` were evaluated at
  // Set when the model can run at no other batch (an ONNX export without dynamic axes): every
  // replica of every stage must then run microbatches of exactly this many samples.
  std::optional<std::int64_t> fixed_batch;
  std::shared_ptr<const ModelSource> source;
};

// Reads a TorchScript archive or an ONNX file (chosen by extension, else by content), lowers it
// to the IR with shapes, dtypes and batch dims. Throws InputError with one line naming the file
// and the problem for anything it cannot read or does not support.
Model load_model(const std::string& path, const LoadOptions& options);

// The batch size implied by the options: --batch, else dim 0 of the first input spec.
std::optional<std::int64_t> requested_batch(const LoadOptions& options);

// A tensor's dims must make an element count and a size in bytes that every later computation
// can hold (int64 counts, double sums of bytes, exact below 2^53): InputError naming `what` otherwise.
void check_tensor_size(const std::string& path, const std::string& what, const std::vector<std::int64_t>& dims,
                       ir::DType dtype);

// Throws InputError when a spec names no model input; `available` lists the model's inputs.
void check_input_names(const std::string& path, const LoadOptions& options, const std::vector<std::string>& available);

}  // namespace rannc
