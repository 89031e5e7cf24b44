#include "frontends/pt2/pt2_frontend.h"

#include <algorithm>
#include <set>

#include "cost_model/op_work.h"
#include "ir/batch_dims.h"
#include "support/error.h"
#include "support/zip_archive.h"

namespace rannc {
namespace {

using pt2::Argument;
using pt2::ExportedProgram;

// "torch.ops.aten.linear.default" -> "aten::linear"; "_operator.mul" -> "aten::mul" (arithmetic
// on symbolic sizes, which the cost model takes as glue); sym_size is aten::size, as traced.
std::string op_kind(const std::string& target) {
  if (target == "torch.ops.aten.sym_size.int") return "aten::size";
  static const std::string kOps = "torch.ops.";
  if (target.compare(0, kOps.size(), kOps) == 0) {
    auto rest = target.substr(kOps.size());
    auto dot = rest.find('.');
    auto overload = rest.rfind('.');
    if (dot == std::string::npos) return rest;
    auto name = rest.substr(dot + 1, overload == dot ? std::string::npos : overload - dot - 1);
    return rest.substr(0, dot) + "::" + name;
  }
  for (const char* module : {"_operator.", "operator.", "math."}) {
    std::string prefix = module;
    if (target.compare(0, prefix.size(), prefix) == 0) return "aten::" + target.substr(prefix.size());
  }
  return target;
}

// The symbols of the model's dynamic dims bound to numbers: --input dims where given, the batch
// symbol (dim 0 of the first user input) to the requested batch, any other to its export hint.
struct Symbols {
  std::map<std::string, std::int64_t> at_batch, at_double_batch;
  std::string batch_symbol;
  std::int64_t batch = 1;
  std::optional<std::int64_t> fixed_batch;
};

// A dim that is one symbol and nothing else: binding it to a number binds the symbol ("2*s0"
// with its hint 8 would bind s0 to 8, not 4).
bool is_bare_symbol(const pt2::Dim& dim) { return !dim.value && pt2::bare_symbol(dim.expr).has_value(); }

class Pt2Lowering {
 public:
  Pt2Lowering(const std::string& path, const ExportedProgram& program, Pt2ModelSource& source)
      : path_(path), program_(program), source_(source) {}

  Model lower(const LoadOptions& options) {
    check_supported();
    symbols_ = bind_symbols(options);
    add_placeholders();
    for (std::size_t i = 0; i < program_.nodes.size(); ++i) add_node(static_cast<std::int64_t>(i));
    add_outputs();
    Model model;
    model.path = path_;
    model.format = ModelFormat::kPt2;
    model.batch = symbols_.batch;
    model.fixed_batch = symbols_.fixed_batch;
    ir::assign_batch_dims(graph_, model.batch, shapes_at_double_batch_);
    model.graph = std::move(graph_);
    return model;
  }

 private:
  // --- what this frontend refuses, all at once where it can ---
  void check_supported() {
    std::set<std::string> refused;
    for (const auto& node : program_.nodes) {
      if (node.target.rfind("torch.ops.higher_order.", 0) == 0) refused.insert(node.target);
    }
    if (!refused.empty()) {
      std::string list;
      for (const auto& t : refused) list += (list.empty() ? "" : ", ") + t;
      throw InputError(path_ + ": control flow or wrapped regions (" + list +
                       ") are not supported; export without torch.cond/while_loop/checkpoint regions");
    }
    for (const auto& spec : program_.input_specs) {
      if (spec.kind == pt2::InputKind::kOther)
        throw InputError(path_ + ": an input of kind '" + spec.kind_name + "' is not supported (tensor inputs only)");
    }
    for (const auto& spec : program_.output_specs) {
      if (spec.kind == pt2::OutputKind::kOther)
        throw InputError(path_ + ": an output of kind '" + spec.kind_name + "' is not supported (user outputs and buffer updates only)");
    }
    bool any_param = false, any_trainable = false;
    for (const auto& spec : program_.input_specs) {
      if (spec.kind != pt2::InputKind::kParameter) continue;
      any_param = true;
      auto meta = program_.tensors.find(spec.arg);
      any_trainable = any_trainable || (meta != program_.tensors.end() && meta->second.requires_grad);
    }
    if (any_param && !any_trainable) {
      throw InputError(path_ + ": an inference export (no parameter requires grad); export the model for training: "
                       "torch.export.export(model, args) with the parameters requiring grad, then torch.export.save");
    }
  }

