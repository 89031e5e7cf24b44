// The TorchScript frontend (part of the torch plugin).
//
// Steps: load; inline forward (scripted functions with control flow stay calls: one opaque op
// each); turn module attribute reads into graph inputs (one per distinct weight tensor, named
// as in named_parameters()) and constants; fold constants and remove mutation; then run the
// graph once on example inputs of a couple of samples with every intermediate registered as an
// output, which records the shape and dtype of every value (torch 1.13's static shape passes
// type only a few percent of real graphs, see TOOLCHAIN.md). A second run at twice the batch
// shows which dim of each tensor is the batch dim, and the shapes are scaled along it to the
// requested batch.
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/constant_propagation.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/passes/loop_unrolling.h>
#include <torch/csrc/jit/passes/remove_mutation.h>
#include <torch/csrc/jit/runtime/graph_iterator.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/csrc/jit/runtime/operator.h>
#include <torch/version.h>

#include <algorithm>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <variant>

#include "frontends/torchscript/in_place_writers.h"
#include "frontends/torchscript/torchscript_source.h"
#include "emit/index_bound.h"
#include "ir/batch_dims.h"
#include "ir/op_kinds.h"
#include "torch_side/torch_dtype.h"
#include "support/error.h"
#include "support/zip_archive.h"

namespace rannc {

namespace {

using torch::jit::Node;
using torch::jit::Value;
using ir::to_dtype;

// A tensor's memory: tied weights are two module attributes holding one tensor (or, after a
// save and load, two tensors viewing one storage the same way).
using TensorKey = std::tuple<const void*, std::int64_t, std::vector<std::int64_t>, std::vector<std::int64_t>, int>;

TensorKey key_of(const at::Tensor& t) {
  // Empty tensors have no memory to compare: each is its own weight.
  const void* where = t.numel() == 0 ? static_cast<const void*>(t.unsafeGetTensorImpl()) : t.data_ptr();
  return {where, t.storage_offset(), t.sizes().vec(), t.strides().vec(), static_cast<int>(t.scalar_type())};
}

// The bytes a tensor's view reaches into its storage.
std::int64_t reached_bytes(const at::Tensor& t) {
  if (t.numel() == 0) return 0;
  std::int64_t last = t.storage_offset();
  for (std::int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return (last + 1) * static_cast<std::int64_t>(t.element_size());
}

// A weight whose storage in the archive is shorter than its shape (an empty or truncated
// record) would be read past its end: refused, naming it.
void check_storage(const std::string& path, const std::string& name, const at::Tensor& t) {
  if (!t.has_storage()) return;
  auto held = static_cast<std::int64_t>(t.storage().nbytes());
  if (reached_bytes(t) > held) {
    throw InputError(path + ": weight '" + name + "' needs " + std::to_string(reached_bytes(t)) +
                     " bytes but the file holds " + std::to_string(held) + " for it (a truncated or corrupt file)");
  }
}

// Tensor data of a TorchScript archive lives in records data/<n>, one per storage,
// read into storages whose size comes from the pickled metadata: a record cut short (a truncated
// copy, an emptied entry) is read past its end, silently. The records must hold at least the
// bytes of the module's storages.
void check_weight_records(const std::string& path, const torch::jit::Module& module) {
  std::set<const void*> seen;
  std::int64_t needed = 0;
  for (const auto& attribute : module.named_attributes(/*recurse=*/true)) {
    if (!attribute.value.isTensor()) continue;
    const auto& t = attribute.value.toTensor();
    if (!t.defined() || !t.has_storage()) continue;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) needed += static_cast<std::int64_t>(t.storage().nbytes());
  }
  caffe2::serialize::PyTorchStreamReader reader(path);
  std::int64_t held = 0;
  for (const auto& name : reader.getAllRecords()) {  // named without the archive's folder
    if (name.rfind("data/", 0) != 0) continue;
    held += static_cast<std::int64_t>(std::get<1>(reader.getRecord(name)));  // one record in memory at a time
  }
  if (held < needed) {
    throw InputError(path + ": the weights need " + std::to_string(needed) + " bytes but the file holds " +
                     std::to_string(held) + " for them (a truncated or corrupt file)");
  }
}

struct NamedWeight {
  std::string name;
  at::Tensor tensor;
  bool trainable;
};

// Every distinct weight of the module in named_parameters() then named_buffers() order; a tied
// weight keeps its first name, as Python's parameters() does.
std::map<TensorKey, NamedWeight> distinct_weights(const torch::jit::Module& module, std::vector<TensorKey>& order) {
  std::map<TensorKey, NamedWeight> weights;
  auto add = [&](const std::string& name, const at::Tensor& tensor, bool trainable) {
    if (!tensor.defined()) return;
    auto key = key_of(tensor);
    if (weights.emplace(key, NamedWeight{name, tensor, trainable}).second) order.push_back(key);
  };
  for (const auto& p : module.named_parameters(/*recurse=*/true)) add(p.name, p.value, true);
  for (const auto& b : module.named_buffers(/*recurse=*/true)) add(b.name, b.value, false);
  return weights;
}

bool depends_only_on_shapes(const Value* value, std::unordered_map<const Value*, bool>& memo);

// Whether a scripted function branches or loops on tensor contents once its own calls are
// inlined (a while loop until a value converges): one traced graph cannot express that. Branches
// on shapes and flags (batch_norm's `if training:` and its size check) are inlined and folded.
bool has_data_dependent_control_flow(torch::jit::GraphFunction& function) {
  auto graph = function.graph()->copy();
  torch::jit::Inline(*graph);
  std::unordered_map<const Value*, bool> memo;
  for (torch::jit::DepthFirstGraphNodeIterator it(graph); Node* node = it.next();) {
    std::vector<const Value*> conditions;
    if (node->kind() == c10::prim::If) conditions = {node->input(0)};
    if (node->kind() == c10::prim::Loop) conditions = {node->input(0), node->input(1), node->blocks()[0]->outputs()[0]};
    for (const Value* condition : conditions)
      if (!depends_only_on_shapes(condition, memo)) return true;
  }
  return false;
}

// The function a prim::CallFunction node calls.
torch::jit::GraphFunction* called_function(const Node* call) {
  auto type = call->input(0)->type()->cast<c10::FunctionType>();
  return type ? torch::jit::tryToGraphFunction(*type->function()) : nullptr;
}

// The module path of each inlined node ("encoder.layers.0.self_attn") rides on its scope: one
// scope per path, named "rannc_module::PATH", which the passes after inlining keep (clones and
// the nodes that replace others copy their scope). torch's own InlinedCallStack names only the
// last attribute of a module ("0", not "layers.0"), so the paths are taken from the GetAttr
// chains that reach the modules called, while inlining.
constexpr std::string_view kModuleScope = "rannc_module::";

class ModuleScopes {
 public:
  torch::jit::ScopePtr scope(const std::string& path) {
    auto& scope = scopes_[path];
    if (!scope) scope = c10::make_intrusive<torch::jit::Scope>()->push(c10::Symbol::fromQualString(std::string(kModuleScope) + path));
    return scope;
  }

