// A .pt2 model's stage as TorchScript source: each node is the ATen op it names, called as
// torch.<op>(...) with its first argument by position and the rest by keyword,
// so TorchScript picks the overload from the arguments as PyTorch did. Ops the build's libtorch
// lacks are written as compositions with the same results (scaled_dot_product_attention on
// libtorch 1.13); an op with neither is refused by name, every such op of the model at once.
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <set>
#include <sstream>

#include "compiler/source_rank_cut.h"
#include "compiler/torch_plugin.h"
#include "emit/stage_layout.h"
#include "frontends/pt2/pt2_frontend.h"
#include "support/error.h"
#include "support/format.h"

namespace rannc {
namespace {

using nlohmann::json;
using pt2::Argument;

std::string float_literal(double v) {
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string string_literal(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    out += c;
  }
  return out + "\"";
}

// Infix Python operators of the symbolic-size arithmetic torch.export records.
const std::map<std::string, std::string>& python_operators() {
  static const std::map<std::string, std::string> table = {
      {"add", "+"}, {"sub", "-"}, {"mul", "*"}, {"floordiv", "//"}, {"truediv", "/"}, {"mod", "%"}, {"pow", "**"},
      {"eq", "=="}, {"ne", "!="}, {"lt", "<"},  {"le", "<="},  {"gt", ">"},        {"ge", ">="},     {"and_", "&"}, {"or_", "|"}};
  return table;
}

std::string python_operator_name(const std::string& target) {
  for (const char* module : {"_operator.", "operator."}) {
    std::string prefix = module;
    if (target.compare(0, prefix.size(), prefix) == 0) return target.substr(prefix.size());
  }
  return "";
}

// "torch.ops.aten.linear.default" -> {"aten", "linear"}
std::optional<std::pair<std::string, std::string>> aten_call(const std::string& target) {
  static const std::string kOps = "torch.ops.";
  if (target.compare(0, kOps.size(), kOps) != 0) return std::nullopt;
  auto rest = target.substr(kOps.size());
  auto dot = rest.find('.');
  if (dot == std::string::npos) return std::nullopt;
  auto overload = rest.rfind('.');
  auto name = rest.substr(dot + 1, overload == dot ? std::string::npos : overload - dot - 1);
  return std::make_pair(rest.substr(0, dot), name);
}

class Pt2StageEmitter;
using Composition = std::function<void(Pt2StageEmitter&, const pt2::Node&)>;
const std::map<std::string, Composition>& compositions();

class Pt2StageEmitter {
 public:
  Pt2StageEmitter(const Model& model, const Pt2ModelSource& source, const emit::StageLayout& stage,
                  const std::set<std::string>& missing_ops, int tensor_rank)
      : model_(model), graph_(model.graph), source_(source), stage_(stage), missing_(missing_ops) {
    if (tensor_rank >= 0 && stage.tensor_shard.degree > 1) cut_.emplace(graph_, stage.tensor_shard, tensor_rank);
  }

  StageSource run() {
    StageSource out;
    add_weights(out);
    std::vector<std::string> args, returns, types;
    for (const auto& input : stage_.inputs) args.push_back(bind(input.value) + ": Tensor");
    copy_inputs_written_in_place();
    CoreLines core_lines(stage_.recomputed_cores);
    for (auto id : stage_.ops) {
      core_lines.before(body_);
      emit_op(id);
      core_lines.written(id, body_);
    }
    for (const auto& output : stage_.outputs) {
      returns.push_back(cut_ ? cut_->output(vars_.expr(output.value), writer(body_)) : expr(output.value));
      types.push_back("Tensor");
    }
    std::string tuple = returns.size() == 1 ? "(" + returns[0] + ",)" : "(" + join(returns) + ")";
    out.forward = "def forward(self" + std::string(args.empty() ? "" : ", ") + join(args) + ") -> Tuple[" +
                  (types.empty() ? "()" : join(types)) + "]:\n" + body_ + "    return " + tuple + "\n";
    out.core_lines = core_lines.lines();
    return out;
  }

  // --- for compositions ---
  void line(const std::string& text) { body_ += "    " + text + "\n"; }
  std::string temp() { return "_t" + std::to_string(temps_++); }
  const ir::Graph& graph() const { return graph_; }
  std::string device() const { return vars_.device(stage_.inputs.empty() ? ir::kNoId : stage_.inputs.front().value); }

