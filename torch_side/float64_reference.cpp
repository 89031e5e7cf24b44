// The model in float64 (float64_reference.h), and the search for the op where float32 parts
// from it.
//
// Only float32 becomes float64: weights, inputs, tensor constants and dtype arguments (x.float(),
// torch.zeros(..., dtype=torch.float32)). What a model computes in other types (integers, bf16)
// stays, so the comparison measures what float32 rounding does to it.
//
// The search runs the whole model node by node in float64 (a TorchScript model's lowered graph,
// an ONNX model's reference module), with autograd across the nodes, then
//  1. runs each node alone in float32 and in float64 on the float64 values (rounded to float32
//     for the float32 run), backward from the float64 gradients of its outputs (with their
//     strides: libtorch's faults can depend on them): the nodes whose output or input gradients
//     depart beyond the tolerance are candidates. A candidate may be harmless: a value that is 0
//     in exact arithmetic is rounding noise in both, with no relative agreement to find;
//  2. runs the whole model in float64 again with one candidate in float32 (its inputs rounded to
//     float32, its outputs back to float64), in graph order: the first whose model outputs or
//     weight gradients then depart beyond the tolerance is where the two part.
// A departure that builds up over many ops, none beyond the tolerance alone, names no op. The
// search runs on one chunk of verify's samples; in-place ops (rare after the frontend removes
// mutation) are not candidates, since run alone they would not write where the model reads.
#include "torch_side/float64_reference.h"

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_map>

#include "frontends/onnx/onnx_stage_source.h"
#include "emit/stage_layout.h"
#include "frontends/torchscript/torchscript_source.h"
#include "frontends/torchscript/torchscript_stages.h"

namespace rannc {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;
using Tensors = std::vector<at::Tensor>;

// At most this many candidates are run in the whole model (each is a forward and backward).
constexpr std::size_t kMostCandidates = 16;

bool is_dtype_argument(const Node* node, std::size_t index) {
  const auto* schema = node->maybeSchema();
  if (!schema || index >= schema->arguments().size()) return false;
  auto type = schema->arguments()[index].real_type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::ScalarTypeType;
}

// Float32 tensor constants and float32 dtype arguments of the nodes become float64.
void compute_in_float64(torch::jit::Block* block) {
  std::vector<Node*> nodes(block->nodes().begin(), block->nodes().end());  // constants are inserted
  for (Node* node : nodes) {
    for (auto* inner : node->blocks()) compute_in_float64(inner);
    torch::jit::WithInsertPoint here(node);
    auto& graph = *node->owningGraph();
    if (node->kind() == c10::prim::Constant) {
      auto value = torch::jit::toIValue(node->output());
      if (value && value->isTensor() && value->toTensor().scalar_type() == at::kFloat)
        node->output()->replaceAllUsesWith(graph.insertConstant(value->toTensor().to(at::kDouble)));
      continue;
    }
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      if (!is_dtype_argument(node, i)) continue;
      auto dtype = torch::jit::toIValue(node->input(i));
      if (dtype && dtype->isInt() && dtype->toInt() == static_cast<std::int64_t>(at::kFloat))
        node->replaceInput(i, graph.insertConstant(static_cast<std::int64_t>(at::kDouble)));
    }
  }
}

at::Tensor cast_tensor(const at::Tensor& t, at::ScalarType from, at::ScalarType to) {
  return t.defined() && t.scalar_type() == from ? t.to(to) : t;
}

// Tensors of type `from`, alone or in lists and tuples, as `to` (strides kept); the rest as is.
c10::IValue cast_value(const c10::IValue& value, at::ScalarType from, at::ScalarType to) {
  if (value.isTensor()) return cast_tensor(value.toTensor(), from, to);
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorVector()) list.push_back(cast_tensor(t, from, to));
    return list;
  }
  if (value.isTuple()) {
    std::vector<c10::IValue> elements;
    for (const auto& e : value.toTupleRef().elements()) elements.push_back(cast_value(e, from, to));
    return c10::ivalue::Tuple::create(std::move(elements));
  }
  return value;
}