  // Sets the scope of `node` and of the nodes of its blocks.
  void set(Node* node, const std::string& path) {
    auto module = scope(path);
    std::vector<Node*> todo{node};
    while (!todo.empty()) {
      Node* next = todo.back();
      todo.pop_back();
      next->setScope(module);
      for (auto* block : next->blocks())
        for (Node* inner : block->nodes()) todo.push_back(inner);
    }
  }

 private:
  std::unordered_map<std::string, torch::jit::ScopePtr> scopes_;
};

// The module path ModuleScopes gave `node`; "" for the model's own nodes and those made since.
std::string module_path_of(Node* node) {
  auto scope = node->scope();
  if (!scope || scope->isBlank() || !scope->parent() || !scope->parent()->isRoot()) return "";
  std::string_view name = scope->name().toQualString();
  return name.substr(0, kModuleScope.size()) == kModuleScope ? std::string(name.substr(kModuleScope.size())) : "";
}

// The qualified name of a module object in forward's graph: the names of the GetAttr chain from
// `self` ("encoder.layers.0"); nullopt when it does not come from self that way.
std::optional<std::string> module_object_path(Value* object, const Value* self) {
  std::vector<std::string> names;
  for (; object != self; object = object->node()->input()) {
    if (object->node()->kind() != c10::prim::GetAttr || object->node()->inputs().size() != 1) return std::nullopt;
    names.push_back(object->node()->s(c10::attr::name));
  }
  std::string path;
  for (auto it = names.rbegin(); it != names.rend(); ++it) path += (path.empty() ? "" : ".") + *it;
  return path;
}

// torch::jit::Inline, except that a call of a scripted function with control flow (a
// data-dependent loop in a traced model) stays one opaque op, as RaNNC keeps it: it is costed
// and placed in a stage like any op, and its stage file calls the function. Inlines from the
// callees' own graphs (their optimized graphs already inline every call), one level per round.
// The inlined nodes get the module path of the object a method is called on, or for a function
// that of the node calling it (ModuleScopes).
void inline_calls(std::shared_ptr<torch::jit::Graph>& graph) {
  ModuleScopes scopes;
  const Value* self = graph->inputs().at(0);
  for (bool inlined = true; inlined;) {
    inlined = false;
    std::vector<Node*> calls;
    for (torch::jit::DepthFirstGraphNodeIterator it(graph); Node* node = it.next();)
      if (node->kind() == c10::prim::CallMethod || node->kind() == c10::prim::CallFunction) calls.push_back(node);
    for (Node* call : calls) {
      torch::jit::GraphFunction* callee = nullptr;
      if (call->kind() == c10::prim::CallMethod) {
        if (auto type = call->input(0)->type()->cast<c10::ClassType>())
          callee = torch::jit::tryToGraphFunction(type->getMethod(call->s(c10::attr::name)));
      } else if ((callee = called_function(call)) && !has_data_dependent_control_flow(*callee)) {
        call->removeInput(0);
      } else {
        continue;
      }
      if (!callee) continue;
      std::string module = module_path_of(call);
      if (call->kind() == c10::prim::CallMethod) module = module_object_path(call->input(0), self).value_or(module);
      Node* before = call->prev();
      Node* after = call->next();
      torch::jit::inlineCallTo(call, callee, callee->graph().get());
      if (!module.empty())
        for (Node* node = before->next(); node != after; node = node->next()) scopes.set(node, module);
      inlined = true;
    }
  }
}

class TorchScriptLowering {
 public:
  TorchScriptLowering(const std::string& path, torch::jit::Module module) : path_(path), module_(std::move(module)) {}