  // An argument by schema name; `fallback` when the node does not give it.
  const Argument* find(const pt2::Node& node, const std::string& name) const {
    for (const auto& input : node.inputs)
      if (input.name == name) return &input.arg;
    return nullptr;
  }
  std::string arg(const pt2::Node& node, const std::string& name, const std::string& fallback) {
    if (auto it = replaced_.find(name); it != replaced_.end()) return it->second;
    const auto* found = find(node, name);
    return found ? render(*found) : fallback;
  }
  ir::ValueId value_of(const Argument& a) const { return source_.value_ids.at(a.value.at("name").get<std::string>()); }

  void assign_outputs(const pt2::Node& node, const std::string& call) {
    if (node.outputs.size() == 1 && node.outputs[0].kind != "as_tensors" && node.outputs[0].kind != "as_none") {
      return assign(node.outputs[0], call);
    }
    auto all = temp();
    line(all + " = " + call);
    for (std::size_t i = 0; i < node.outputs.size(); ++i) {
      const auto& out = node.outputs[i];
      std::string element = node.outputs.size() == 1 ? all : all + "[" + std::to_string(i) + "]";
      if (out.kind == "as_tensors") {
        for (std::size_t j = 0; j < out.value.size(); ++j) assign({"as_tensor", out.value[j]}, element + "[" + std::to_string(j) + "]");
      } else {
        assign(out, element);
      }
    }
  }

  std::string render(const Argument& a) {
    const auto& v = a.value;
    const auto& k = a.kind;
    if (k == "as_tensor") return expr(value_of(a));
    if (k == "as_none") return "None";
    if (k == "as_optional_tensor") return v.contains("as_tensor") ? render({"as_tensor", v["as_tensor"]}) : "None";
    if (k == "as_int") return std::to_string(v.get<std::int64_t>());
    if (k == "as_float") return v.is_number() ? float_literal(v.get<double>()) : special_float(v);
    if (k == "as_bool") return v.get<bool>() ? "True" : "False";
    if (k == "as_string") return string_literal(v.get<std::string>());
    if (k == "as_scalar_type") return std::to_string(pt2::c10_scalar_type(v.get<int>()).value_or(6));
    if (k == "as_memory_format") return memory_format(v.get<int>());
    if (k == "as_sym_int" || k == "as_sym_float" || k == "as_sym_bool") return sym(v);
    if (k == "as_ints") return typed_list("int", v, [](const json& e) { return std::to_string(e.get<std::int64_t>()); });
    if (k == "as_floats")
      return typed_list("float", v, [](const json& e) { return e.is_number() ? float_literal(e.get<double>()) : special_float(e); });
    if (k == "as_bools") return typed_list("bool", v, [](const json& e) { return e.get<bool>() ? "True" : "False"; });
    if (k == "as_sym_ints") return typed_list("int", v, [&](const json& e) { return sym(e); });
    if (k == "as_tensors") return typed_list("Tensor", v, [&](const json& e) { return render({"as_tensor", e}); });
    if (k == "as_optional_tensors") {
      std::vector<std::string> items;
      for (const auto& e : v) items.push_back(render({"as_optional_tensor", e}));
      return "torch.jit.annotate(List[Optional[Tensor]], [" + join(items) + "])";
    }
    throw InputError(model_.path + ": an argument of kind '" + k + "' cannot be written as TorchScript");
  }

 private:
  static std::string special_float(const json& v) {
    auto text = v.is_string() ? v.get<std::string>() : "NaN";
    if (text == "Infinity") return "float(\"inf\")";
    if (text == "-Infinity") return "float(\"-inf\")";
    return "float(\"nan\")";
  }
  // The schema's MemoryFormat (1 contiguous, 2 channels_last, 3 channels_last_3d, 4 preserve)
  // as c10's number, which TorchScript takes.
  static std::string memory_format(int code) {
    switch (code) {
      case 2: return "2";
      case 3: return "3";
      case 4: return "1";
      default: return "0";
    }
  }
  std::string sym(const json& v) {
    if (v.contains("as_name")) return expr(source_.value_ids.at(v["as_name"].get<std::string>()));
    if (v.contains("as_int")) return std::to_string(v["as_int"].get<std::int64_t>());
    if (v.contains("as_float")) return v["as_float"].is_number() ? float_literal(v["as_float"].get<double>()) : special_float(v["as_float"]);
    if (v.contains("as_bool")) return v["as_bool"].get<bool>() ? "True" : "False";
    throw InputError(model_.path + ": a symbolic value without a name or a number");
  }
  template <typename Render>
  std::string typed_list(const std::string& type, const json& v, Render render_item) {
    std::vector<std::string> items;
    for (const auto& e : v) items.push_back(render_item(e));
    // An empty list literal is a List[Tensor] to TorchScript unless annotated.
    if (items.empty()) return "torch.jit.annotate(List[" + type + "], [])";
    return "[" + join(items) + "]";
  }

