// verify (part of the torch plugin): the stage files, chained as the runtime chains them, must
// compute what the model computes.
//
// One pipeline's share of a step (microbatches x microbatch size samples) runs through the
// stages: each microbatch is cut into per-replica slices for every stage, as the runtime cuts
// it, forward stage by stage, then backward in reverse with each stage's input gradients
// handed to the stage that produced the input. The reference is the unpartitioned model run
// on chunks of the same samples, with gradients accumulated. Both backward passes start from
// the same random output gradients, so every parameter gradient is compared, not just a loss.
//
// Ops that mix samples (train-mode BatchNorm) and outputs without a batch dim (a loss) see a
// stage's replica slice, and one process can only reproduce one slice size: the reference runs
// on chunks of the smallest such slice, and stages whose slices are larger are cut to it here
// (replicas are data parallelism; what is checked is the stage files). A value without a batch
// dim that one stage sends another (a batch statistic) cannot come from several replica slices.
//
// A tensor-parallel stage's files of each tensor rank are chained as well, as rannc-run runs
// them: every rank of a group on the same samples, the ranks as threads of one process, each
// with its group (tensor_parallel_threads.h: in memory, so the plugin needs no c10d and nothing
// waits on sockets). The ranks' outputs and gradients join into the model's (split logits along
// the classes, split weights from their slices); what every rank computes whole is rank 0's,
// and ranks 1.. are compared with it.
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "compiler/torch_plugin.h"
#include "torch_side/float64_reference.h"
#include "frontends/torchscript/torchscript_source.h"
#include "emit/index_bound.h"
#include "frontends/torchscript/torchscript_stages.h"
#include "ir/op_kinds.h"
#include "plan/tensor_slices.h"
#include "support/error.h"
#include "torch_side/tensor_parallel_threads.h"
#include "torch_side/tensor_rank_slices.h"

namespace rannc {
namespace {

using Tensors = std::vector<at::Tensor>;
using Report = TorchPlugin::VerifyReport;
using Difference = TorchPlugin::Difference;

at::Tensor slice(const at::Tensor& t, int batch_dim, std::int64_t begin, std::int64_t length) {
  return batch_dim < 0 ? t : t.narrow(batch_dim, begin, length);
}

at::Tensor join(const Tensors& parts, int batch_dim) {
  if (parts.size() == 1 || batch_dim < 0) return parts.front();
  return at::cat(parts, batch_dim);
}

void accumulate(at::Tensor& sum, const at::Tensor& term) {
  if (!term.defined()) return;
  sum = sum.defined() ? sum + term : term.clone();
}

// The gradients of one input over the slices: concatenated, or summed where the input is not
// sliced (every slice read all of it).
at::Tensor join_grads(const Tensors& parts, int batch_dim) {
  if (batch_dim >= 0) return join(parts, batch_dim);
  at::Tensor sum;
  for (const auto& part : parts) accumulate(sum, part);
  return sum;
}

Tensors tuple_tensors(const c10::IValue& value, const std::string& what) {
  Tensors tensors;
  auto add = [&](const c10::IValue& v) {
    if (!v.isTensor()) throw InputError(what + " returns a " + v.tagKind() + " where the plan has a tensor");
    tensors.push_back(v.toTensor());
  };
  if (value.isTuple()) {
    for (const auto& element : value.toTupleRef().elements()) add(element);
  } else {
    add(value);
  }
  return tensors;
}

// A leaf that collects its gradient: floating stage inputs only.
at::Tensor as_leaf(const at::Tensor& t) {
  auto leaf = t.detach();
  if (at::isFloatingType(leaf.scalar_type())) leaf.requires_grad_(true);
  return leaf;
}

// Backward from `outputs` with `grads` where both are defined and the output has a graph.
void backward(const Tensors& outputs, const Tensors& grads) {
  Tensors roots, seeds;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!grads[i].defined() || !outputs[i].requires_grad()) continue;
    roots.push_back(outputs[i]);
    seeds.push_back(grads[i]);
  }
  if (!roots.empty()) torch::autograd::backward(roots, seeds);
}

// The samples both sides see, and the output gradients both start backward from.
struct Workload {
  std::int64_t samples = 0, microbatch = 0, chunk = 0;
  std::map<std::string, at::Tensor> inputs;        // model inputs, `samples` along their batch dim
  std::map<std::string, at::Tensor> seeds;         // batched model outputs, `samples` along the batch dim
  std::map<std::string, Tensors> chunk_seeds;      // other model outputs: one per reference chunk
};

at::ScalarType scalar_type_of(const plan::Tensor& tensor) {
  auto dtype = ir::parse_dtype(tensor.dtype);
  auto type = dtype ? ir::to_scalar_type(*dtype) : std::nullopt;
  if (!type) throw InputError("verify: tensor '" + tensor.name + "' has dtype " + tensor.dtype + ", which libtorch lacks");
  return *type;
}

at::Tensor random_tensor(const plan::Tensor& tensor, std::vector<std::int64_t> shape, at::Generator& generator,
                         std::int64_t bound) {
  return ir::random_tensor(scalar_type_of(tensor), shape, generator, bound);
}