  // Returns the lowered forward graph; fills source.weights.
  std::shared_ptr<torch::jit::Graph> lower(TorchScriptSource& source) {
    auto graph = module_.get_method("forward").graph()->copy();
    inline_calls(graph);
    weights_ = distinct_weights(module_, weight_order_);
    for (const auto& [key, weight] : weights_) check_storage(path_, weight.name, weight.tensor);
    resolve_attributes(graph);
    graph->eraseInput(0);  // self: nothing reads it any more
    torch::jit::ConstantPropagation(graph);
    torch::jit::EliminateDeadCode(graph);
    torch::jit::RemoveListMutation(graph);
    torch::jit::RemoveTensorMutation(graph);
    torch::jit::EliminateDeadCode(graph);
    source.weights = std::move(used_weights_);
    return graph;
  }

  // Weights of the module that forward never reads: still parameters of the model.
  std::vector<TorchScriptSource::Weight> unused_weights() const {
    std::vector<TorchScriptSource::Weight> unused;
    for (const auto& key : weight_order_) {
      if (weight_inputs_.count(key)) continue;
      const auto& w = weights_.at(key);
      unused.push_back({w.name, w.tensor, w.trainable});
    }
    return unused;
  }

 private:
  void resolve_attributes(std::shared_ptr<torch::jit::Graph>& graph) {
    // Each module object reached so far, with its qualified name prefix ("blocks.0.").
    std::unordered_map<Value*, std::pair<c10::IValue, std::string>> objects{
        {graph->inputs().at(0), {module_._ivalue(), ""}}};
    std::vector<Node*> resolved;
    for (torch::jit::DepthFirstGraphNodeIterator it(graph); Node* node = it.next();) {
      if (node->kind() == c10::prim::SetAttr) {
        throw InputError(path_ + ": forward assigns module attribute '" + node->s(c10::attr::name) +
                         "'; models that change their own attributes are not supported");
      }
      if (node->kind() != c10::prim::GetAttr) continue;
      auto owner = objects.find(node->input());
      if (owner == objects.end()) continue;  // an attribute of something other than a module
      const auto& [object, prefix] = owner->second;
      std::string name = prefix + node->s(c10::attr::name);
      c10::IValue value = object.toObject()->getAttr(node->s(c10::attr::name));
      if (value.isObject()) {
        objects[node->output()] = {value, name + "."};
      } else {
        node->output()->replaceAllUsesWith(lowered_attribute(*graph, node, name, value));
      }
      resolved.push_back(node);
    }
    for (auto it = resolved.rbegin(); it != resolved.rend(); ++it) (*it)->destroy();
  }

  Value* lowered_attribute(torch::jit::Graph& graph, Node* node, const std::string& name, const c10::IValue& value) {
    if (value.isTensor() && value.toTensor().defined()) return weight_input(graph, value.toTensor(), name);
    torch::jit::WithInsertPoint insert_point(node);
    if (auto constant = graph.insertConstant(value, c10::nullopt, node->scope()); constant) return constant;
    throw InputError(path_ + ": cannot lower module attribute '" + name + "' of type " + value.tagKind());
  }

  Value* weight_input(torch::jit::Graph& graph, const at::Tensor& tensor, const std::string& attribute) {
    auto key = key_of(tensor);
    if (auto it = weight_inputs_.find(key); it != weight_inputs_.end()) return it->second;
    auto known = weights_.find(key);
    // A tensor attribute that is neither parameter nor buffer (a plain attribute) is a constant
    // of the model: it travels as a buffer.
    NamedWeight weight = known != weights_.end() ? known->second : NamedWeight{attribute, tensor, false};
    check_storage(path_, weight.name, tensor);
    Value* input = graph.addInput();
    input->setType(c10::TensorType::create(tensor));
    used_weights_.push_back({weight.name, weight.tensor, weight.trainable});
    return weight_inputs_[key] = input;
  }