  // What reads a value: its variable or attribute, as the op being written reads it on a tensor rank.
  std::string expr(ir::ValueId id) {
    if (!cut_ || !cut_->writing()) return vars_.expr(id);
    return cut_->read(id, vars_.expr(id), writer(prelude_));
  }
  std::string bind(ir::ValueId id) { return vars_.bind(id); }

  void assign(const Argument& out, const std::string& value) {
    if (out.kind == "as_none" || (out.kind == "as_optional_tensor" && out.value.contains("as_none"))) return;
    const auto& named = out.kind == "as_optional_tensor" ? out.value["as_tensor"] : out.value;
    std::string name = named.contains("as_name") ? named["as_name"].get<std::string>() : named.at("name").get<std::string>();
    line(bind(source_.value_ids.at(name)) + " = " + value);
  }

  // A stage's inputs arrive as leaves that require grad, which autograd forbids to change in
  // place (hardswish_ on the first op of a stage): the stage works on its own copy, whose
  // gradient flows back to the input.
  void copy_inputs_written_in_place() {
    std::set<ir::OpId> mine(stage_.ops.begin(), stage_.ops.end());
    for (const auto& input : stage_.inputs) {
      const auto& writers = graph_.value(input.value).writers;
      if (std::none_of(writers.begin(), writers.end(), [&](ir::OpId op) { return mine.count(op) > 0; })) continue;
      auto name = vars_.expr(input.value);
      line(name + " = torch.clone(" + name + ")");
    }
  }

  void add_weights(StageSource& out) {
    auto add = [&](const emit::StageWeight& weight, bool trainable) {
      const auto& stored = stored_weight(model_, source_, weight.value);
      out.attributes.push_back({weight.stage_name, trainable, stored.dtype, stored.dims, stored.data});
      if (cut_) cut_->cut_weight(weight.value, out.attributes.back());
      vars_.add_weight(weight.value, weight.stage_name);
    };
    for (const auto& weight : stage_.params) add(weight, true);
    for (const auto& weight : stage_.buffers) add(weight, false);
  }

 public:
  // The archive's data of a weight of the graph; InputError when it stores none or another shape.
  static const StoredTensor& stored_weight(const Model& model, const Pt2ModelSource& source, ir::ValueId id) {
    const auto& value = model.graph.value(id);
    const auto& tensors = source.archive().tensors();
    auto it = tensors.find(value.name);
    if (it == tensors.end()) {
      throw InputError(model.path + ": the archive stores no data for '" + value.name +
                       "' (a shape-only export? plan it with --plan-only)");
    }
    // What the archive stores must be what the program reads (a damaged or edited archive).
    if (it->second.dims != value.type.shape || it->second.dtype != value.type.dtype) {
      throw InputError(model.path + ": the archive stores '" + value.name + "' as " + describe(it->second.dtype, it->second.dims) +
                       ", the program reads " + describe(value.type.dtype, value.type.shape));
    }
    return it->second;
  }

 private:
  static std::string describe(ir::DType dtype, const std::vector<std::int64_t>& dims) {
    std::string text = std::string(ir::dtype_name(dtype)) + "[";
    for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
    return text + "]";
  }

  void emit_op(ir::OpId id) {
    const auto& op = graph_.op(id);
    const auto& nodes = source_.program().nodes;
    if (op.source_node < 0) return;  // a constant or list: written inline where it is used
    auto index = static_cast<std::size_t>(op.source_node);
    if (index >= nodes.size()) {  // a buffer's new value copied back (a functional export)
      const auto& [value, buffer] = source_.mutations.at(index - nodes.size());
      line("_ = torch.copy_(" + expr(source_.value_ids.at(buffer)) + ", " + expr(source_.value_ids.at(value)) + ")");
      return;
    }
    if (cut_) emit_cut_node(op, nodes[index]);
    else emit_node(nodes[index]);
  }