  const pt2::TensorMeta& meta_of(const std::string& name, const std::string& user) const {
    auto it = program_.tensors.find(name);
    if (it == program_.tensors.end()) throw InputError(path_ + ": " + user + " '" + name + "' has no tensor_values entry");
    return it->second;
  }

  std::vector<const pt2::InputSpec*> user_inputs() const {
    std::vector<const pt2::InputSpec*> inputs;
    for (const auto& spec : program_.input_specs)
      if (spec.kind == pt2::InputKind::kUserInput) inputs.push_back(&spec);
    return inputs;
  }

  Symbols bind_symbols(const LoadOptions& options) {
    Symbols symbols;
    std::vector<std::string> names;
    for (const auto* input : user_inputs()) names.push_back(input->arg);
    check_input_names(path_, options, names);
    auto inputs = user_inputs();
    // --input dims bind the bare symbols of the dims they give; fixed dims must match.
    for (const auto& spec : options.inputs) {
      auto it = std::find_if(inputs.begin(), inputs.end(), [&](const auto* i) { return i->arg == spec.name; });
      const auto& meta = meta_of((*it)->arg, "input");
      if (spec.dims.size() != meta.sizes.size())
        throw InputError("--input '" + spec.name + "' has " + std::to_string(spec.dims.size()) + " dims; " + path_ +
                         " takes " + std::to_string(meta.sizes.size()));
      for (std::size_t d = 0; d < spec.dims.size(); ++d) {
        const auto& dim = meta.sizes[d];
        if (dim.value && *dim.value != spec.dims[d] && !(d == 0 && it == inputs.begin()))
          throw InputError("--input '" + spec.name + "' dim " + std::to_string(d) + " is " + std::to_string(spec.dims[d]) +
                           "; " + path_ + " was exported with it fixed at " + std::to_string(*dim.value));
        if (is_bare_symbol(dim)) symbols.at_batch[pt2::expr_symbols(dim.expr).front()] = spec.dims[d];
      }
    }
    const pt2::Dim* batch_dim = nullptr;
    if (!inputs.empty()) {
      const auto& meta = meta_of(inputs.front()->arg, "input");
      if (!meta.sizes.empty()) batch_dim = &meta.sizes.front();
    }
    if (batch_dim && is_bare_symbol(*batch_dim)) {
      symbols.batch_symbol = pt2::expr_symbols(batch_dim->expr).front();
      auto requested = requested_batch(options);
      if (options.batch) symbols.at_batch[symbols.batch_symbol] = *options.batch;
      else if (!symbols.at_batch.count(symbols.batch_symbol)) symbols.at_batch[symbols.batch_symbol] = requested.value_or(std::max<std::int64_t>(batch_dim->hint, 1));
      symbols.batch = symbols.at_batch[symbols.batch_symbol];
    } else if (batch_dim && batch_dim->value) {
      symbols.fixed_batch = symbols.batch = *batch_dim->value;
      check_fixed_batch(options, *batch_dim->value);
    }
    // Every other symbol at its export hint.
    auto bind_hints = [&](const pt2::Dim& dim) {
      for (const auto& name : pt2::expr_symbols(dim.expr))
        if (!symbols.at_batch.count(name) && is_bare_symbol(dim)) symbols.at_batch[name] = dim.hint;
    };
    for (const auto& [name, meta] : program_.tensors)
      for (const auto& dim : meta.sizes) bind_hints(dim);
    for (const auto& [name, dim] : program_.sym_ints) bind_hints(dim);
    symbols.at_double_batch = symbols.at_batch;
    if (!symbols.batch_symbol.empty()) symbols.at_double_batch[symbols.batch_symbol] *= 2;
    return symbols;
  }