  const std::string& path_;
  torch::jit::Module module_;
  std::map<TensorKey, NamedWeight> weights_;
  std::vector<TensorKey> weight_order_;
  std::map<TensorKey, Value*> weight_inputs_;
  std::vector<TorchScriptSource::Weight> used_weights_;
};

void reject_unsupported(const std::string& path, torch::jit::Graph& graph) {
  for (Node* node : graph.nodes()) {
    if (!node->blocks().empty()) {
      throw InputError(path + ": forward has data-dependent control flow (" + std::string(node->kind().toQualString()) +
                       "); trace the model, make the condition constant, or move it into a @torch.jit.script "
                       "function (kept as one op)");
    }
    if (node->kind() == c10::prim::GetAttr || node->kind() == c10::prim::CallMethod) {
      throw InputError(path + ": unsupported op '" + std::string(node->kind().toQualString()) + "' in forward");
    }
  }
}


// A tensor, or a list, tuple or optional of them.
bool holds_tensors(const c10::Type& type) {
  if (type.kind() == c10::TypeKind::TensorType) return true;
  for (const auto& contained : type.containedTypes())
    if (holds_tensors(*contained)) return true;
  return false;
}

// Whether a value is computed from tensor metadata (ranks, sizes, dtypes, None checks) and
// constants only, never from tensor contents.
bool depends_only_on_shapes(const Value* value, std::unordered_map<const Value*, bool>& memo) {
  if (auto it = memo.find(value); it != memo.end()) return it->second;
  static const std::set<c10::Symbol> kMetadataQueries = {
      c10::aten::dim, c10::aten::size, c10::aten::len, c10::Symbol::aten("numel"), c10::prim::dtype, c10::prim::device,
      c10::aten::__is__, c10::aten::__isnot__, c10::aten::is_floating_point};
  const Node* node = value->node();
  // A parameter of the graph or of a block (a function's flag, a loop's counter) is a shape-free
  // value unless it holds tensors.
  if (node->kind() == c10::prim::Param) return memo[value] = !holds_tensors(*value->type());
  bool result = node->kind() == c10::prim::Constant;
  if (!result) {
    bool metadata = kMetadataQueries.count(node->kind()) > 0;
    result = true;
    for (const Value* input : node->inputs()) {
      bool tensor = input->type()->isSubtypeOf(*c10::TensorType::get());
      result = result && (tensor ? metadata : depends_only_on_shapes(input, memo));
    }
    // An if or a loop computes from shapes when its branches and body do (a loop over dims).
    for (const auto* block : node->blocks())
      for (const Value* output : block->outputs()) result = result && depends_only_on_shapes(output, memo);
  }
  return memo[value] = result;
}

// Replaces the condition of each prim::If and the trip count of each prim::Loop that depend
// only on shapes (scripted input checks such as batch_norm's size loop) with their recorded
// values; constant propagation and loop unrolling then keep just the code that ran.
bool fold_shape_control_flow(torch::jit::Graph& graph, const std::vector<c10::IValue>& recorded) {
  std::unordered_map<const Value*, c10::IValue> values;
  std::size_t next = 0;
  for (Node* node : graph.nodes()) {
    for (const Value* output : node->outputs()) values[output] = recorded.at(next++);
  }
  std::unordered_map<const Value*, bool> memo;
  bool folded = false;
  for (Node* node : graph.nodes()) {
    bool is_if = node->kind() == c10::prim::If, is_loop = node->kind() == c10::prim::Loop;
    if (!is_if && !is_loop) continue;
    if (!depends_only_on_shapes(node->input(0), memo)) continue;
    if (is_loop && !depends_only_on_shapes(node->input(1), memo)) continue;
    auto known = values.find(node->input(0));
    if (known == values.end() || node->input(0)->node()->kind() == c10::prim::Constant) continue;
    torch::jit::WithInsertPoint insert_point(node);
    node->replaceInput(0, graph.insertConstant(known->second));
    folded = true;
  }
  return folded;
}

// The aten ops the archive's code calls (torch.<op>(...), ops.aten.<op>(...)) that this libtorch
// does not register: a model saved by a newer PyTorch (scaled_dot_product_attention, which
// nn.MultiheadAttention calls since 2.0, is not in 1.13).
std::set<std::string> ops_this_libtorch_lacks(const std::string& path) {
  std::set<std::string> missing;
  auto zip = ZipArchive::open(path);
  if (!zip) return missing;
  static const std::regex kCall(R"((?:\btorch|\bops\.aten)\.([A-Za-z_][A-Za-z0-9_]*)\()");
  for (const auto& entry : zip->entries()) {
    if (entry.find("/code/") == std::string::npos || entry.size() < 3 || entry.compare(entry.size() - 3, 3, ".py") != 0) continue;
    auto code = zip->read(entry, std::uint64_t{64} << 20, "the model's code");
    for (std::sregex_iterator it(code.begin(), code.end(), kCall), end; it != end; ++it) {
      auto name = (*it)[1].str();
      bool known = !torch::jit::getAllOperatorsFor(c10::Symbol::aten(name)).empty() ||
                   !torch::jit::getAllOperatorsFor(c10::Symbol::prim(name)).empty();
      if (!known) missing.insert("aten::" + name);
    }
  }
  return missing;
}

torch::jit::Module load_module(const std::string& path) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const std::exception& e) {
    auto message = torch_message(e);
    if (message.find("Unknown builtin op") != std::string::npos) {
      std::string names;
      for (const auto& name : ops_this_libtorch_lacks(path)) names += (names.empty() ? "" : ", ") + name;
      if (!names.empty()) {
        throw InputError(path + ": TorchScript saved by a newer PyTorch calls op(s) libtorch " TORCH_VERSION " lacks: " +
                         names + "; build against libtorch 2.x, or export the model with torch.export.save (.pt2), "
                         "which this build reads");
      }
    }
    throw InputError(path + ": cannot load TorchScript: " + message);
  }
  check_weight_records(path, module);
  return module;
}

// The names of forward's arguments as written in Python (the graph's own input names may be
// renamed by inlining, e.g. to a called function's parameter name).
std::vector<std::string> forward_argument_names(const torch::jit::Module& module) {
  std::vector<std::string> names;
  const auto& arguments = module.get_method("forward").function().getSchema().arguments();
  for (std::size_t i = 1; i < arguments.size(); ++i) names.push_back(arguments[i].name());  // 0 is self
  return names;
}

void set_value_from_ivalue(ir::Value& value, const c10::IValue& recorded) {
  if (recorded.isTensor()) {
    const auto& t = recorded.toTensor();
    value.kind = ir::ValueKind::kTensor;
    value.type.shape = t.sizes().vec();
    value.type.dtype = to_dtype(t.scalar_type());
  } else if (recorded.isInt()) {
    value.kind = ir::ValueKind::kInt;
    value.literal = recorded.toInt();
  } else if (recorded.isDouble()) {
    value.kind = ir::ValueKind::kFloat;
    value.literal = recorded.toDouble();
  } else if (recorded.isBool()) {
    value.kind = ir::ValueKind::kBool;
    value.literal = recorded.toBool();
  } else if (recorded.isIntList()) {
    value.kind = ir::ValueKind::kIntList;
    value.literal = recorded.toIntVector();
  } else if (recorded.isDoubleList()) {
    value.kind = ir::ValueKind::kFloatList;
    value.literal = recorded.toDoubleVector();
  } else if (recorded.isString()) {
    value.kind = ir::ValueKind::kString;
    value.literal = recorded.toStringRef();
  } else if (recorded.isNone()) {
    value.kind = ir::ValueKind::kNone;
  } else {
    value.kind = ir::ValueKind::kOther;
  }
}