  // Lines into `text`, indented as the forward's body; fresh variables.
  SourceRankCut::Writer writer(std::string& text) {
    return {[&text](const std::string& line) { text += "    " + line + "\n"; }, [this] { return temp(); }};
  }

  // A node as a tensor rank runs it (source_rank_cut.h). The collectives its inputs need go
  // before its lines, whichever line first reads them.
  void emit_cut_node(const ir::Op& op, const pt2::Node& node) {
    cut_->write_op(op, body_, prelude_, vars_, [&] {
      switch (cut_->role(op.id)) {
        case emit::RankOp::kVocabularyLookup: vocabulary_lookup(op, node); break;
        case emit::RankOp::kRowOp: row_op(op, node); break;
        case emit::RankOp::kRegion:
          cut_size_arguments(op, node);
          emit_node(node);
          break;
        case emit::RankOp::kWhole:
          if (!size_query(op, node)) emit_node(node);
          break;
        case emit::RankOp::kSequence: emit_node(node); break;
      }
    });
    replaced_.clear();
  }

  std::string qualified_name(const pt2::Node& node) const {
    auto call = aten_call(node.target);
    return call ? call->first + "::" + call->second : node.target;
  }

  [[noreturn]] void not_cut(const ir::Op& op, const pt2::Node& node, const std::string& why) const {
    throw InputError(model_.path + ": op '" + qualified_name(node) + "' (op " + std::to_string(op.id) +
                     ") of a tensor-parallel region " + why + ", so its stage cannot be cut for tensor ranks; plan with "
                     "--tensor-parallel 1");
  }

  // The output variable of a node written, the one the cut rewrites.
  std::string output_variable(const ir::Op& op) const { return *vars_.variable(op.outputs.at(0)); }

  // Megatron-LM's VocabParallelEmbedding: the rank's rows looked up, the others zeroed, the group's sum.
  void vocabulary_lookup(const ir::Op& op, const pt2::Node& node) {
    if (qualified_name(node) != "aten::embedding" || !find(node, "indices"))
      not_cut(op, node, "is no lookup of a table's rows");
    auto lookup = cut_->vocabulary_ids(op, render(*find(node, "indices")), writer(prelude_));
    replaced_["indices"] = lookup.local;
    if (const auto* padding = find(node, "padding_idx"); padding && padding->kind != "as_none") {
      if (padding->kind != "as_int") not_cut(op, node, "has a padding index computed at run time");
      auto row = cut_->share().local_padding_row(op.inputs.at(0), padding->value.get<std::int64_t>());
      replaced_["padding_idx"] = std::to_string(row);
    }
    emit_node(node);
    cut_->sum_vocabulary_rows(op, output_variable(op), lookup, writer(body_));
  }

  // A row op: its partial sums summed over the group, a linear's bias added once after the sum.
  void row_op(const ir::Op& op, const pt2::Node& node) {
    auto kind = qualified_name(node);
    if (kind != "aten::linear" && kind != "aten::matmul" && kind != "aten::mm")
      not_cut(op, node, "is a row-parallel product of a kind the cut does not know");
    std::string bias = kind == "aten::linear" ? arg(node, "bias", "None") : "None";
    if (bias != "None") replaced_["bias"] = "None";
    emit_node(node);
    cut_->sum(op, output_variable(op), bias == "None" ? "" : bias, writer(body_));
  }

  // A region's size arguments along the split dim as the rank's share: a view's, reshape's or
  // expand's shape entry at its output's split dim, a split's sizes and a slice's or narrow's
  // bounds along its input's.
  void cut_size_arguments(const ir::Op& op, const pt2::Node& node) {
    auto kind = qualified_name(node);
    static const std::map<std::string, std::string> kShapes = {
        {"aten::view", "size"}, {"aten::_unsafe_view", "size"}, {"aten::reshape", "shape"}, {"aten::expand", "size"}};
    static const std::map<std::string, std::vector<std::string>> kSizes = {
        {"aten::split", {"split_size"}}, {"aten::split_with_sizes", {"split_sizes"}},
        {"aten::unsafe_split", {"split_size"}}, {"aten::unsafe_split_with_sizes", {"split_sizes"}},
        {"aten::slice", {"start", "end"}}, {"aten::narrow", {"start", "length"}}};
    if (auto shape = kShapes.find(kind); shape != kShapes.end()) {
      int entry = cut_->share().divided_shape_entry(op);
      const auto* list = find(node, shape->second);
      if (entry >= 0 && list) replaced_[shape->second] = divided_entry(op, node, *list, entry);
      return;
    }
    auto sizes = kSizes.find(kind);
    if (sizes == kSizes.end()) return;
    const auto* dim = find(node, "dim");
    std::int64_t along = dim && dim->kind == "as_int" ? dim->value.get<std::int64_t>() : 0;
    if (!cut_->share().cuts_split_dim(op, along)) return;
    for (const auto& name : sizes->second)
      if (const auto* size = find(node, name)) replaced_[name] = divided(op, node, *size);
  }