  void check_fixed_batch(const LoadOptions& options, std::int64_t batch) {
    std::string advice = "export with dynamic_shapes={<first input>: {0: torch.export.Dim('batch')}} to plan other batch sizes";
    if (batch < 1) throw InputError(path_ + ": the model's first input has a fixed batch of 0; " + advice);
    if (options.batch && *options.batch % batch != 0) {
      throw InputError("--batch " + std::to_string(*options.batch) + ": " + path_ + " was exported with a fixed batch of " +
                       std::to_string(batch) + ", so the global batch must be a multiple of it; " + advice);
    }
  }

  std::int64_t dim_value(const pt2::Dim& dim, const std::map<std::string, std::int64_t>& symbols) const {
    if (dim.value) return *dim.value;
    return pt2::evaluate_expr(dim.expr, symbols).value_or(-1);
  }

  // A dim whose expression gives no size. Allowed only for a tensor the graph computes whose size
  // names a symbol nothing binds (a data-dependent size, u0): an input or a weight must have its
  // sizes, and an expression of bound symbols that gives none is too deep, out of range, negative
  // or not understood.
  void check_unknown_dim(const pt2::Dim& dim, const std::string& name, std::size_t d, const std::string& user) const {
    auto excerpt = dim.expr.size() > 60 ? dim.expr.substr(0, 57) + "..." : dim.expr;
    std::string where = path_ + ": " + user + " '" + name + "' dim " + std::to_string(d) + " is '" + excerpt + "'";
    std::string unbound;
    std::map<std::string, std::int64_t> ones;  // each symbol at 1: whether the form is understood at all
    for (const auto& symbol : pt2::expr_symbols(dim.expr)) {
      ones[symbol] = 1;
      if (!symbols_.at_batch.count(symbol) && unbound.empty()) unbound = symbol;
    }
    auto at_batch = pt2::evaluate_expr(dim.expr, symbols_.at_batch);
    if (at_batch && *at_batch < 0) throw InputError(where + ", which is " + std::to_string(*at_batch) + " at batch " + std::to_string(symbols_.batch));
    if (unbound.empty() || !pt2::evaluate_expr(dim.expr, ones))
      throw InputError(where + ", which cannot be evaluated (nested too deep, out of the 64-bit range or not understood)");
    if (user == "input" || user == "weight")
      throw InputError(where + ": its symbol '" + unbound + "' is no input's dim, so its size is not known");
  }

  ir::ValueId tensor_value(const std::string& name, const std::string& display_name, const std::string& user) {
    const auto& meta = meta_of(name, user);
    ir::Value value;
    value.name = display_name;
    value.type.dtype = meta.dtype;
    std::vector<std::int64_t> doubled;
    bool known = true;
    for (std::size_t d = 0; d < meta.sizes.size(); ++d) {
      value.type.shape.push_back(dim_value(meta.sizes[d], symbols_.at_batch));
      doubled.push_back(dim_value(meta.sizes[d], symbols_.at_double_batch));
      if (value.type.shape.back() < 0 || doubled.back() < 0) check_unknown_dim(meta.sizes[d], name, d, user);
      known = known && value.type.shape.back() >= 0 && doubled.back() >= 0;
    }
    if (known) check_tensor_size(path_, user + " '" + name + "'", value.type.shape, meta.dtype);
    auto id = define(name, std::move(value));
    if (known) remember_double(id, doubled);
    return id;
  }

  void remember_double(ir::ValueId id, std::vector<std::int64_t> shape) {
    if (shapes_at_double_batch_.size() <= static_cast<std::size_t>(id)) shapes_at_double_batch_.resize(static_cast<std::size_t>(id) + 1);
    shapes_at_double_batch_[static_cast<std::size_t>(id)] = std::move(shape);
  }

  ir::ValueId define(const std::string& name, ir::Value value) {
    auto id = graph_.add_value(std::move(value));
    source_.value_ids[name] = id;
    return id;
  }