void collect_tensors(const c10::IValue& value, Tensors& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  else if (value.isTensorList()) for (const at::Tensor& t : value.toTensorVector()) out.push_back(t);
  else if (value.isTuple()) for (const auto& e : value.toTupleRef().elements()) collect_tensors(e, out);
}

// max |a - b| over max(max |b|, floor), b the float64 side; infinite where only `a` is not
// finite, 0 where `b` is not (no verdict).
double relative_difference(const at::Tensor& a, const at::Tensor& b, double floor) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || a.sizes() != b.sizes()) return 0;
  auto x = a.detach().to(at::kDouble), y = b.detach().to(at::kDouble);
  if (!y.isfinite().all().item<bool>()) return 0;
  if (!x.isfinite().all().item<bool>()) return std::numeric_limits<double>::infinity();
  double scale = std::max(y.abs().max().item<double>(), floor);
  double max_abs = (x - y).abs().max().item<double>();
  return scale > 0 ? max_abs / scale : max_abs;
}

double largest_magnitude(const Tensors& tensors) {
  double largest = 0;
  for (const auto& t : tensors)
    if (t.defined() && t.numel() > 0 && t.isfinite().all().item<bool>())
      largest = std::max(largest, t.abs().max().item<double>());
  return largest;
}

// Outputs against outputs, then gradients against gradients measured against at least
// `floor_fraction` of the largest float64 gradient: the worst relative difference.
double worst_difference(const Tensors& outputs, const Tensors& outputs64, const Tensors& grads, const Tensors& grads64,
                        double floor_fraction) {
  double worst = 0;
  for (std::size_t i = 0; i < outputs.size(); ++i) worst = std::max(worst, relative_difference(outputs[i], outputs64[i], 0));
  double floor = floor_fraction * largest_magnitude(grads64);
  for (std::size_t i = 0; i < grads.size(); ++i) worst = std::max(worst, relative_difference(grads[i], grads64[i], floor));
  return worst;
}

// Gradients of `inputs` from backward of `outputs` with `seeds`, where both are there.
Tensors gradients(const Tensors& outputs, const Tensors& seeds, const Tensors& inputs) {
  Tensors roots, grads;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (!seeds[i].defined() || !outputs[i].requires_grad()) continue;
    roots.push_back(outputs[i]);
    grads.push_back(seeds[i]);
  }
  if (roots.empty() || inputs.empty()) return Tensors(inputs.size());
  return torch::autograd::grad(roots, inputs, grads, /*retain_graph=*/true, /*create_graph=*/false, /*allow_unused=*/true);
}

bool in_place(const Node* node) {
  std::string kind = node->kind().toQualString();
  return kind.size() > 1 && kind.back() == '_' && kind.rfind("aten::", 0) == 0;
}

// One node of the whole graph in a graph of its own, compiled in float32 and in float64: its
// non-constant inputs are the graph's, its constants cloned.
class NodeAlone {
 public:
  explicit NodeAlone(Node* node) {
    auto graph = std::make_shared<Graph>();
    std::unordered_map<Value*, Value*> env;
    for (Value* input : node->inputs()) {
      if (env.count(input)) continue;
      if (input->node()->kind() == c10::prim::Constant) {
        env[input] = graph->appendNode(graph->createClone(input->node(), [](Value* v) { return v; }))->output();
      } else {
        env[input] = graph->addInput()->setType(input->type());
        reads_.push_back(input);
      }
    }
    Node* clone = graph->appendNode(graph->createClone(node, [&](Value* v) { return env.at(v); }));
    for (Value* output : clone->outputs()) graph->registerOutput(output);
    auto graph64 = graph->copy();
    compute_in_float64(graph64->block());
    float32_ = std::make_unique<torch::jit::Code>(graph, "float32");
    float64_ = std::make_unique<torch::jit::Code>(graph64, "float64");
  }

  // The model's values it reads, in the order of its inputs.
  const std::vector<Value*>& reads() const { return reads_; }

  torch::jit::Stack run(torch::jit::Stack stack, bool float32) const {
    torch::jit::InterpreterState(float32 ? *float32_ : *float64_).run(stack);
    return stack;
  }