ir::Value weight_value(const TorchScriptSource::Weight& weight) {
  ir::Value value;
  value.name = weight.name;
  value.role = weight.trainable ? ir::ValueRole::kParam : ir::ValueRole::kBuffer;
  value.type.shape = weight.tensor.sizes().vec();
  value.type.dtype = to_dtype(weight.tensor.scalar_type());
  return value;
}

// Builds the IR from the lowered graph and the values recorded for its node outputs.
ir::Graph build_graph(TorchScriptSource& source, const std::vector<InputSpec>& specs,
                      const std::vector<c10::IValue>& recorded, std::unordered_map<const Value*, ir::ValueId>& ids) {
  ir::Graph graph;
  const auto& inputs = source.graph->inputs();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    ir::Value value;
    if (i < specs.size()) {
      value.name = specs[i].name;
      value.role = ir::ValueRole::kModelInput;
      value.type.shape = specs[i].dims;
      value.type.dtype = specs[i].dtype;
    } else {
      value = weight_value(source.weights[i - specs.size()]);
    }
    ids[inputs[i]] = graph.add_value(std::move(value));
  }
  std::size_t next_recorded = 0;
  for (Node* node : source.graph->nodes()) {
    std::vector<ir::ValueId> op_inputs, op_outputs;
    for (const Value* input : node->inputs()) op_inputs.push_back(ids.at(input));
    for (const Value* output : node->outputs()) {
      ir::Value value;
      value.name = output->debugName();
      set_value_from_ivalue(value, recorded.at(next_recorded++));
      op_outputs.push_back(ids[output] = graph.add_value(std::move(value)));
    }
    auto op = graph.add_op(node->kind().toQualString(), std::move(op_inputs), std::move(op_outputs),
                           static_cast<std::int64_t>(source.nodes.size()));
    graph.set_module_path(op, module_path_of(node));
    source.nodes.push_back(node);
  }
  return graph;
}

// Records which ops change each node output in place (through a view of it too), so that what
// computes the value also runs its writes: a shifted-window mask is new_zeros, then fill_ on its
// slices. A write inside a block (a loop's body) belongs to the op holding the block.
void record_in_place_writes(ir::Graph& graph, const TorchScriptSource& source,
                            const std::unordered_map<const Value*, ir::ValueId>& ids) {
  std::unordered_map<const Node*, ir::OpId> op_of;
  for (const auto& op : graph.ops()) op_of[source.nodes.at(static_cast<std::size_t>(op.source_node))] = op.id;
  auto top_level = [&](const Node* node) {
    while (node->owningBlock() != source.graph->block()) node = node->owningBlock()->owningNode();
    return node;
  };
  for (const Node* node : source.graph->nodes()) {
    for (const Value* output : node->outputs()) {
      std::set<ir::OpId> writers;  // in op order, each once
      for (const Node* writer : in_place_writers(output)) writers.insert(op_of.at(top_level(writer)));
      for (auto writer : writers) graph.add_write(writer, ids.at(output));
    }
  }
}

// A forward that returns a tuple has the tuple's elements as model outputs. Outputs whose jit
// names are bare numbers (traced graphs) are named output, or output_0, output_1, ...
// What forward returns: a tuple's elements, else the value itself.
std::vector<const Value*> returned_values(const torch::jit::Graph& lowered) {
  std::vector<const Value*> outputs;
  for (const Value* output : lowered.outputs()) {
    if (output->node()->kind() == c10::prim::TupleConstruct) {
      outputs.insert(outputs.end(), output->node()->inputs().begin(), output->node()->inputs().end());
    } else {
      outputs.push_back(output);
    }
  }
  return outputs;
}

void mark_outputs(ir::Graph& graph, const torch::jit::Graph& lowered,
                  const std::unordered_map<const Value*, ir::ValueId>& ids) {
  auto outputs = returned_values(lowered);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    ir::Value& value = graph.value(ids.at(outputs[i]));
    if (!outputs[i]->hasDebugName()) value.name = outputs.size() == 1 ? "output" : "output_" + std::to_string(i);
    graph.add_model_output(value.id);
  }
}

// Ops whose result changes from run to run or mixes the samples of a batch on purpose.
bool random_or_batch_statistics(const ir::Graph& graph) {
  for (const auto& op : graph.ops()) {
    const auto& kind = op.kind;
    if (ir::has_op_trait(kind, ir::op_trait::kRandom | ir::op_trait::kBatchStatistics)) return true;
    if (ir::has_op_trait(kind, ir::op_trait::kDropout) && op.inputs.size() >= 3) {
      const auto& p = graph.value(op.inputs[1]).literal;
      const auto& train = graph.value(op.inputs[2]).literal;
      bool off = (std::holds_alternative<double>(p) && std::get<double>(p) == 0) ||
                 (std::holds_alternative<bool>(train) && !std::get<bool>(train));
      if (!off) return true;
    }
  }
  return false;
}