  // A SymInt (or int) list with entry `entry` divided (-1, an inferred size, stays).
  std::string divided_entry(const ir::Op& op, const pt2::Node& node, const Argument& list, int entry) {
    if (!list.value.is_array() || entry >= static_cast<int>(list.value.size()))
      not_cut(op, node, "has a shape shorter than its split dim");
    std::vector<std::string> items;
    for (std::size_t i = 0; i < list.value.size(); ++i) {
      const auto& item = list.value[i];
      Argument one{list.kind == "as_ints" ? "as_int" : "as_sym_int", item};
      items.push_back(static_cast<int>(i) == entry && known_int(one) != -1 ? divided(op, node, one) : render(one));
    }
    return "[" + join(items) + "]";
  }

  // An int or SymInt size (each of a list) as the rank's share; None (a slice's open end) stays.
  std::string divided(const ir::Op& op, const pt2::Node& node, const Argument& size) {
    const auto& v = size.value;
    if (size.kind == "as_none" || (size.kind == "as_sym_int" && v.contains("as_none"))) return "None";
    if (size.kind == "as_ints" || size.kind == "as_sym_ints") {
      std::vector<std::string> items;
      for (const auto& item : v) items.push_back(divided(op, node, {size.kind == "as_ints" ? "as_int" : "as_sym_int", item}));
      return "[" + join(items) + "]";
    }
    if (auto known = known_int(size)) return std::to_string(cut_->divided(*known));
    if (size.kind == "as_sym_int" && v.contains("as_name")) return cut_->divided(render(size));
    not_cut(op, node, "has a size argument of kind '" + size.kind + "'");
  }

  // An int or SymInt argument's value where it is a number.
  static std::optional<std::int64_t> known_int(const Argument& size) {
    const auto& v = size.value;
    if (size.kind == "as_int" && v.is_number()) return v.get<std::int64_t>();
    if (size.kind == "as_sym_int" && v.is_object() && v.contains("as_int")) return v["as_int"].get<std::int64_t>();
    return std::nullopt;
  }

  // A size query of a split value (along the sequence, or a region's) reads it where it is, that
  // dim times the degree: the whole model's size.
  bool size_query(const ir::Op& op, const pt2::Node& node) {
    if (node.target != "torch.ops.aten.sym_size.int" || op.inputs.empty()) return false;
    std::string x = vars_.expr(op.inputs[0]);
    int split = cut_->split_dim(op.inputs[0], x);
    if (split < 0) return false;
    replaced_["self"] = x;
    emit_node(node);
    const auto* dim = find(node, "dim");
    auto rank = static_cast<std::int64_t>(graph_.value(op.inputs[0]).type.shape.size());
    std::int64_t at = dim && dim->kind == "as_int" ? dim->value.get<std::int64_t>() : -1;
    if ((at < 0 ? at + rank : at) == split) {
      auto out = output_variable(op);
      line(out + " = " + out + " * " + std::to_string(cut_->degree()));
    }
    return true;
  }