 private:
  std::vector<Value*> reads_;
  std::unique_ptr<torch::jit::Code> float32_, float64_;
};

// The values of one run of the model, node by node.
struct ModelRun {
  std::unordered_map<const Value*, c10::IValue> values;
  Tensors outputs;  // model.graph.model_outputs() order
};

// The whole model as one graph without control flow: its inputs are the model inputs, then the
// weights. TorchScript: the lowered graph, its nodes the IR's ops; ONNX: the reference module's
// forward, its attribute reads made inputs.
struct WholeGraph {
  std::shared_ptr<Graph> graph;
  Tensors weights;
  std::vector<bool> trainable;
  std::vector<const Value*> outputs;  // model.graph.model_outputs() order
  // The IR op of a node and the name of the value it computes, where known.
  struct Op {
    ir::OpId id = ir::kNoId;
    std::string value;
  };
  std::unordered_map<const Node*, Op> ops;
};

WholeGraph torchscript_graph(const Model& model) {
  const auto& source = dynamic_cast<const TorchScriptSource&>(*model.source);
  WholeGraph whole;
  whole.graph = source.graph;
  for (const auto& weight : source.weights) {
    whole.weights.push_back(weight.tensor);
    whole.trainable.push_back(weight.trainable);
  }
  for (const auto& op : model.graph.ops()) {
    if (op.source_node < 0 || op.outputs.empty()) continue;
    whole.ops[source.nodes.at(static_cast<std::size_t>(op.source_node))] = {op.id, model.graph.value(op.outputs[0]).name};
  }
  // Graph inputs come first in the IR, then node outputs.
  for (auto id : model.graph.model_outputs()) {
    const auto& value = model.graph.value(id);
    if (value.producer == ir::kNoId) {
      whole.outputs.push_back(source.graph->inputs().at(static_cast<std::size_t>(id)));
      continue;
    }
    const auto& op = model.graph.op(value.producer);
    auto k = static_cast<std::size_t>(std::find(op.outputs.begin(), op.outputs.end(), id) - op.outputs.begin());
    whole.outputs.push_back(source.nodes.at(static_cast<std::size_t>(op.source_node))->outputs().at(k));
  }
  return whole;
}

WholeGraph module_graph(const torch::jit::Module& module) {
  WholeGraph whole;
  whole.graph = module.get_method("forward").graph()->copy();
  auto& graph = *whole.graph;
  std::set<std::string> parameters;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) parameters.insert(p.name);
  Value* self = graph.inputs().at(0);
  for (Node* node : std::vector<Node*>(graph.nodes().begin(), graph.nodes().end())) {
    if (node->kind() != c10::prim::GetAttr || node->input() != self) continue;
    const auto& name = node->s(c10::attr::name);
    node->output()->replaceAllUsesWith(graph.addInput()->setType(node->output()->type()));
    node->destroy();
    whole.weights.push_back(module.attr(name).toTensor());
    whole.trainable.push_back(parameters.count(name) > 0);
  }
  graph.eraseInput(0);
  const Node* tuple = graph.outputs().at(0)->node();
  whole.outputs.assign(tuple->inputs().begin(), tuple->inputs().end());
  return whole;
}

// An ONNX model's ops found by the variable their output is bound to in the generated source
// (an op mapped to several aten calls is found at the last).
void find_onnx_ops(const ir::Graph& graph, WholeGraph& whole) {
  std::unordered_map<std::string, const ir::Value*> by_variable;
  for (const auto& value : graph.values())
    if (value.producer != ir::kNoId) by_variable.emplace(stage_variable_name(value.name), &value);
  for (const Node* node : whole.graph->nodes()) {
    if (node->outputs().empty()) continue;
    auto it = by_variable.find(node->outputs()[0]->debugNameBase());
    if (it != by_variable.end()) whole.ops[node] = {it->second->producer, it->second->name};
  }
}