  // Parameters and buffers under their state_dict names (a tied weight's placeholders are one
  // value), constants under theirs, user inputs under their argument names.
  void add_placeholders() {
    std::map<std::string, ir::ValueId> weights;
    for (const auto& spec : program_.input_specs) {
      using pt2::InputKind;
      if (spec.kind == InputKind::kConstantInput) {
        source_.value_ids[spec.arg] = constant(spec.constant, "constant input '" + spec.arg + "'");
        continue;
      }
      if (spec.kind != InputKind::kUserInput) {
        if (auto it = weights.find(spec.target); it != weights.end()) {
          source_.value_ids[spec.arg] = it->second;
          continue;
        }
        auto id = tensor_value(spec.arg, spec.target, "weight");
        auto& value = graph_.value(id);
        value.role = spec.kind == InputKind::kParameter ? ir::ValueRole::kParam : ir::ValueRole::kBuffer;
        weights[spec.target] = id;
        continue;
      }
      auto id = tensor_value(spec.arg, spec.arg, "input");
      graph_.value(id).role = ir::ValueRole::kModelInput;
    }
  }

  // --- arguments: a constant op per literal, a list op per list, so the cost model and the
  // partitioner see the same inputs as for a traced model ---
  ir::ValueId constant(const Argument& arg, const std::string& where) {
    ir::Value value;
    value.literal = literal_of(arg, where, value.kind);
    auto id = graph_.add_value(std::move(value));
    graph_.add_op("prim::Constant", {}, {id});
    return id;
  }

  ir::Literal literal_of(const Argument& arg, const std::string& where, ir::ValueKind& kind) {
    const auto& v = arg.value;
    auto all = [&](auto test) { return v.is_array() && std::all_of(v.begin(), v.end(), test); };
    if (arg.kind == "as_int" && v.is_number_integer()) return kind = ir::ValueKind::kInt, ir::Literal(v.get<std::int64_t>());
    if (arg.kind == "as_float" && v.is_number()) return kind = ir::ValueKind::kFloat, ir::Literal(v.get<double>());
    if (arg.kind == "as_float" && v.is_string()) return kind = ir::ValueKind::kFloat, ir::Literal();  // "Infinity", "NaN"
    if (arg.kind == "as_bool" && v.is_boolean()) return kind = ir::ValueKind::kBool, ir::Literal(v.get<bool>());
    if (arg.kind == "as_string" && v.is_string()) return kind = ir::ValueKind::kString, ir::Literal(v.get<std::string>());
    if (arg.kind == "as_none") return kind = ir::ValueKind::kNone, ir::Literal();
    if (arg.kind == "as_ints" && all([](const auto& e) { return e.is_number_integer(); }))
      return kind = ir::ValueKind::kIntList, ir::Literal(v.get<std::vector<std::int64_t>>());
    if (arg.kind == "as_floats" && all([](const auto& e) { return e.is_number(); }))
      return kind = ir::ValueKind::kFloatList, ir::Literal(v.get<std::vector<double>>());
    if (arg.kind == "as_floats" && all([](const auto& e) { return e.is_number() || e.is_string(); }))
      return kind = ir::ValueKind::kFloatList, ir::Literal();  // with "Infinity" or "NaN"
    if (arg.kind == "as_scalar_type" && v.is_number_integer()) {
      auto code = pt2::c10_scalar_type(v.get<int>());
      if (!code) throw InputError(path_ + ": " + where + " names dtype code " + std::to_string(v.get<int>()) + ", which this build has no type for");
      return kind = ir::ValueKind::kInt, ir::Literal(std::int64_t{*code});
    }
    if (arg.kind == "as_memory_format" || arg.kind == "as_layout") return kind = ir::ValueKind::kInt, ir::Literal(v.is_number_integer() ? v.get<std::int64_t>() : 0);
    if (arg.kind == "as_device" || arg.kind == "as_bools") return kind = ir::ValueKind::kOther, ir::Literal();
    throw InputError(path_ + ": " + where + " is an argument of kind '" + arg.kind + "' (" + json_text(v) + "), which this build does not read");
  }

  static std::string json_text(const nlohmann::json& v) {
    auto text = v.dump();
    return text.size() > 60 ? text.substr(0, 57) + "..." : text;
  }