  void emit_node(const pt2::Node& node) {
    if (auto op = python_operator_name(node.target); !op.empty()) return emit_python_operator(node, op);
    auto call = aten_call(node.target);
    if (!call) throw InputError(model_.path + ": op '" + node.target + "' has no TorchScript mapping");
    auto qualified = call->first + "::" + call->second;
    if (missing_.count(qualified)) return compositions().at(qualified)(*this, node);
    // PyTorch records a view where its kernels' strides allowed one; the ops here may lay out
    // their results otherwise (the attention composition), so a view is a reshape: the same
    // view where one is possible, else a copy with the same values and gradients.
    // (reshape calls its size `shape`: the arguments go by position.)
    bool positional = qualified == "aten::view" || qualified == "aten::_unsafe_view";
    if (positional) call->second = "reshape";
    std::vector<std::string> args;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const auto& input = node.inputs[i];
      if (input.arg.kind == "as_layout") continue;  // strided: the default
      if (input.arg.kind == "as_device") {
        if (auto d = device(); !d.empty()) args.push_back(input.name + "=" + d);
        continue;
      }
      auto replaced = replaced_.find(input.name);
      auto text = replaced != replaced_.end() ? replaced->second : render(input.arg);
      args.push_back(i == 0 || positional ? text : input.name + "=" + text);
    }
    // TorchScript resolves `torch.<op>` to aten's builtins and `ops.<namespace>.<op>` to the others.
    auto callee = call->first == "aten" ? "torch." + call->second : "ops." + call->first + "." + call->second;
    assign_outputs(node, callee + "(" + join(args) + ")");
  }

  void emit_python_operator(const pt2::Node& node, const std::string& op) {
    std::vector<std::string> args;
    for (const auto& input : node.inputs) args.push_back(render(input.arg));
    std::string value;
    if (op == "getitem" && args.size() == 2) value = args[0] + "[" + args[1] + "]";
    else if (op == "neg" && args.size() == 1) value = "-" + args[0];
    else if (auto it = python_operators().find(op); it != python_operators().end() && args.size() == 2)
      value = "(" + args[0] + " " + it->second + " " + args[1] + ")";
    else throw InputError(model_.path + ": op '" + node.target + "' has no TorchScript mapping");
    assign_outputs(node, value);
  }