WholeGraph whole_graph(const TorchPlugin::VerifyRequest& request) {
  if (!request.reference) return torchscript_graph(*request.model);
  auto whole = module_graph(source_stage_module(*request.reference, "Search"));
  find_onnx_ops(request.model->graph, whole);
  return whole;
}

// The whole graph run node by node in float64 (float32 inputs and weights cast), one node
// optionally in float32, with autograd across the nodes.
class NodeByNode {
 public:
  NodeByNode(WholeGraph whole, const Tensors& inputs) : whole_(std::move(whole)) {
    for (const auto& input : inputs) inputs_.push_back(cast_tensor(input, at::kFloat, at::kDouble));
    for (std::size_t i = 0; i < whole_.weights.size(); ++i) {
      auto tensor = cast_tensor(whole_.weights[i].detach(), at::kFloat, at::kDouble);
      weights_.push_back(whole_.trainable[i] ? tensor.clone().requires_grad_(true) : tensor);
      if (whole_.trainable[i]) trainable_.push_back(weights_.back());
    }
    for (Node* node : whole_.graph->nodes()) {
      if (node->kind() == c10::prim::Constant) continue;
      if (!node->blocks().empty()) throw std::invalid_argument(describe(node) + " holds control flow, which does not run alone");
      nodes_.push_back({node, std::make_unique<NodeAlone>(node)});
    }
  }

  // `float32_node`: an index into nodes(), or -1 for none.
  ModelRun run(std::ptrdiff_t float32_node) const {
    ModelRun run;
    const auto& graph_inputs = whole_.graph->inputs();
    for (std::size_t i = 0; i < graph_inputs.size(); ++i) {
      const auto& value = i < inputs_.size() ? inputs_[i] : weights_[i - inputs_.size()];
      // Buffers are copied: a training-mode batch_norm updates its statistics in place.
      run.values[graph_inputs[i]] = value.requires_grad() ? value : value.clone();
    }
    for (std::size_t n = 0; n < nodes_.size(); ++n) {
      const auto& [node, alone] = nodes_[n];
      bool float32 = static_cast<std::ptrdiff_t>(n) == float32_node;
      torch::jit::Stack stack;
      for (Value* read : alone->reads()) {
        const auto& value = run.values.at(read);
        stack.push_back(float32 ? cast_value(value, at::kDouble, at::kFloat) : value);
      }
      stack = alone->run(std::move(stack), float32);
      for (std::size_t k = 0; k < node->outputs().size(); ++k)
        run.values[node->outputs()[k]] = float32 ? cast_value(stack[k], at::kFloat, at::kDouble) : stack[k];
    }
    for (const Value* output : whole_.outputs) {
      Tensors tensors;
      collect_tensors(run.values.at(output), tensors);
      run.outputs.push_back(tensors.empty() ? at::Tensor() : tensors.front());
    }
    return run;
  }

  Tensors weight_gradients(const ModelRun& run, const Tensors& seeds) const {
    return gradients(run.outputs, seeds, trainable_);
  }

  struct Step {
    Node* node;
    std::unique_ptr<NodeAlone> alone;
  };
  const std::vector<Step>& nodes() const { return nodes_; }

  // The IR op of a node, kNoId where not known, and the name of the value it computes.
  WholeGraph::Op op_of(const Node* node) const {
    if (auto it = whole_.ops.find(node); it != whole_.ops.end()) return it->second;
    return {ir::kNoId, node->outputs().empty() ? "" : node->outputs()[0]->debugName()};
  }

  std::string describe(const Node* node) const {
    auto op = op_of(node);
    return (op.id == ir::kNoId ? "op '" : "op " + std::to_string(op.id) + " '") + node->kind().toQualString() + "'";
  }

 private:
  WholeGraph whole_;
  Tensors inputs_, weights_, trainable_;
  std::vector<Step> nodes_;
};