  ir::ValueId lookup(const std::string& name, const std::string& user) const {
    auto it = source_.value_ids.find(name);
    if (it == source_.value_ids.end()) throw InputError(path_ + ": " + user + " reads '" + name + "', which nothing defines");
    return it->second;
  }

  std::string name_in(const nlohmann::json& v, const std::string& user) const {
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) throw InputError(path_ + ": " + user + " has a tensor argument without a name");
    return v["name"].get<std::string>();
  }

  // A symbolic int argument: {"as_name": "sym_size_int_1"} or {"as_int": 8}.
  ir::ValueId sym_int(const nlohmann::json& v, const std::string& user) {
    if (v.is_object() && v.contains("as_name") && v["as_name"].is_string()) return lookup(v["as_name"].get<std::string>(), user);
    if (v.is_object() && v.contains("as_int")) return constant({"as_int", v["as_int"]}, user);
    throw InputError(path_ + ": " + user + " has a symbolic int that is neither a name nor a number");
  }

  ir::ValueId list(std::vector<ir::ValueId> items, ir::ValueKind kind) {
    ir::Value value;
    value.kind = kind;
    if (kind == ir::ValueKind::kIntList) {
      std::vector<std::int64_t> known;
      for (auto id : items)
        if (const auto* n = std::get_if<std::int64_t>(&graph_.value(id).literal)) known.push_back(*n);
      if (known.size() == items.size()) value.literal = known;
    }
    auto id = graph_.add_value(std::move(value));
    graph_.add_op("prim::ListConstruct", std::move(items), {id});
    return id;
  }

  ir::ValueId argument(const Argument& arg, const std::string& user) {
    const auto& v = arg.value;
    if (arg.kind == "as_tensor" || arg.kind == "as_optional_tensor") {
      if (arg.kind == "as_optional_tensor" && v.is_object() && v.contains("as_none")) return constant({"as_none", nullptr}, user);
      const auto& named = arg.kind == "as_optional_tensor" && v.contains("as_tensor") ? v["as_tensor"] : v;
      return lookup(name_in(named, user), user);
    }
    if (arg.kind == "as_sym_int") return sym_int(v, user);
    if (arg.kind == "as_sym_float" || arg.kind == "as_sym_bool") {
      if (v.is_object() && v.contains("as_name") && v["as_name"].is_string()) return lookup(v["as_name"].get<std::string>(), user);
      auto first = v.is_object() && !v.empty() ? v.begin() : v.end();
      if (first == v.end()) throw InputError(path_ + ": " + user + " has an empty " + arg.kind);
      return constant({first.key() == "as_float" ? "as_float" : "as_bool", first.value()}, user);
    }
    if (arg.kind == "as_tensors" || arg.kind == "as_optional_tensors") {
      if (!v.is_array()) throw InputError(path_ + ": " + user + " has a tensor list that is not an array");
      std::vector<ir::ValueId> items;
      for (const auto& item : v) {
        if (arg.kind == "as_tensors") items.push_back(lookup(name_in(item, user), user));
        else items.push_back(argument({"as_optional_tensor", item}, user));
      }
      return list(std::move(items), ir::ValueKind::kOther);
    }
    if (arg.kind == "as_sym_ints") {
      if (!v.is_array()) throw InputError(path_ + ": " + user + " has a symbolic int list that is not an array");
      std::vector<ir::ValueId> items;
      for (const auto& item : v) items.push_back(sym_int(item, user));
      return list(std::move(items), ir::ValueKind::kIntList);
    }
    return constant(arg, user);
  }

