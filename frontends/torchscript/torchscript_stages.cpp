// Stage files in TorchScript (part of the torch plugin). TOOLCHAIN.md §4 shows the calls; the
// points that matter: weights become module attributes (names cannot hold dots, hence p<i>
// and b<i>), constants are cloned where used, and every tensor type is made generic so the
// stage runs at any batch size, not just the one the model was evaluated at.
#include "frontends/torchscript/torchscript_stages.h"

#include <torch/csrc/jit/ir/ir.h>

#include <cctype>
#include <cstring>
#include <optional>
#include <set>
#include <unordered_map>

#include "frontends/torchscript/core_outlining.h"
#include "frontends/torchscript/in_place_writers.h"
#include "frontends/torchscript/tensor_rank_cut.h"
#include "frontends/torchscript/torchscript_source.h"
#include "support/error.h"
#include "torch_side/tensor_parallel_ops.h"

namespace rannc {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// jit values by IR value id: graph inputs come first (model inputs, then weights), then node
// outputs, as the frontend built the IR.
std::unordered_map<ir::ValueId, Value*> jit_values(const Model& model, const TorchScriptSource& source) {
  std::unordered_map<ir::ValueId, Value*> values;
  const auto& inputs = source.graph->inputs();
  for (std::size_t i = 0; i < inputs.size(); ++i) values[static_cast<ir::ValueId>(i)] = inputs[i];
  for (const auto& op : model.graph.ops()) {
    if (op.source_node < 0) continue;
    Node* node = source.nodes.at(static_cast<std::size_t>(op.source_node));
    for (std::size_t k = 0; k < op.outputs.size(); ++k) values[op.outputs[k]] = node->outputs().at(k);
  }
  return values;
}

// A valid, unique TorchScript identifier for a value name ("x.1" -> "x_1").
std::string identifier(const std::string& name, std::set<std::string>& taken) {
  std::string id;
  for (char c : name) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  if (id.empty() || std::isdigit(static_cast<unsigned char>(id.front()))) id = "v_" + id;
  std::string unique = id;
  for (int n = 1; !taken.insert(unique).second; ++n) unique = id + "_" + std::to_string(n);
  return unique;
}

at::Tensor weight_tensor(const TorchScriptSource& source, ir::ValueId id) {
  auto index = static_cast<std::size_t>(id) - source.specs.size();
  const auto& tensor = source.weights.at(index).tensor;
  return tensor.detach().requires_grad_(tensor.requires_grad());
}

class StageCloner {
 public:
  // `tensor_rank` >= 0: that rank's cut of a tensor-parallel stage (tensor_rank_cut.h).
  StageCloner(const Model& model, const emit::StageLayout& stage, int tensor_rank)
      : model_(model),
        source_(dynamic_cast<const TorchScriptSource&>(*model.source)),
        stage_(stage),
        module_(c10::QualifiedName("__torch__.rannc.Stage" + std::to_string(stage.id))),
        graph_(std::make_shared<Graph>()),
        jit_(jit_values(model, source_)) {
    if (tensor_rank >= 0 && stage.tensor_shard.degree > 1)
      cut_.emplace(model.graph, stage.tensor_shard, tensor_rank);
    for (std::size_t k = 0; k < stage.recomputed_cores.size(); ++k)
      for (auto op : stage.recomputed_cores[k]) core_of_op_[op] = static_cast<int>(k);
  }

  torch::jit::Module build() {
    self_ = graph_->addInput("self")->setType(module_.type());
    register_weights();
    std::set<std::string> names{"self"};
    for (const auto& input : stage_.inputs) {
      Value* original = jit_.at(input.value);
      map_[original] = graph_->addInput(identifier(model_.graph.value(input.value).name, names));
    }
    std::vector<std::vector<Node*>> cores(stage_.recomputed_cores.size());
    for (auto op : stage_.ops) {
      Node* last = graph_->return_node()->prev();
      clone(model_.graph.op(op));
      if (auto core = core_of_op_.find(op); core != core_of_op_.end())
        for (Node* node = last->next(); node != graph_->return_node(); node = node->next())
          cores[core->second].push_back(node);
    }
    std::vector<Value*> outputs;
    for (const auto& output : stage_.outputs) {
      Value* value = mapped(jit_.at(output.value));
      outputs.push_back(cut_ ? cut_->output(value, *graph_) : value);
    }
    graph_->registerOutput(graph_->insertNode(graph_->createTuple(outputs))->output());
    copy_mutated_inputs();
    make_types_generic();
    outline_cores(module_, *graph_, cores);
    graph_->lint();
    auto* forward = module_._ivalue()->compilation_unit()->create_function(
        c10::QualifiedName(*module_.type()->name(), "forward"), graph_);
    module_.type()->addMethod(forward);
    return module_;
  }

 private:
  void register_weights() {
    for (const auto& weight : stage_.params) {
      // A parameter the user froze stays frozen: only the model's trainable ones take gradients.
      auto tensor = weight_tensor(source_, weight.value);
      if (cut_) tensor = cut_->weight(weight.value, tensor);
      module_.register_parameter(weight.stage_name, tensor.clone().requires_grad_(tensor.requires_grad()), false);
      attribute_of_[jit_.at(weight.value)] = weight.stage_name;
    }
    for (const auto& weight : stage_.buffers) {
      auto tensor = weight_tensor(source_, weight.value);
      module_.register_buffer(weight.stage_name, (cut_ ? cut_->weight(weight.value, tensor) : tensor).clone());
      attribute_of_[jit_.at(weight.value)] = weight.stage_name;
    }
  }