// The float64 gradient of every node output that takes one, by value.
std::unordered_map<const Value*, at::Tensor> output_gradients(const NodeByNode& model, const ModelRun& run,
                                                              const Tensors& seeds) {
  std::vector<const Value*> values;
  Tensors tensors;
  for (const auto& step : model.nodes()) {
    for (const Value* output : step.node->outputs()) {
      const auto& value = run.values.at(output);
      if (!value.isTensor() || !value.toTensor().requires_grad()) continue;
      values.push_back(output);
      tensors.push_back(value.toTensor());
    }
  }
  auto grads = gradients(run.outputs, seeds, tensors);
  std::unordered_map<const Value*, at::Tensor> by_value;
  for (std::size_t i = 0; i < values.size(); ++i) by_value[values[i]] = grads[i];
  return by_value;
}

// A node's inputs as fresh leaves: those that take gradients in the model take them here.
struct Leaves {
  torch::jit::Stack stack;
  Tensors tensors;
};
Leaves leaves(const std::vector<Value*>& reads, const ModelRun& run, bool float32) {
  Leaves result;
  auto leaf = [&](const at::Tensor& t) {
    auto copy = float32 ? cast_tensor(t.detach(), at::kDouble, at::kFloat) : t.detach();
    if (t.requires_grad()) {
      copy = copy.clone().requires_grad_(true);
      result.tensors.push_back(copy);
    }
    return copy;
  };
  for (Value* read : reads) {
    const auto& value = run.values.at(read);
    if (value.isTensor()) {
      result.stack.push_back(leaf(value.toTensor()));
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorVector()) list.push_back(leaf(t));
      result.stack.push_back(list);
    } else {
      result.stack.push_back(value);
    }
  }
  return result;
}

struct Candidate {
  std::size_t step = 0;
  bool in_backward = false;
  double max_rel = 0;
};

// Step 1 of the search (top of the file) for one node: how far its float32 output and input
// gradients are from float64.
std::optional<Candidate> screen(const NodeByNode::Step& step, std::size_t index, const ModelRun& run,
                                const std::unordered_map<const Value*, at::Tensor>& output_grads, double tolerance,
                                double gradient_floor) {
  if (in_place(step.node)) return std::nullopt;
  auto leaves64 = leaves(step.alone->reads(), run, false), leaves32 = leaves(step.alone->reads(), run, true);
  auto outputs64 = step.alone->run(leaves64.stack, false), outputs32 = step.alone->run(leaves32.stack, true);
  Tensors out64, out32, seeds64, seeds32;
  for (std::size_t k = 0; k < outputs64.size(); ++k) {
    collect_tensors(outputs64[k], out64);
    collect_tensors(outputs32[k], out32);
    auto grad = output_grads.find(step.node->outputs()[k]);
    at::Tensor seed = grad == output_grads.end() ? at::Tensor() : grad->second;
    while (seeds64.size() < out64.size()) {
      seeds64.push_back(seed);
      seed = at::Tensor();  // a list or tuple output takes no gradient here
    }
  }
  if (out64.size() != out32.size()) return std::nullopt;
  for (const auto& seed : seeds64) seeds32.push_back(cast_tensor(seed, at::kDouble, at::kFloat));
  double output_rel = worst_difference(out32, out64, {}, {}, 0);
  auto grads64 = gradients(out64, seeds64, leaves64.tensors), grads32 = gradients(out32, seeds32, leaves32.tensors);
  double grad_rel = worst_difference({}, {}, grads32, grads64, gradient_floor);
  if (std::max(output_rel, grad_rel) <= tolerance) return std::nullopt;
  return Candidate{index, output_rel <= tolerance, std::max(output_rel, grad_rel)};
}

// A traced op's original range is its Python stack, innermost first, one frame a line:
// "/path/file.py(91): forward". The innermost outside torch itself names the model's own line
// (torch.nn's Linear says less than the line that called it); else the innermost.
std::string traced_frame(const std::string& stack) {
  std::istringstream lines(stack);
  std::string line, innermost;
  while (std::getline(lines, line)) {
    auto close = line.find("): ");
    auto open = close == std::string::npos ? std::string::npos : line.rfind('(', close);
    auto number = open == std::string::npos ? "" : line.substr(open + 1, close - open - 1);
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) break;
    std::string frame = line.substr(0, open) + ":" + number;
    if (innermost.empty()) innermost = frame;
    if (frame.find("/torch/") == std::string::npos) return frame;
  }
  return innermost;
}