  std::vector<ir::ValueId> outputs_of(const pt2::Node& node, const std::string& user) {
    std::vector<ir::ValueId> outputs;
    for (const auto& out : node.outputs) {
      const auto& v = out.value;
      if (out.kind == "as_tensor") {
        outputs.push_back(tensor_value(name_in(v, user), name_in(v, user), user + " output"));
      } else if (out.kind == "as_tensors" && v.is_array()) {
        for (const auto& item : v) outputs.push_back(tensor_value(name_in(item, user), name_in(item, user), user + " output"));
      } else if ((out.kind == "as_sym_int" || out.kind == "as_sym_float" || out.kind == "as_sym_bool") && v.is_object() &&
                 v.contains("as_name") && v["as_name"].is_string()) {
        outputs.push_back(symbolic_output(v["as_name"].get<std::string>(), out.kind));
      } else if (out.kind == "as_none" || (out.kind == "as_optional_tensor" && v.is_object() && v.contains("as_none"))) {
        continue;  // an output that holds nothing (a backward-only result)
      } else if (out.kind == "as_optional_tensor" && v.is_object() && v.contains("as_tensor")) {
        auto name = name_in(v["as_tensor"], user);
        outputs.push_back(tensor_value(name, name, user + " output"));
      } else {
        throw InputError(path_ + ": " + user + " has an output of kind '" + out.kind + "', which this build does not read");
      }
    }
    return outputs;
  }

  ir::ValueId symbolic_output(const std::string& name, const std::string& kind) {
    ir::Value value;
    value.name = name;
    value.kind = kind == "as_sym_int" ? ir::ValueKind::kInt : kind == "as_sym_float" ? ir::ValueKind::kFloat : ir::ValueKind::kBool;
    if (auto it = program_.sym_ints.find(name); it != program_.sym_ints.end() && value.kind == ir::ValueKind::kInt) {
      auto n = dim_value(it->second, symbols_.at_batch);
      if (n >= 0) value.literal = n;
    }
    return define(name, std::move(value));
  }

  void add_node(std::int64_t index) {
    const auto& node = program_.nodes[static_cast<std::size_t>(index)];
    std::string user = "node " + std::to_string(index) + " (" + node.target + ")";
    std::vector<ir::ValueId> inputs;
    auto first = static_cast<ir::OpId>(graph_.ops().size());
    for (const auto& input : node.inputs) inputs.push_back(argument(input.arg, user + " argument '" + input.name + "'"));
    auto outputs = outputs_of(node, user);
    auto kind = op_kind(node.target);
    auto op = graph_.add_op(kind, inputs, outputs, index);
    // Its module, and that of the constants and lists its arguments became.
    for (auto id = first; id <= op; ++id) graph_.set_module_path(id, node.module);
    record_writes(op, kind);
  }

  // In-place ops (add_, copy_, fill_) write their first argument, batch norm in training its
  // running statistics; a write through a view writes what it views too.
  void record_writes(ir::OpId op, const std::string& kind) {
    std::vector<ir::ValueId> written;
    const auto& inputs = graph_.op(op).inputs;
    bool in_place = kind.size() > 2 && kind.back() == '_' && kind[kind.size() - 2] != '_';
    if (in_place && !inputs.empty()) written.push_back(inputs[0]);
    if ((kind == "aten::batch_norm" || kind == "aten::native_batch_norm" || kind == "aten::_native_batch_norm_legit") &&
        inputs.size() > 5) {
      const auto* training = std::get_if<bool>(&graph_.value(inputs[5]).literal);
      if (training && *training) written.insert(written.end(), {inputs[3], inputs[4]});
    }
    for (auto value : written) {
      for (auto v = value; v != ir::kNoId && graph_.value(v).is_tensor();) {
        graph_.add_write(op, v);
        auto producer = graph_.value(v).producer;
        v = producer != ir::kNoId && cost::is_view(graph_.op(producer)) ? graph_.op(producer).inputs.front() : ir::kNoId;
      }
    }
  }

  void add_outputs() {
    for (const auto& spec : program_.output_specs) {
      if (spec.kind == pt2::OutputKind::kBufferMutation) {
        add_buffer_update(spec);
        continue;
      }
      if (spec.arg.kind != "as_tensor")
        throw InputError(path_ + ": the model returns a '" + spec.arg.kind + "', not a tensor (tensor outputs only)");
      graph_.add_model_output(lookup(name_in(spec.arg.value, "an output"), "an output"));
    }
    if (graph_.model_outputs().empty()) throw InputError(path_ + ": the model returns no tensor");
  }