std::vector<std::int64_t> with_batch(std::vector<std::int64_t> shape, int batch_dim, std::int64_t samples) {
  if (batch_dim >= 0) shape.at(static_cast<std::size_t>(batch_dim)) = samples;
  return shape;
}

// The model outputs as the plan lists them, by name.
std::map<std::string, const plan::Tensor*> model_outputs(const plan::Plan& plan) {
  std::map<std::string, const plan::Tensor*> outputs;
  for (const auto& stage : plan.stages)
    for (const auto& output : stage.outputs)
      if (output.model_output) outputs[output.name] = &output;
  return outputs;
}

// The nodes of every method of a stage module: forward, and the attention cores a selective
// stage runs as methods of their own (torch_side/recompute_cores.h).
std::vector<torch::jit::Node*> stage_nodes(const torch::jit::Module& module) {
  std::vector<torch::jit::Node*> nodes;
  for (const auto& method : module.get_methods())
    for (auto* node : method.graph()->nodes()) nodes.push_back(node);
  return nodes;
}

bool mixes_samples(const torch::jit::Module& module) {
  for (const auto* node : stage_nodes(module))
    if (ir::has_op_trait(node->kind().toQualString(), ir::op_trait::kBatchStatistics)) return true;
  return false;
}

// A random op in training mode makes every run differ: no comparison could pass. Returns why.
std::optional<std::string> random_op(const plan::Stage& stage, const torch::jit::Module& module) {
  for (auto* node : stage_nodes(module)) {
    std::string kind = node->kind().toQualString();
    bool random = ir::has_op_trait(kind, ir::op_trait::kRandom);
    if (ir::has_op_trait(kind, ir::op_trait::kDropout) && node->inputs().size() >= 3) {
      auto p = torch::jit::toIValue(node->input(1));
      auto train = torch::jit::toIValue(node->input(2));
      random = !(p && p->isDouble() && p->toDouble() == 0) && !(train && train->isBool() && !train->toBool());
    }
    if (random) {
      return "stage " + std::to_string(stage.id) + " runs " + kind +
             " in training mode, so its outputs are random and cannot match; export the model with dropout off (p=0) "
             "to verify it";
    }
  }
  return std::nullopt;
}

// Samples per reference forward: the smallest stage slice that is observable (see the top of
// the file), else a whole microbatch.
std::int64_t reference_chunk(const plan::Plan& plan, const std::vector<torch::jit::Module>& stages,
                             std::string& note) {
  std::set<std::int64_t> slices;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& stage = plan.stages[s];
    bool loss_output = std::any_of(stage.outputs.begin(), stage.outputs.end(),
                                   [](const auto& o) { return o.model_output && o.batch_dim < 0; });
    if (loss_output || mixes_samples(stages[s])) slices.insert(stage.common_slice(plan.batch.microbatch_size));
  }
  if (slices.size() > 1) {
    note = "stages that mix samples (BatchNorm) run on replica slices of " + std::to_string(*slices.rbegin()) + " and " +
           std::to_string(*slices.begin()) + " samples in this plan; one process computes one size, so all are compared at " +
           std::to_string(*slices.begin());
  }
  return slices.empty() ? plan.batch.microbatch_size : *slices.begin();
}

Workload make_workload(const TorchPlugin::VerifyRequest& request, std::int64_t chunk) {
  const auto& plan = *request.plan;
  Workload work;
  work.microbatch = plan.batch.microbatch_size;
  work.samples = static_cast<std::int64_t>(plan.batch.microbatches) * plan.batch.microbatch_size;
  work.chunk = chunk;
  auto generator = at::detail::createCPUGenerator(request.seed);
  for (const auto& input : plan.model.inputs) {
    auto bound = emit::index_bound(request.model->graph, input.name);
    work.inputs[input.name] = random_tensor(input, with_batch(input.shape, input.batch_dim, work.samples), generator, bound);
  }
  for (const auto& [name, output] : model_outputs(plan)) {
    if (!at::isFloatingType(scalar_type_of(*output))) continue;
    if (output->batch_dim >= 0) {
      work.seeds[name] = random_tensor(*output, with_batch(output->shape, output->batch_dim, work.samples), generator, 0);
    } else {
      for (std::int64_t c = 0; c < work.samples / chunk; ++c)
        work.chunk_seeds[name].push_back(random_tensor(*output, output->shape, generator, 0));
    }
  }
  return work;
}

// The seed for samples [begin, begin + length) of one model output; undefined when the output
// takes no gradient (integers).
at::Tensor seed_for(const Workload& work, const std::string& name, int batch_dim, std::int64_t begin,
                    std::int64_t length) {
  if (auto it = work.seeds.find(name); it != work.seeds.end()) return slice(it->second, batch_dim, begin, length);
  if (auto it = work.chunk_seeds.find(name); it != work.chunk_seeds.end()) return it->second.at(begin / work.chunk);
  return {};
}

// Outputs by name, one tensor per piece in sample order; gradients by weight name.
struct RunResult {
  std::map<std::string, Tensors> outputs;
  std::map<std::string, at::Tensor> gradients;
};