// The Python line the op was traced or scripted from, else its line in the saved code.
std::string source_line(const Node* node) {
  auto range = node->sourceRange();
  auto original = range.findSourceRangeThatGenerated().value_or(range);
  if (auto frame = traced_frame(original.text().str()); !frame.empty()) return frame;
  auto where = original.file_line_col();
  if (!where || std::get<0>(*where) == "<string>") return "";  // generated source (an ONNX model's)
  return std::get<0>(*where) + ":" + std::to_string(std::get<1>(*where));
}

}  // namespace

std::optional<std::string> float64_unavailable(const TorchPlugin::VerifyRequest& request) {
  for (auto id : request.model->graph.model_outputs()) {
    const auto& value = request.model->graph.value(id);
    if (value.is_tensor() && value.type.dtype == ir::DType::kFloat32) return std::nullopt;
  }
  return "the model returns no float32 tensor";
}

Float64Model float64_model(const TorchPlugin::VerifyRequest& request) {
  Float64Model whole;
  if (request.reference) {
    whole.module = source_stage_module(*request.reference, "Float64Reference");
    whole.weight_names = request.reference_names;
  } else {
    auto layout = emit::whole_model_layout(request.model->graph);
    whole.module = torchscript_stage_module(*request.model, layout);
    for (const auto& weight : layout.params) whole.weight_names[weight.stage_name] = request.model->graph.value(weight.value).name;
  }
  // Fresh leaves (a stage module's parameters may be clones, which are not), so .grad fills.
  for (const auto& p : whole.module.named_parameters(/*recurse=*/false))
    whole.module.setattr(p.name, cast_tensor(p.value.detach(), at::kFloat, at::kDouble).clone().requires_grad_(p.value.requires_grad()));
  for (const auto& b : whole.module.named_buffers(/*recurse=*/false))
    whole.module.setattr(b.name, cast_tensor(b.value.detach(), at::kFloat, at::kDouble));
  compute_in_float64(whole.module.get_method("forward").graph()->block());
  return whole;
}

at::Tensor float32_as_float64(const at::Tensor& tensor) { return cast_tensor(tensor, at::kFloat, at::kDouble); }

void locate_departure(const TorchPlugin::VerifyRequest& request, const Tensors& inputs, const Tensors& seeds,
                      TorchPlugin::Float64Check& check) {
  double tolerance = request.float64_tolerance, gradient_floor = request.gradient_floor;
  NodeByNode nodes(whole_graph(request), inputs);
  Tensors seeds64;
  for (const auto& seed : seeds) seeds64.push_back(float32_as_float64(seed));
  auto baseline = nodes.run(-1);
  auto weight_grads = nodes.weight_gradients(baseline, seeds64);
  auto output_grads = output_gradients(nodes, baseline, seeds64);
  std::vector<Candidate> candidates;
  for (std::size_t i = 0; i < nodes.nodes().size() && candidates.size() < kMostCandidates; ++i)
    if (auto candidate = screen(nodes.nodes()[i], i, baseline, output_grads, tolerance, gradient_floor))
      candidates.push_back(*candidate);
  for (const auto& candidate : candidates) {
    auto run = nodes.run(static_cast<std::ptrdiff_t>(candidate.step));
    double rel = worst_difference(run.outputs, baseline.outputs, nodes.weight_gradients(run, seeds64), weight_grads,
                                  gradient_floor);
    if (rel <= tolerance) continue;
    const Node* node = nodes.nodes()[candidate.step].node;
    auto op = nodes.op_of(node);
    check.departure = TorchPlugin::Departure{op.id, node->kind().toQualString(), op.value, candidate.in_backward,
                                             candidate.max_rel, source_line(node)};
    return;
  }
  check.builds_up = candidates.size() < kMostCandidates;
  check.not_located = candidates.empty() ? "no op departs from float64 alone"
                                         : "of the " + std::to_string(candidates.size()) +
                                               " ops that depart from float64 alone, none moves the model beyond the "
                                               "tolerance by itself";
}

}  // namespace rannc