  void clone(const ir::Op& op) {
    Node* node = source_.nodes.at(static_cast<std::size_t>(op.source_node));
    if (!node->outputs().empty() && map_.count(node->outputs()[0])) return;  // a constant cloned on first use
    if (cut_) {
      auto outputs = cut_->clone(op, node, *graph_, [this](Value* v) { return mapped(v); });
      for (std::size_t k = 0; k < node->outputs().size(); ++k) map_[node->outputs()[k]] = outputs.at(k);
      return;
    }
    Node* copy = graph_->insertNode(graph_->createClone(node, [this](Value* v) { return mapped(v); }));
    for (std::size_t k = 0; k < node->outputs().size(); ++k) map_[node->outputs()[k]] = copy->outputs()[k];
  }

  // The stage's value for a value of the model: an input, an earlier clone, a constant cloned
  // here, or a weight read from the module.
  Value* mapped(Value* original) {
    if (auto it = map_.find(original); it != map_.end()) return it->second;
    if (original->node()->kind() == c10::prim::Constant) {
      Node* copy = graph_->insertNode(graph_->createClone(original->node(), [](Value* v) { return v; }));
      return map_[original] = copy->output();
    }
    if (auto it = attribute_of_.find(original); it != attribute_of_.end()) {
      return map_[original] = graph_->insertGetAttr(self_, it->second);
    }
    throw Error(ExitStatus::kBadInput, "stage " + std::to_string(stage_.id) + " reads '" + original->debugName() +
                                           "', which is neither one of its inputs nor computed in it");
  }

  // In-place ops the frontend could not make functional (a residual `out += identity`) may
  // write to what is now a stage input, which autograd forbids for a leaf that requires grad:
  // such inputs are copied first.
  void copy_mutated_inputs() {
    std::vector<Value*> mutated;
    for (Value* input : graph_->inputs())
      if (input != self_ && !in_place_writers(input).empty()) mutated.push_back(input);
    for (Value* input : mutated) {
      torch::jit::WithInsertPoint insert_point(graph_->nodes().front());
      Value* copy = graph_->insert(c10::aten::clone, {input});
      input->replaceAllUsesWith(copy);
      copy->node()->replaceInput(0, input);
    }
  }

  void make_types_generic() {
    auto generic = [](Value* v) {
      if (v->type()->kind() == c10::TypeKind::TensorType) v->setType(c10::TensorType::get());
    };
    for (Value* input : graph_->inputs())
      if (input != self_) generic(input);
    for (Node* node : graph_->nodes())
      for (Value* output : node->outputs()) generic(output);
  }

  const Model& model_;
  const TorchScriptSource& source_;
  const emit::StageLayout& stage_;
  torch::jit::Module module_;
  std::shared_ptr<Graph> graph_;
  std::unordered_map<ir::ValueId, Value*> jit_;
  std::unordered_map<Value*, Value*> map_;
  std::unordered_map<Value*, std::string> attribute_of_;
  Value* self_ = nullptr;
  std::optional<TensorRankCut> cut_;
  std::unordered_map<ir::OpId, int> core_of_op_;  // the recomputed core each op of one belongs to
};

at::Tensor attribute_tensor(const StageAttribute& attribute) {
  auto type = ir::to_scalar_type(attribute.dtype);
  if (!type) {
    throw Error(ExitStatus::kBadInput, "stage attribute " + attribute.stage_name + " has dtype " +
                                           std::string(ir::dtype_name(attribute.dtype)) + ", which libtorch lacks");
  }
  auto options = at::TensorOptions().dtype(*type);
  auto tensor = at::empty(attribute.dims, options);
  if (static_cast<std::size_t>(tensor.nbytes()) != attribute.data.size()) {
    throw Error(ExitStatus::kBadInput, "stage attribute " + attribute.stage_name + " has " +
                                           std::to_string(attribute.data.size()) + " bytes of data for " +
                                           std::to_string(tensor.nbytes()));
  }
  std::memcpy(tensor.data_ptr(), attribute.data.data(), attribute.data.size());
  return tensor;
}

}  // namespace

torch::jit::Module torchscript_stage_module(const Model& model, const emit::StageLayout& stage, int tensor_rank) {
  return StageCloner(model, stage, tensor_rank).build();
}

torch::jit::Module source_stage_module(const StageSource& stage, const std::string& class_name) {
  torch::jit::Module module(c10::QualifiedName("__torch__.rannc." + class_name));
  for (const auto& attribute : stage.attributes) {
    auto tensor = attribute_tensor(attribute);
    if (attribute.trainable) {
      module.register_parameter(attribute.stage_name, tensor.requires_grad_(true), false);
    } else {
      module.register_buffer(attribute.stage_name, tensor);
    }
  }
  // The resolver knows torch.ops.rannc.*, which a tensor rank's stage calls.
  module.define(stage.forward, tp::script_resolver());
  if (!stage.core_lines.empty()) {
    auto forward = module.get_method("forward").graph();
    outline_cores(module, *forward, nodes_on_lines(*forward, stage.core_lines));
  }
  return module;
}

}  // namespace rannc