c10::IValue run_forward(torch::jit::Module& module, const Tensors& inputs, const std::string& what) {
  try {
    return module.forward(std::vector<c10::IValue>(inputs.begin(), inputs.end()));
  } catch (const std::exception& e) {
    throw InputError(what + " fails on its inputs: " + torch_message(e));
  }
}

// The reference: the unpartitioned model, chunk by chunk.
class Reference {
 public:
  explicit Reference(const TorchPlugin::VerifyRequest& request) : Reference(request, model_as_given(request)) {
    if (request.reference) weight_names_ = request.reference_names;
  }

  // The model in float64: float32 inputs and output gradients are cast to it.
  Reference(const TorchPlugin::VerifyRequest& request, Float64Model model) : Reference(request, model.module) {
    weight_names_ = std::move(model.weight_names);
    float64_ = true;
  }

  RunResult run(const Workload& work) {
    RunResult result;
    for (std::int64_t begin = 0; begin < work.samples; begin += work.chunk) {
      auto inputs = chunk_inputs(work, begin), seeds = chunk_seeds(work, begin);
      auto values = tuple_tensors(run_forward(module_, as_computed(inputs), what()), what());
      if (values.size() != output_names_.size()) throw InputError("verify: the model returns a different number of outputs than its plan");
      for (std::size_t k = 0; k < values.size(); ++k) result.outputs[output_names_[k]].push_back(values[k].detach());
      backward(values, as_computed(seeds));
    }
    collect_gradients(result);
    return result;
  }

  // The model inputs of the chunk starting at sample `begin`.
  Tensors chunk_inputs(const Workload& work, std::int64_t begin) const {
    Tensors inputs;
    for (const auto& input : request_.plan->model.inputs)
      inputs.push_back(slice(work.inputs.at(input.name), input.batch_dim, begin, work.chunk));
    return inputs;
  }

  // The gradients of its model outputs, in the model's output order.
  Tensors chunk_seeds(const Workload& work, std::int64_t begin) const {
    auto outputs = model_outputs(*request_.plan);
    Tensors seeds;
    for (const auto& name : output_names_) {
      int batch_dim = outputs.count(name) ? outputs.at(name)->batch_dim : -1;
      seeds.push_back(seed_for(work, name, batch_dim, begin, work.chunk));
    }
    return seeds;
  }

 private:
  Reference(const TorchPlugin::VerifyRequest& request, torch::jit::Module module)
      : request_(request), module_(std::move(module)) {
    for (auto id : request.model->graph.model_outputs()) output_names_.push_back(request.model->graph.value(id).name);
  }

  static torch::jit::Module model_as_given(const TorchPlugin::VerifyRequest& request) {
    if (request.reference) return source_stage_module(*request.reference, "Reference");
    // Loaded afresh, not copied from the frontend's module: Module::deepcopy in libtorch 1.13
    // gives parameters that are not autograd leaves, so their .grad would never fill.
    return torch::jit::load(request.model->path);
  }

  std::string what() const { return float64_ ? "the model in float64" : "the model"; }

  Tensors as_computed(Tensors tensors) const {
    if (float64_)
      for (auto& t : tensors) t = float32_as_float64(t);
    return tensors;
  }

  // A tied weight is one tensor under two names; the plan knows it by the first.
  void collect_gradients(RunResult& result) {
    std::set<const void*> seen;
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
      std::string name = p.name;
      if (weight_names_) name = weight_names_->at(p.name);
      result.gradients[name] = p.value.grad();
    }
  }

  const TorchPlugin::VerifyRequest& request_;
  torch::jit::Module module_;
  std::optional<std::map<std::string, std::string>> weight_names_;  // by attribute, for modules built here
  bool float64_ = false;
  std::vector<std::string> output_names_;
};

// The plan's stages chained over the microbatches, each cut into per-replica slices (no larger
// than the reference chunk, see the top of the file). With a `tensor_rank`, the modules are that
// rank's files of the stages that have them (TensorRanks runs one Pipeline per rank).
class Pipeline {
 public:
  Pipeline(const plan::Plan& plan, std::vector<torch::jit::Module> modules, std::int64_t chunk, int tensor_rank = -1)
      : plan_(plan), modules_(std::move(modules)), chunk_(chunk), tensor_rank_(tensor_rank),
        consumers_(plan.stages.size()), logits_slices_(plan.stages.size()) {
    check_weight_names();
    for (const auto& stage : plan.stages) {
      consumers_[stage.id].resize(stage.outputs.size());
      for (std::size_t i = 0; i < stage.inputs.size(); ++i) {
        const auto& input = stage.inputs[i];
        if (input.from_stage >= 0) consumers_[input.from_stage][input.from_output].push_back({stage.id, static_cast<int>(i)});
      }
      for (std::size_t o = 0; o < stage.outputs.size(); ++o) logits_slices_[stage.id].push_back(logits_slice(stage, o));
    }
  }