// Whether `got` (a sample run alone) equals its slice `expected` of the batch's output, to float32's
// rounding. NaN from made-up inputs (a length of 0 masks a whole row) tells nothing either way.
bool same_sample_output(const at::Tensor& expected, const at::Tensor& got) {
  if (!expected.isfinite().all().item<bool>() || !got.isfinite().all().item<bool>()) return true;
  double scale = expected.abs().max().item<double>();
  return got.sizes() == expected.sizes() && at::allclose(got, expected, 1e-4, 1e-5 * scale + 1e-6);
}

// The same run in float64 (float32 inputs and weights widened): matmul kernels block a batch of 1
// and of B differently, and a model that cancels large values (x + 1e7, centred) turns that
// float32 rounding into differences no tolerance allows; samples that truly interact differ in
// float64 too. nullopt when the graph does not run in float64 (a dtype fixed inside it).
std::optional<std::pair<std::vector<c10::IValue>, std::vector<c10::IValue>>> float64_runs(
    torch::jit::Graph& graph, const std::vector<at::Tensor>& whole, const std::vector<at::Tensor>& alone,
    const std::vector<TorchScriptSource::Weight>& weights) {
  auto widen = [](const at::Tensor& t) { return t.scalar_type() == at::kFloat ? t.to(at::kDouble) : t; };
  auto widened = [&](const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> result;
    for (const auto& t : tensors) result.push_back(widen(t));
    return result;
  };
  std::vector<TorchScriptSource::Weight> weights64 = weights;
  for (auto& weight : weights64) weight.tensor = widen(weight.tensor);
  try {
    return std::make_pair(record_values(graph, widened(whole), weights64), record_values(graph, widened(alone), weights64));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The planner cuts a batch into microbatches and replica slices along dim 0 of the inputs,
// which is right only when samples do not interact. A model that is not batch-first (an
// nn.Transformer without batch_first attends across dim 0) would be trained as another model,
// with nothing to notice it: each sample's outputs alone must equal its outputs in the batch.
void check_samples_independent(const std::string& path, const ir::Graph& graph, const TorchScriptSource& source,
                               const std::vector<InputSpec>& specs,
                               const std::unordered_map<const Value*, ir::ValueId>& ids) {
  std::int64_t batch = specs.empty() ? 0 : specs.front().dims.front();
  if (batch < 2 || random_or_batch_statistics(graph)) return;
  std::unordered_map<const Value*, std::size_t> index;
  for (const Node* node : source.graph->nodes())
    for (const Value* output : node->outputs()) index.emplace(output, index.size());
  // Integer inputs differ between samples too (indices, lengths), or their mixing could not show.
  auto inputs = example_inputs(path, specs, 1);
  auto generator = at::detail::createCPUGenerator(/*seed=*/0);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_floating_point()) continue;
    auto bound = emit::index_bound(graph, specs[i].name);
    inputs[i] = ir::random_tensor(inputs[i].scalar_type(), inputs[i].sizes(), generator, bound);
  }
  auto whole = record_values(*source.graph, inputs, source.weights);
  for (std::int64_t sample = 0; sample < batch; ++sample) {
    std::vector<at::Tensor> alone;
    for (std::size_t i = 0; i < inputs.size(); ++i)
      alone.push_back(specs[i].dims.front() == batch ? inputs[i].narrow(0, sample, 1) : inputs[i]);
    std::vector<c10::IValue> single;
    try {
      single = record_values(*source.graph, alone, source.weights);
    } catch (const std::exception&) {
      return;  // runs only at its traced batch: nothing to compare
    }
    for (const Value* output : returned_values(*source.graph)) {
      const auto& value = graph.value(ids.at(output));
      auto at = index.find(output);
      if (at == index.end() || value.type.batch_dim < 0 || !whole[at->second].isTensor()) continue;
      auto in_batch = whole[at->second].toTensor();
      if (!in_batch.is_floating_point() || in_batch.size(value.type.batch_dim) != batch) continue;
      auto expected = in_batch.narrow(value.type.batch_dim, sample, 1);
      if (same_sample_output(expected, single[at->second].toTensor())) continue;
      auto runs = float64_runs(*source.graph, inputs, alone, source.weights);
      if (runs && same_sample_output(runs->first[at->second].toTensor().narrow(value.type.batch_dim, sample, 1),
                                     runs->second[at->second].toTensor()))
        continue;
      throw InputError(path + ": samples interact along dim 0 of the inputs (output '" + value.name + "' of sample " +
                       std::to_string(sample) + " changes when other samples are in the batch), so microbatches and "
                       "replicas would change what it computes; the batch must be dim 0 of every input and its samples "
                       "independent (e.g. nn.Transformer(batch_first=True))");
    }
  }
}