  // A functional export returns a buffer's new value; the stage copies it back in place.
  void add_buffer_update(const pt2::OutputSpec& spec) {
    auto value = lookup(name_in(spec.arg.value, "a buffer update"), "a buffer update");
    auto buffer = std::find_if(program_.input_specs.begin(), program_.input_specs.end(),
                               [&](const auto& s) { return s.kind == pt2::InputKind::kBuffer && s.target == spec.target; });
    if (buffer == program_.input_specs.end()) throw InputError(path_ + ": an update of buffer '" + spec.target + "', which is no input");
    auto buffer_id = lookup(buffer->arg, "a buffer update");
    auto index = static_cast<std::int64_t>(program_.nodes.size() + source_.mutations.size());
    source_.mutations.emplace_back(name_in(spec.arg.value, "a buffer update"), buffer->arg);
    auto op = graph_.add_op("aten::copy_", {buffer_id, value}, {}, index);
    graph_.add_write(op, buffer_id);
  }

  const std::string& path_;
  const ExportedProgram& program_;
  Pt2ModelSource& source_;
  Symbols symbols_;
  ir::Graph graph_;
  ir::ShapesAtDoubleBatch shapes_at_double_batch_;
};

Pt2Archive open_archive(const std::string& path) {
  auto zip = ZipArchive::open(path);
  if (!zip) throw InputError(path + ": not a zip archive, so no .pt2");
  auto archive = Pt2Archive::recognize(*zip);
  if (!archive) {
    auto other = Pt2Archive::describe_other(*zip);
    throw InputError(path + ": " + (other.empty() ? "not a torch.export archive" : other));
  }
  return std::move(*archive);
}

}  // namespace

std::vector<Pt2StateDictName> pt2_state_dict_names(const std::string& path) {
  auto archive = open_archive(path);
  auto program = pt2::parse_exported_program(archive.program_text(), archive.program_where());
  std::vector<std::string> names;
  std::map<std::string, int> placeholders;  // per name: 2 or more for a tied weight
  std::set<std::string> not_state;          // constants and non-persistent buffers
  for (const auto& spec : program.input_specs) {
    bool in_state_dict = spec.kind == pt2::InputKind::kParameter || (spec.kind == pt2::InputKind::kBuffer && spec.persistent);
    if (!in_state_dict) {
      not_state.insert(spec.target);
      continue;
    }
    if (++placeholders[spec.target] == 1) names.push_back(spec.target);
  }
  std::vector<Pt2StateDictName> entries;
  for (const auto& name : names) entries.push_back({name, name});
  // The archive's other state_dict names: a tied weight's, whose data is that of a name the
  // program gives several placeholders. Read only where there is such a name.
  if (std::none_of(placeholders.begin(), placeholders.end(), [](const auto& p) { return p.second > 1; })) return entries;
  const auto& stored = archive.tensors();
  auto same = [](const StoredTensor& a, const StoredTensor& b) { return a.dtype == b.dtype && a.dims == b.dims && a.data == b.data; };
  for (const auto& [name, tensor] : stored) {
    if (placeholders.count(name) || not_state.count(name)) continue;
    auto source = std::find_if(names.begin(), names.end(), [&](const auto& candidate) {
      auto it = stored.find(candidate);
      return placeholders[candidate] > 1 && it != stored.end() && same(it->second, tensor);
    });
    if (source == names.end()) continue;  // a tensor no placeholder reads: not the module's
    auto at = std::find_if(entries.begin(), entries.end(), [&](const auto& e) { return e.name == *source; });
    entries.insert(at + 1, {name, *source});
  }
  return entries;
}

Model load_pt2(const std::string& path, const LoadOptions& options) {
  auto archive = open_archive(path);
  auto program = pt2::parse_exported_program(archive.program_text(), archive.program_where());
  auto source = std::make_shared<Pt2ModelSource>(std::move(archive), std::move(program));
  Model model = Pt2Lowering(path, source->program(), *source).lower(options);
  model.source = source;
  return model;
}

}  // namespace rannc