  RunResult run(const Workload& work) {
    RunResult result{run_microbatches(work), {}};
    for (const auto& stage : plan_.stages)
      for (const auto& param : stage.params) accumulate(result.gradients[param.name], weight(stage, param).grad());
    return result;
  }

  // Forward and backward of every microbatch: the model outputs, by name, one piece per replica
  // slice or microbatch (see RunResult); the gradients stay in the weights.
  std::map<std::string, Tensors> run_microbatches(const Workload& work) {
    RunResult result;
    for (std::int64_t m = 0; m < plan_.batch.microbatches; ++m) run_microbatch(work, m * work.microbatch, result);
    return std::move(result.outputs);
  }

  at::Tensor weight(const plan::Stage& stage, const plan::Weight& param) const {
    return modules_[stage.id].attr(param.stage_name).toTensor();
  }

 private:
  struct Consumer {
    int stage = 0, input = 0;
  };
  using LogitsSlices = std::vector<std::optional<plan::DimSlice>>;  // per output of a stage
  // One microbatch in flight: per stage, per replica, the leaves fed in and the outputs.
  struct Microbatch {
    std::vector<std::vector<Tensors>> inputs, outputs;  // [stage][replica][index]
    std::vector<Tensors> joined_outputs;                 // [stage][output], the whole microbatch
    std::vector<Tensors> joined_input_grads;             // [stage][input], the whole microbatch
  };

  std::int64_t slice_length(const plan::Stage& stage) const {
    return std::min<std::int64_t>(stage.common_slice(plan_.batch.microbatch_size), chunk_);
  }
  int slices(const plan::Stage& stage) const { return static_cast<int>(plan_.batch.microbatch_size / slice_length(stage)); }

  // This tensor rank's slice of the classes where output o of `stage` is split logits.
  std::optional<plan::DimSlice> logits_slice(const plan::Stage& stage, std::size_t o) const {
    if (tensor_rank_ < 0 || stage.tensor_parallel.files.empty() || !plan::split_logits(stage, o)) return std::nullopt;
    return plan::tensor_slice(stage.outputs[o].shape.back(), stage.tensor_parallel.degree, tensor_rank_);
  }

  // The file this pipeline runs of `stage`, as errors name it.
  const std::string& file_of(const plan::Stage& stage) const {
    const auto& files = stage.tensor_parallel.files;
    return tensor_rank_ < 0 || files.empty() ? stage.file : files[static_cast<std::size_t>(tensor_rank_)].file;
  }

  void check_weight_names() const {
    for (const auto& stage : plan_.stages) {
      for (const auto* list : {&stage.params, &stage.buffers})
        for (const auto& weight : *list)
          if (!modules_[stage.id].hasattr(weight.stage_name)) {
            throw InputError(plan_.path + ": stages[" + std::to_string(stage.id) + "]: weight " + weight.name + " is '" +
                             weight.stage_name + "', which " + file_of(stage) + " does not have");
          }
    }
  }