// Orders the specs as forward's inputs; an input without a spec takes its declared default
// (baked in as a constant) or is an error that names it.
std::vector<InputSpec> bind_inputs(const std::string& path, torch::jit::Graph& graph, const torch::jit::Module& module,
                                   const LoadOptions& options, std::size_t weight_count) {
  std::size_t model_inputs = graph.inputs().size() - weight_count;
  std::vector<std::string> names = forward_argument_names(module);
  names.resize(model_inputs);  // a traced forward's schema may list no more than its inputs
  for (std::size_t i = 0; i < model_inputs; ++i)
    if (names[i].empty()) names[i] = graph.inputs()[i]->debugNameBase();
  check_input_names(path, options, names);
  const auto& schema = module.get_method("forward").function().getSchema();
  std::vector<InputSpec> bound;
  std::string missing;
  for (std::size_t i = 0, arg = 1, name = 0; i < model_inputs; ++arg, ++name) {  // schema arg 0 is self
    Value* input = graph.inputs()[i];
    auto spec = std::find_if(options.inputs.begin(), options.inputs.end(),
                             [&](const InputSpec& s) { return s.name == names[name]; });
    if (spec != options.inputs.end()) {
      bound.push_back(*spec);
      ++i;
      continue;
    }
    const auto& default_value = arg < schema.arguments().size() ? schema.arguments()[arg].default_value() : c10::nullopt;
    if (default_value) {
      torch::jit::WithInsertPoint insert_point(graph.block()->nodes().front());
      input->replaceAllUsesWith(graph.insertConstant(*default_value));
      graph.eraseInput(i);
      --model_inputs;
      continue;
    }
    missing += (missing.empty() ? "" : " ") + std::string("--input ") + names[name] + ":DIMS[:DTYPE]";
    ++i;
  }
  if (!missing.empty()) throw InputError(path + ": TorchScript needs example inputs; give " + missing);
  return bound;
}

// Shapes at twice the batch, by value id, for ir::assign_batch_dims.
ir::ShapesAtDoubleBatch shapes_at_double_batch(const ir::Graph& graph, const TorchScriptSource& source,
                                               const std::vector<InputSpec>& specs,
                                               const std::unordered_map<const Value*, ir::ValueId>& ids,
                                               const std::string& path) {
  ir::ShapesAtDoubleBatch shapes(graph.values().size());
  try {
    auto recorded = record_values(*source.graph, example_inputs(path, specs, 2), source.weights);
    std::size_t next = 0;
    for (const Node* node : source.graph->nodes()) {
      for (const Value* output : node->outputs()) {
        const auto& value = recorded.at(next++);
        if (value.isTensor()) shapes[static_cast<std::size_t>(ids.at(output))] = value.toTensor().sizes().vec();
      }
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
      auto& shape = shapes[static_cast<std::size_t>(ids.at(source.graph->inputs()[i]))] = specs[i].dims;
      shape->front() *= 2;
    }
  } catch (const std::exception&) {
    return {};  // a model traced with a hard-coded batch runs only at that batch
  }
  return shapes;
}

// Planning needs shapes, not a big forward: the model runs at a couple of samples (and at twice
// that, for the batch dims) and its shapes are scaled to the requested batch. A forward at the
// batch of --input keeps every intermediate alive: 24 GB for 64 ResNet-50 images.
constexpr std::int64_t kEvaluationBatch = 2;

std::vector<InputSpec> at_batch(std::vector<InputSpec> specs, std::int64_t from, std::int64_t to) {
  for (auto& spec : specs)
    if (spec.dims.front() == from) spec.dims.front() = to;
  return specs;
}

// Records every value at the specs' batch, folding control flow that depends only on shapes
// (each round exposes the ifs nested one level deeper). Throws what the forward throws.
std::vector<c10::IValue> record_folding_shapes(TorchScriptSource& source, const std::vector<InputSpec>& specs,
                                               const std::string& path) {
  constexpr int kMaxFoldRounds = 8;
  std::vector<c10::IValue> recorded;
  for (int round = 0; round < kMaxFoldRounds; ++round) {
    recorded = record_values(*source.graph, example_inputs(path, specs, 1), source.weights);
    if (round + 1 == kMaxFoldRounds || !fold_shape_control_flow(*source.graph, recorded)) break;
    torch::jit::UnrollConstantLoops(source.graph);
    torch::jit::ConstantPropagation(source.graph);
    torch::jit::EliminateDeadCode(source.graph);
  }
  return recorded;
}

// A float example input that an op reads as indices (directly or through views), which torch reports only as
// "Expected tensor for argument #1 'indices' to have one of the following scalar types": the
// input named with the --input that gives it as int64. nullopt when no input is such.
std::optional<std::string> float_index_input(const std::string& path, const torch::jit::Graph& graph,
                                             const std::vector<InputSpec>& specs) {
  struct IndexArg {
    const char* kind;
    std::size_t offset;
    const char* as;
  };
  static const IndexArg kIndexArgs[] = {{"aten::embedding", 1, "indices"},     {"aten::embedding_bag", 1, "indices"},
                                        {"aten::embedding_bag", 2, "offsets"},  {"aten::_embedding_bag", 1, "indices"},
                                        {"aten::_embedding_bag", 2, "offsets"}, {"aten::index_select", 2, "indices"},
                                        {"aten::gather", 2, "indices"},         {"aten::one_hot", 0, "indices"}};
  // Ops whose output is the input's elements, viewed or picked (DLRM's sparse[:, i] and the like).
  static const std::set<std::string> kViews = {"aten::slice",  "aten::select",    "aten::reshape", "aten::view",
                                               "aten::flatten", "aten::squeeze",  "aten::unsqueeze", "aten::contiguous",
                                               "aten::permute", "aten::transpose", "aten::narrow",  "aten::t"};
  constexpr std::size_t kMaxVisited = 4096;
  for (std::size_t i = 0; i < specs.size() && i < graph.inputs().size(); ++i) {
    if (!ir::is_floating_point(specs[i].dtype)) continue;
    std::vector<const Value*> values = {graph.inputs()[i]};
    for (std::size_t v = 0; v < values.size() && values.size() < kMaxVisited; ++v) {
      for (const auto& use : values[v]->uses()) {
        const std::string kind = use.user->kind().toQualString();
        if (use.offset == 0 && kViews.count(kind) && use.user->outputs().size() == 1) values.push_back(use.user->output());
        for (const auto& arg : kIndexArgs) {
          if (kind != arg.kind || use.offset != arg.offset) continue;
          std::string dims;
          for (auto d : specs[i].dims) dims += (dims.empty() ? "" : "x") + std::to_string(d);
          return path + ": input '" + specs[i].name + "' is " + std::string(ir::dtype_name(specs[i].dtype)) + " but " +
                 kind + " reads it as " + arg.as + ": give it as --input " + specs[i].name + ":" + dims + ":int64";
        }
      }
    }
  }
  return std::nullopt;
}