  const Model& model_;
  const ir::Graph& graph_;
  const Pt2ModelSource& source_;
  const emit::StageLayout& stage_;
  const std::set<std::string>& missing_;
  StageVariables vars_{graph_, stage_.id};
  std::string body_;
  int temps_ = 0;
  std::optional<SourceRankCut> cut_;  // set where the stage is written for one tensor rank
  std::string prelude_;               // under a cut, the collectives a node's inputs need
  std::map<std::string, std::string> replaced_;  // the node's arguments written otherwise, by schema name
};

// --- compositions of ops an older libtorch lacks, with the results of PyTorch's math path ---

// F.scaled_dot_product_attention: softmax(q k^T * scale + mask) v, the causal mask a lower
// triangle, grouped-query K/V repeated over the query heads.
void scaled_dot_product_attention(Pt2StageEmitter& e, const pt2::Node& node) {
  auto q = e.arg(node, "query", ""), k = e.arg(node, "key", ""), v = e.arg(node, "value", "");
  const auto* mask = e.find(node, "attn_mask");
  auto dropout = e.arg(node, "dropout_p", "0.0");
  bool causal = e.arg(node, "is_causal", "False") == "True";
  bool gqa = e.arg(node, "enable_gqa", "False") == "True";
  auto scale = e.arg(node, "scale", "None");
  if (scale == "None") scale = "(float(" + q + ".size(-1)) ** -0.5)";
  if (gqa) {
    auto rk = e.temp(), rv = e.temp();
    e.line(rk + " = torch.repeat_interleave(" + k + ", " + q + ".size(-3) // " + k + ".size(-3), -3)");
    e.line(rv + " = torch.repeat_interleave(" + v + ", " + q + ".size(-3) // " + v + ".size(-3), -3)");
    k = rk, v = rv;
  }
  auto scores = e.temp();
  e.line(scores + " = torch.matmul(" + q + ", " + k + ".transpose(-2, -1)) * " + scale);
  if (causal) {
    auto keep = e.temp();
    e.line(keep + " = torch.ones([" + q + ".size(-2), " + k + ".size(-2)], dtype=11, device=" + q + ".device).tril()");
    e.line(scores + " = " + scores + ".masked_fill(" + keep + ".logical_not(), float(\"-inf\"))");
  }
  if (mask && mask->kind != "as_none" && !(mask->kind == "as_optional_tensor" && mask->value.contains("as_none"))) {
    auto m = e.render(*mask);
    bool boolean = e.graph().value(e.value_of(mask->kind == "as_tensor" ? *mask : Argument{"as_tensor", mask->value["as_tensor"]}))
                       .type.dtype == ir::DType::kBool;
    e.line(scores + " = " + (boolean ? scores + ".masked_fill(" + m + ".logical_not(), float(\"-inf\"))" : scores + " + " + m));
  }
  auto weights = e.temp();
  e.line(weights + " = torch.softmax(" + scores + ", -1)");
  if (dropout != "0.0" && dropout != "0") e.line(weights + " = torch.dropout(" + weights + ", " + dropout + ", True)");
  e.assign_outputs(node, "torch.matmul(" + weights + ", " + v + ")");
}

// F.rms_norm (nn.RMSNorm): x / sqrt(mean(x^2) + eps) * weight over the trailing normalized dims,
// in float32 at least, eps the dtype's machine epsilon when not given, as PyTorch computes it.
void rms_norm(Pt2StageEmitter& e, const pt2::Node& node) {
  auto x = e.arg(node, "input", "");
  const auto* shape = e.find(node, "normalized_shape");
  std::size_t dims = shape && shape->value.is_array() ? shape->value.size() : 1;
  std::vector<std::string> reduce;
  for (std::size_t d = 0; d < dims; ++d) reduce.push_back(std::to_string(-1 - static_cast<int>(d)));
  auto dtype = e.graph().value(e.value_of(node.inputs.front().arg)).type.dtype;
  static const std::map<ir::DType, std::string> kEpsilon = {{ir::DType::kFloat32, "1.1920928955078125e-07"},
                                                            {ir::DType::kFloat64, "2.220446049250313e-16"},
                                                            {ir::DType::kFloat16, "0.0009765625"},
                                                            {ir::DType::kBFloat16, "0.0078125"}};
  auto eps = e.arg(node, "eps", "None");
  if (eps == "None") eps = kEpsilon.count(dtype) ? kEpsilon.at(dtype) : "1.1920928955078125e-07";
  bool low_precision = dtype == ir::DType::kFloat16 || dtype == ir::DType::kBFloat16;
  auto wide = e.temp(), out = e.temp();
  e.line(wide + " = " + x + (low_precision ? ".float()" : ""));
  e.line(out + " = (" + wide + " * torch.rsqrt(" + wide + ".pow(2).mean([" + join(reduce) + "], True) + " + eps + "))" +
         (low_precision ? ".type_as(" + x + ")" : ""));
  auto weight = e.arg(node, "weight", "None");
  e.assign_outputs(node, weight == "None" ? out : out + " * " + weight);
}

const std::map<std::string, Composition>& compositions() {
  static const std::map<std::string, Composition> table = {
      {"aten::scaled_dot_product_attention", scaled_dot_product_attention},
      {"aten::rms_norm", rms_norm},
  };
  return table;
}

// The ops of the model the build's libtorch lacks: each must have a composition, or the model
// is refused naming all that have none.
std::set<std::string> missing_operators(const Model& model, const Pt2ModelSource& source) {
  std::set<std::string> qualified;
  for (const auto& node : source.program().nodes)
    if (auto call = aten_call(node.target)) qualified.insert(call->first + "::" + call->second);
  std::set<std::string> missing, unmapped;
  for (const auto& name : qualified) {
    if (name == "aten::sym_size" || torch_plugin().has_operator(name)) continue;
    missing.insert(name);
    if (!compositions().count(name)) unmapped.insert(name);
  }
  if (!unmapped.empty()) {
    std::string list;
    for (const auto& name : unmapped) list += (list.empty() ? "" : ", ") + name;
    throw InputError(model.path + ": op(s) this build's libtorch " + torch_plugin().torch_version() +
                     " lacks and that have no composition here: " + list + "; plan with --plan-only, or build against a newer libtorch");
  }
  return missing;
}

}  // namespace

std::optional<StageSource> Pt2ModelSource::stage_source(const Model& model, const emit::StageLayout& stage,
                                                        int tensor_rank) const {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  // The weights first: a shape-only or damaged archive is refused before libtorch is loaded.
  for (const auto* weights : {&stage.params, &stage.buffers})
    for (const auto& weight : *weights) Pt2StageEmitter::stored_weight(model, *this, weight.value);
  if (!missing_ops_) missing_ops_ = missing_operators(model, *this);
  return Pt2StageEmitter(model, *this, stage, *missing_ops_, tensor_rank).run();
}

std::string Pt2ModelSource::reference_note() const {
  return "pt2: the reference is the whole exported program through the same op mapping, so this checks the partition; "
         "tests compare the mapping with PyTorch's own outputs";
}

}  // namespace rannc