  // Tensors in and out of a stage must be what the plan says (split logits: this rank's slice of
  // the classes), or nothing after this can be trusted.
  void check_tensors(const plan::Stage& stage, const Tensors& tensors, const std::vector<plan::Tensor>& planned,
                     const char* role, std::int64_t length, const LogitsSlices* logits = nullptr) const {
    std::string what = plan_.path + ": stage " + std::to_string(stage.id) + " (" + file_of(stage) + ")";
    if (tensors.size() != planned.size()) {
      throw InputError(what + " has " + std::to_string(tensors.size()) + " " + role + "s; the plan lists " +
                       std::to_string(planned.size()));
    }
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      auto shape = with_batch(planned[i].shape, planned[i].batch_dim, length);
      if (logits && (*logits)[i]) shape.back() = (*logits)[i]->length;
      if (tensors[i].scalar_type() != scalar_type_of(planned[i]) || tensors[i].sizes().vec() != shape) {
        throw InputError(what + " has " + std::string(c10::toString(tensors[i].scalar_type())) + " " +
                         c10::str(tensors[i].sizes()) + " as " + role + " " + std::to_string(i) + " '" + planned[i].name +
                         "'; the plan says " + planned[i].dtype + " " + c10::str(c10::IntArrayRef(shape)));
      }
    }
  }

  void check_outputs(const plan::Stage& stage, const Tensors& outputs, std::int64_t length) const {
    check_tensors(stage, outputs, stage.outputs, "output", length, &logits_slices_[stage.id]);
    for (std::size_t o = 0; o < outputs.size(); ++o) {
      const auto& planned = stage.outputs[o];
      bool sent = !consumers_[stage.id][o].empty();
      if (sent && planned.batch_dim < 0 && slices(stage) > 1) {
        throw InputError(plan_.path + ": stage " + std::to_string(stage.id) + " sends '" + planned.name + "', which has no batch dim, from " +
                         std::to_string(slices(stage)) + " replica slices: a batch-reduced value cannot be split among replicas");
      }
    }
  }

  void run_microbatch(const Workload& work, std::int64_t first_sample, RunResult& result) {
    auto stages = plan_.stages.size();
    Microbatch mb{std::vector<std::vector<Tensors>>(stages), std::vector<std::vector<Tensors>>(stages),
                  std::vector<Tensors>(stages), std::vector<Tensors>(stages)};
    for (const auto& stage : plan_.stages) forward(work, first_sample, stage, mb, result);
    for (auto s = stages; s-- > 0;) backward_stage(work, first_sample, plan_.stages[s], mb);
  }

  at::Tensor whole_input(const Workload& work, std::int64_t first_sample, const plan::Tensor& input,
                         const Microbatch& mb) const {
    if (input.model_input) return slice(work.inputs.at(*input.model_input), input.batch_dim, first_sample, work.microbatch);
    return mb.joined_outputs[input.from_stage][input.from_output];
  }

  void forward(const Workload& work, std::int64_t first_sample, const plan::Stage& stage, Microbatch& mb,
               RunResult& result) {
    auto length = slice_length(stage);
    std::string what = "stage " + std::to_string(stage.id) + " (" + file_of(stage) + ")";
    for (int j = 0; j < slices(stage); ++j) {
      Tensors leaves;
      for (const auto& input : stage.inputs)
        leaves.push_back(as_leaf(slice(whole_input(work, first_sample, input, mb), input.batch_dim, j * length, length)));
      check_tensors(stage, leaves, stage.inputs, "input", length);
      auto outputs = tuple_tensors(run_forward(modules_[stage.id], leaves, what), what);
      check_outputs(stage, outputs, length);
      mb.inputs[stage.id].push_back(std::move(leaves));
      mb.outputs[stage.id].push_back(std::move(outputs));
    }
    for (std::size_t o = 0; o < stage.outputs.size(); ++o) {
      Tensors parts;
      for (const auto& replica : mb.outputs[stage.id]) parts.push_back(replica[o].detach());
      const auto& output = stage.outputs[o];
      mb.joined_outputs[stage.id].push_back(join(parts, output.batch_dim));
      if (!output.model_output) continue;
      auto& pieces = result.outputs[output.name];
      if (output.batch_dim >= 0) {
        pieces.push_back(mb.joined_outputs[stage.id].back());
      } else {
        pieces.insert(pieces.end(), parts.begin(), parts.end());
      }
    }
  }

  // The gradient arriving at output `o` of replica `j`: the model's seed if it is a model output,
  // plus what every stage that reads it sends back.
  at::Tensor output_grad(const Workload& work, std::int64_t first_sample, const plan::Stage& stage, std::size_t o,
                         int j, const Microbatch& mb) const {
    const auto& output = stage.outputs[o];
    auto length = slice_length(stage);
    at::Tensor grad;
    if (output.model_output) grad = seed_for(work, output.name, output.batch_dim, first_sample + j * length, length);
    if (const auto& classes = logits_slices_[stage.id][o]; classes && grad.defined())
      grad = grad.narrow(-1, classes->begin, classes->length);
    for (const auto& consumer : consumers_[stage.id][o]) {
      const auto& sent = mb.joined_input_grads[consumer.stage][consumer.input];
      if (sent.defined()) accumulate(grad, slice(sent, output.batch_dim, j * length, length));
    }
    return grad;
  }

  void backward_stage(const Workload& work, std::int64_t first_sample, const plan::Stage& stage, Microbatch& mb) {
    for (int j = 0; j < slices(stage); ++j) {
      Tensors grads;
      for (std::size_t o = 0; o < stage.outputs.size(); ++o) grads.push_back(output_grad(work, first_sample, stage, o, j, mb));
      backward(mb.outputs[stage.id][j], grads);
    }
    for (std::size_t i = 0; i < stage.inputs.size(); ++i) {
      Tensors parts;
      bool any = false;
      for (const auto& replica : mb.inputs[stage.id]) {
        const auto& grad = replica[i].grad();
        any = any || grad.defined();
        parts.push_back(grad.defined() ? grad : at::zeros_like(replica[i]));
      }
      mb.joined_input_grads[stage.id].push_back(any ? join_grads(parts, stage.inputs[i].batch_dim) : at::Tensor());
    }
  }

  const plan::Plan& plan_;
  std::vector<torch::jit::Module> modules_;
  std::int64_t chunk_;
  int tensor_rank_;  // -1: the whole stage files
  std::vector<std::vector<std::vector<Consumer>>> consumers_;  // [stage][output] -> readers
  std::vector<LogitsSlices> logits_slices_;                     // [stage][output]
};

// Pieces in sample order: joined along the batch dim, or stacked when they have none.
at::Tensor whole(const Tensors& pieces, int batch_dim) {
  if (pieces.size() == 1) return pieces.front();
  return batch_dim >= 0 ? at::cat(pieces, batch_dim) : at::stack(pieces);
}