Model load_lowered(const std::string& path, const LoadOptions& options) {
  auto source = std::make_shared<TorchScriptSource>();
  source->module = load_module(path);
  TorchScriptLowering lowering(path, source->module);
  source->graph = lowering.lower(*source);
  auto specs = bind_inputs(path, *source->graph, source->module, options, source->weights.size());
  std::int64_t batch = specs.empty() ? 1 : specs.front().dims.front();
  std::int64_t evaluated = std::min(batch, kEvaluationBatch);
  std::vector<c10::IValue> recorded;
  try {
    recorded = record_folding_shapes(*source, at_batch(specs, batch, evaluated), path);
  } catch (const std::exception& e) {
    if (auto wrong = float_index_input(path, *source->graph, specs)) throw InputError(*wrong);
    if (evaluated == batch) throw InputError(path + ": forward fails on the example inputs: " + torch_message(e));
    evaluated = batch;  // a model traced with a hard-coded batch runs only at that batch
    try {
      recorded = record_folding_shapes(*source, specs, path);
    } catch (const std::exception& again) {
      throw InputError(path + ": forward fails on the example inputs: " + torch_message(again));
    }
  }
  reject_unsupported(path, *source->graph);
  auto evaluated_specs = at_batch(specs, batch, evaluated);
  Model model;
  model.path = path;
  model.format = ModelFormat::kTorchScript;
  model.batch = batch;
  std::unordered_map<const Value*, ir::ValueId> ids;
  model.graph = build_graph(*source, evaluated_specs, recorded, ids);
  record_in_place_writes(model.graph, *source, ids);
  for (const auto& weight : lowering.unused_weights()) model.graph.add_value(weight_value(weight));
  mark_outputs(model.graph, *source->graph, ids);
  ir::assign_batch_dims(model.graph, evaluated,
                        shapes_at_double_batch(model.graph, *source, evaluated_specs, ids, path));
  check_samples_independent(path, model.graph, *source, evaluated_specs, ids);
  ir::scale_batch(model.graph, evaluated, batch);
  source->specs = specs;
  model.source = source;
  return model;
}

}  // namespace

// Example tensors for the model inputs, from the specs; floats are random with a fixed seed and
// integer inputs (token ids, indices, offsets) are zeros, which every lookup accepts.
std::vector<at::Tensor> example_inputs(const std::string& path, const std::vector<InputSpec>& specs, std::int64_t scale) {
  auto generator = at::detail::createCPUGenerator(/*seed=*/0);
  std::vector<at::Tensor> tensors;
  for (const auto& spec : specs) {
    auto type = ir::to_scalar_type(spec.dtype);
    if (!type) throw InputError(path + ": --input '" + spec.name + "': dtype " + std::string(ir::dtype_name(spec.dtype)) + " is not supported");
    auto dims = spec.dims;
    dims[0] *= scale;
    auto options = at::TensorOptions().dtype(*type);
    tensors.push_back(at::isFloatingType(*type) ? at::randn(dims, generator, options) : at::zeros(dims, options));
  }
  return tensors;
}

// Runs a copy of the lowered graph with every node output registered as a graph output and
// returns those outputs, in node order.
std::vector<c10::IValue> record_values(torch::jit::Graph& lowered, const std::vector<at::Tensor>& inputs,
                                       const std::vector<TorchScriptSource::Weight>& weights) {
  auto graph = lowered.copy();
  auto original_outputs = graph->outputs().size();
  std::vector<Value*> outputs;
  for (Node* node : graph->nodes())
    for (Value* output : node->outputs()) outputs.push_back(output);
  for (Value* output : outputs) {
    // A called function is no value the interpreter can return: None stands in for it.
    bool function = output->type()->kind() == c10::TypeKind::FunctionType;
    graph->registerOutput(function ? graph->insertConstant(c10::IValue()) : output);
  }
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  // Buffers are copied: a training-mode forward updates BatchNorm statistics in place.
  for (const auto& w : weights) stack.emplace_back(w.trainable ? w.tensor : w.tensor.clone());
  torch::NoGradGuard no_grad;
  torch::jit::Code code(graph, "record");
  torch::jit::InterpreterState(code).run(stack);
  return {stack.begin() + static_cast<std::ptrdiff_t>(original_outputs), stack.end()};
}

// Any failure inside torch becomes one line that names the file.
Model load_torchscript(const std::string& path, const LoadOptions& options) {
  try {
    return load_lowered(path, options);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(path + ": cannot read the TorchScript model: " + torch_message(e));
  }
}

}  // namespace rannc