// The largest absolute difference, and that over the largest magnitude of the reference, or
// over `floor` where the reference is smaller (the absolute difference where both are zero).
// Anything not finite is a problem.
TorchPlugin::Difference compare(const std::string& what, const Tensors& ours, const Tensors& reference,
                                 int batch_dim, std::vector<std::string>& problems, double floor = 0) {
  auto a = whole(ours, batch_dim).to(at::kDouble), b = whole(reference, batch_dim).to(at::kDouble);
  if (a.sizes() != b.sizes()) {
    problems.push_back(what + ": shape " + c10::str(a.sizes()) + " against the model's " + c10::str(b.sizes()));
    return {what, 0, 0};
  }
  if (!b.isfinite().all().item<bool>()) {
    problems.push_back(what + ": not finite (NaN or infinity) in the model");
    return {what, 0, 0, /*reference_not_finite=*/true};
  }
  if (!a.isfinite().all().item<bool>()) {
    problems.push_back(what + ": not finite (NaN or infinity) in the stages");
    return {what, 0, 0};
  }
  double max_abs = a.numel() ? (a - b).abs().max().item<double>() : 0;
  double scale = b.numel() ? b.abs().max().item<double>() : 0;
  scale = std::max(scale, floor);
  return {what, max_abs, scale > 0 ? max_abs / scale : max_abs};
}

// After the names of the tensor ranks' files' outputs and gradients in the report, to tell them
// from the stage files' (no suffix).
constexpr const char* kRankFiles = " (rank files)";

void compare_outputs(const plan::Plan& plan, const RunResult& ours, const RunResult& reference,
                     std::vector<Difference>& differences, std::vector<std::string>& problems, const char* of = "") {
  for (const auto& [name, output] : model_outputs(plan)) {
    if (!reference.outputs.count(name)) {
      problems.push_back("output " + name + of + ": the plan has it, the model does not return it");
      continue;
    }
    differences.push_back(compare("output " + name + of, ours.outputs.at(name), reference.outputs.at(name),
                                  output->batch_dim, problems));
  }
  for (const auto& [name, values] : reference.outputs)
    if (!ours.outputs.count(name)) problems.push_back("output " + name + of + ": no stage returns it");
}


double largest_magnitude(const std::map<std::string, at::Tensor>& gradients) {
  double largest = 0;
  for (const auto& [name, grad] : gradients)
    if (grad.defined() && grad.numel() > 0 && grad.isfinite().all().item<bool>())
      largest = std::max(largest, grad.abs().max().item<double>());
  return largest;
}

// `floor`: see TorchPlugin::VerifyRequest::gradient_floor.
void compare_gradients(const RunResult& ours, const RunResult& reference, double floor,
                       std::vector<Difference>& differences, std::vector<std::string>& problems, const char* of = "") {
  for (const auto& [name, grad] : reference.gradients) {
    auto it = ours.gradients.find(name);
    if (it == ours.gradients.end()) {
      if (grad.defined()) problems.push_back("gradient " + name + of + ": the model has one, no stage holds the parameter");
      continue;
    }
    auto zero_if_undefined = [&](const at::Tensor& g) { return g.defined() ? g : at::zeros_like(it->second.defined() ? it->second : grad); };
    if (!grad.defined() && !it->second.defined()) continue;  // a frozen parameter
    differences.push_back(compare("gradient " + name + of, {zero_if_undefined(it->second)}, {zero_if_undefined(grad)}, -1,
                                  problems, floor));
  }
  bool any_gradient = std::any_of(reference.gradients.begin(), reference.gradients.end(),
                                  [](const auto& entry) { return entry.second.defined(); });
  if (any_gradient && differences.empty())
    problems.push_back(std::string("no gradient reached any parameter of the stages") + of);
  for (const auto& [name, grad] : ours.gradients)
    if (!reference.gradients.count(name))
      problems.push_back("gradient " + name + of + ": a stage holds it, the model has no such parameter");
}

// The stage files, or those tensor rank `tensor_rank` runs (Plan::stage_path).
std::vector<torch::jit::Module> load_stages(const plan::Plan& plan, int tensor_rank = -1) {
  std::vector<torch::jit::Module> modules;
  for (const auto& stage : plan.stages) {
    auto path = tensor_rank < 0 ? plan.stage_path(stage) : plan.stage_path(stage, tensor_rank);
    try {
      modules.push_back(torch::jit::load(path));
    } catch (const std::exception& e) {
      throw InputError(path + ": cannot load the stage file: " + torch_message(e));
    }
  }
  return modules;
}

// The degree of the stages that have tensor ranks' files (0: none), or 0 with `why_not` where
// they differ: one group of threads runs one degree, as rannc-run trains one.
int rank_file_degree(const plan::Plan& plan, std::string& why_not) {
  std::set<int> degrees;
  for (const auto& stage : plan.stages)
    if (!stage.tensor_parallel.files.empty()) degrees.insert(stage.tensor_parallel.degree);
  if (degrees.size() <= 1) return degrees.empty() ? 0 : *degrees.begin();
  why_not = "stages split " + std::to_string(*degrees.begin()) + " and " + std::to_string(*degrees.rbegin()) +
            " ways, and one group of threads runs one degree";
  return 0;
}

// "gradient w in stage 1, tensor rank 2 against rank 0"
std::string against_rank_0(const std::string& what, int rank) {
  return what + ", tensor rank " + std::to_string(rank) + " against rank 0";
}

// The tensor ranks' files chained (TorchPlugin::TensorRankCheck): a Pipeline per rank, the ranks
// run as threads of one group (tensor_parallel_threads.h), each on the whole workload, as every
// rank of a group runs its replica's samples. What they compute joins into what the model does.
class TensorRanks {
 public:
  TensorRanks(const plan::Plan& plan, int degree, std::int64_t chunk) : plan_(plan) {
    for (int r = 0; r < degree; ++r) pipelines_.emplace_back(plan, load_stages(plan, r), chunk, r);
  }

  // A rank's error naming its file passes as it is; others (ranks calling different collectives,
  // a backward failing) get the plan's name.
  void run(const Workload& work) {
    outputs_.resize(pipelines_.size());
    try {
      tp::run_ranks_as_threads(degree(), [&](int rank) {
        torch::jit::setGraphExecutorOptimize(false);  // as verify_stages sets it, on this thread too
        outputs_[static_cast<std::size_t>(rank)] = pipelines_[static_cast<std::size_t>(rank)].run_microbatches(work);
      });
    } catch (const InputError&) {
      throw;
    } catch (const std::exception& e) {
      throw InputError(plan_.path + ": the files of " + std::to_string(degree()) +
                       " tensor ranks, chained as threads: " + torch_message(e));
    }
  }

  // The joined outputs and gradients against the model's; what each rank computes whole against
  // rank 0's. `floor`: see compare_gradients.
  void compare_with(const RunResult& reference, double floor, Report& report) const {
    auto& check = report.tensor_ranks;
    check.degree = degree();
    RunResult joined{joined_outputs(check.across_ranks, report.problems),
                     joined_gradients(floor, check.across_ranks, report.problems)};
    compare_outputs(plan_, joined, reference, check.outputs, report.problems, kRankFiles);
    compare_gradients(joined, reference, floor, check.gradients, report.problems, kRankFiles);
  }

 private:
  int degree() const { return static_cast<int>(pipelines_.size()); }

  std::set<std::string> split_logits_names() const {
    std::set<std::string> names;
    for (const auto& stage : plan_.stages)
      for (std::size_t o = 0; o < stage.outputs.size(); ++o)
        if (!stage.tensor_parallel.files.empty() && plan::split_logits(stage, o)) names.insert(stage.outputs[o].name);
    return names;
  }

  // Split logits joined along the classes, the other outputs rank 0's.
  std::map<std::string, Tensors> joined_outputs(std::vector<Difference>& across, std::vector<std::string>& problems) const {
    auto planned = model_outputs(plan_);
    auto split = split_logits_names();
    std::map<std::string, Tensors> joined;
    for (const auto& [name, pieces] : outputs_.front()) {
      auto& whole = joined[name];
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        Tensors ranks;
        for (const auto& rank : outputs_) ranks.push_back(rank.at(name).at(i));
        whole.push_back(split.count(name) ? at::cat(ranks, -1) : ranks.front());
      }
      if (split.count(name)) continue;
      int batch_dim = planned.count(name) ? planned.at(name)->batch_dim : -1;
      for (int r = 1; r < degree(); ++r)
        across.push_back(compare(against_rank_0("output " + name, r), outputs_[static_cast<std::size_t>(r)].at(name),
                                 pieces, batch_dim, problems));
    }
    return joined;
  }

  // Each weight's gradient summed over the stages that hold it, a stage's joined from the
  // ranks' slices where it splits the weight, else rank 0's.
  std::map<std::string, at::Tensor> joined_gradients(double floor, std::vector<Difference>& across,
                                                     std::vector<std::string>& problems) const {
    std::map<std::string, at::Tensor> gradients;
    for (const auto& stage : plan_.stages) {
      std::map<std::string, const plan::TensorParallel::SplitWeight*> split;
      if (!stage.tensor_parallel.files.empty())
        for (const auto& weight : stage.tensor_parallel.weights) split[weight.name] = &weight;
      for (const auto& param : stage.params) {
        auto& sum = gradients[param.name];
        auto ranks = rank_gradients(stage, param);
        if (ranks.empty()) continue;
        if (auto it = split.find(param.name); it != split.end()) {
          accumulate(sum, joined_slices(ranks, *it->second));
          continue;
        }
        std::string what = "gradient " + param.name + " in stage " + std::to_string(stage.id);
        for (int r = 1; r < degree(); ++r)
          across.push_back(compare(against_rank_0(what, r), {ranks[static_cast<std::size_t>(r)]}, {ranks.front()}, -1,
                                   problems, floor));
        accumulate(sum, ranks.front());
      }
    }
    return gradients;
  }

  // Each rank's gradient of `param`: none where no rank has one (a frozen weight), zeros where
  // only some have.
  Tensors rank_gradients(const plan::Stage& stage, const plan::Weight& param) const {
    Tensors grads;
    for (const auto& pipeline : pipelines_) grads.push_back(pipeline.weight(stage, param).grad());
    if (std::none_of(grads.begin(), grads.end(), [](const at::Tensor& g) { return g.defined(); })) return {};
    for (std::size_t r = 0; r < grads.size(); ++r)
      if (!grads[r].defined()) grads[r] = at::zeros_like(pipelines_[r].weight(stage, param));
    return grads;
  }

  const plan::Plan& plan_;
  std::vector<Pipeline> pipelines_;
  std::vector<std::map<std::string, Tensors>> outputs_;  // [rank]: Pipeline::run_microbatches
};

// compare() for the float64 check: where only float32 is not finite the difference is infinite;
// where float64 is not, `float64_not_finite` is set (no verdict).
TorchPlugin::Difference compare_with_float64(const std::string& what, const Tensors& float32, const Tensors& float64,
                                             int batch_dim, double floor, bool& float64_not_finite) {
  std::vector<std::string> problems;
  auto difference = compare(what, float32, float64, batch_dim, problems, floor);
  if (difference.reference_not_finite) float64_not_finite = true;
  else if (!problems.empty()) difference.max_abs = difference.max_rel = std::numeric_limits<double>::infinity();
  return difference;
}

double worst_of(const TorchPlugin::Float64Check& check) {
  double worst = 0;
  for (const auto* list : {&check.outputs, &check.gradients})
    for (const auto& d : *list) worst = std::max(worst, d.max_rel);
  return worst;
}

// The model in float64 on the workload, or why it does not run.
std::optional<RunResult> run_in_float64(const TorchPlugin::VerifyRequest& request, const Workload& work,
                                        std::string& why) {
  try {
    return Reference(request, float64_model(request)).run(work);
  } catch (const InputError& e) {
    why = e.what();
  } catch (const std::exception& e) {
    why = "the model in float64 fails: " + torch_message(e);
  }
  return std::nullopt;
}

// The reference (the model in float32) against the model in float64 on the same workload, as
// the stages against the reference; beyond the tolerance, the op where they part
// (float64_reference.h).
TorchPlugin::Float64Check check_against_float64(const TorchPlugin::VerifyRequest& request, const Workload& work,
                                                const Reference& model, const RunResult& float32) {
  TorchPlugin::Float64Check check;
  check.not_run = request.float64_off;
  if (auto why = float64_unavailable(request); check.not_run.empty() && why) check.not_run = *why;
  auto float64 = check.not_run.empty() ? run_in_float64(request, work, check.not_run) : std::nullopt;
  if (!float64) return check;
  bool float64_not_finite = false;
  for (const auto& [name, output] : model_outputs(*request.plan)) {
    if (!float32.outputs.count(name) || !float64->outputs.count(name)) continue;
    check.outputs.push_back(compare_with_float64("output " + name, float32.outputs.at(name), float64->outputs.at(name),
                                                 output->batch_dim, 0, float64_not_finite));
  }
  double floor = request.gradient_floor * largest_magnitude(float64->gradients);
  for (const auto& [name, grad] : float64->gradients) {
    auto it = float32.gradients.find(name);
    if (!grad.defined() || it == float32.gradients.end() || !it->second.defined()) continue;
    check.gradients.push_back(compare_with_float64("gradient " + name, {it->second}, {grad}, -1, floor, float64_not_finite));
  }
  if (float64_not_finite) {
    TorchPlugin::Float64Check no_verdict;
    no_verdict.not_run = "the model in float64 gives NaN or infinity on made-up inputs";
    return no_verdict;
  }
  check.ran = true;
  if (worst_of(check) <= request.float64_tolerance) return check;
  try {
    locate_departure(request, model.chunk_inputs(work, 0), model.chunk_seeds(work, 0), check);
  } catch (const std::exception& e) {
    check.not_located = "the op could not be looked for: " + torch_message(e);
  }
  return check;
}

}  // namespace

TorchPlugin::VerifyReport verify_stages(const TorchPlugin::VerifyRequest& request) {
  // The profiling executor would re-specialise the graphs between runs; verify runs them as saved.
  torch::jit::setGraphExecutorOptimize(false);
  const auto& plan = *request.plan;
  auto modules = load_stages(plan);
  Report report;
  for (const auto& stage : plan.stages) {
    if (auto why = random_op(stage, modules[stage.id])) {
      if (!request.skip_random) throw InputError("verify: " + *why);
      report.skipped = *why;
      return report;
    }
  }
  report.reference_chunk = reference_chunk(plan, modules, report.note);
  auto work = make_workload(request, report.reference_chunk);
  report.samples = work.samples;
  auto ours = Pipeline(plan, std::move(modules), report.reference_chunk).run(work);
  std::optional<TensorRanks> ranks;
  if (int degree = rank_file_degree(plan, report.tensor_ranks.not_chained)) {
    ranks.emplace(plan, degree, report.reference_chunk);
    ranks->run(work);
  }
  Reference model(request);
  auto reference = model.run(work);
  compare_outputs(plan, ours, reference, report.outputs, report.problems);
  double floor = request.gradient_floor * largest_magnitude(reference.gradients);
  compare_gradients(ours, reference, floor, report.gradients, report.problems);
  if (ranks) ranks->compare_with(reference, floor, report);
  report.float64 = check_against_float64(request, work, model, reference);
  return report;
}

}  // namespace rannc
