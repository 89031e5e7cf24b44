#include "frontends/pt2/exported_program.h"

#include <algorithm>
#include <cctype>
#include <limits>

#include "ir/module_path.h"
#include "support/error.h"
#include "support/input_file.h"

namespace rannc::pt2 {
namespace {

using nlohmann::json;

// --- Reading the JSON without trusting it: each accessor names the field that does not fit. ---

class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& field, const std::string& why) const {
    throw InputError(where_ + ": " + field + " " + why + " (not an ExportedProgram of schema " +
                     std::to_string(kSchemaMajor) + ".x)");
  }

  const json& member(const json& object, const std::string& key, const std::string& field) const {
    if (!object.is_object()) fail(field, "is not an object");
    auto it = object.find(key);
    if (it == object.end()) fail(field + "." + key, "is missing");
    return *it;
  }
  const json* optional_member(const json& object, const std::string& key) const {
    if (!object.is_object()) return nullptr;
    auto it = object.find(key);
    return it == object.end() || it->is_null() ? nullptr : &*it;
  }
  const json& array(const json& object, const std::string& key, const std::string& field) const {
    const auto& value = member(object, key, field);
    if (!value.is_array()) fail(field + "." + key, "is not an array");
    return value;
  }
  std::string string(const json& object, const std::string& key, const std::string& field) const {
    const auto& value = member(object, key, field);
    if (!value.is_string()) fail(field + "." + key, "is not a string");
    return value.get<std::string>();
  }
  std::int64_t integer(const json& value, const std::string& field) const {
    if (!value.is_number_integer()) fail(field, "is not an integer: " + json_excerpt(value));
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(field, "is beyond the 64-bit range: " + json_excerpt(value));
    return value.get<std::int64_t>();
  }

  // A union of the schema ({"as_int": 3}): its one set key and what it holds.
  std::pair<std::string, const json*> one_of(const json& value, const std::string& field) const {
    if (!value.is_object() || value.empty()) fail(field, "is not a one-key object: " + json_excerpt(value));
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!it->is_null()) return {it.key(), &*it};
    }
    return {value.begin().key(), &*value.begin()};
  }

  Argument argument(const json& value, const std::string& field) const {
    auto [kind, held] = one_of(value, field);
    return {kind, *held};
  }

  Dim dim(const json& value, const std::string& field) const {
    auto [kind, held] = one_of(value, field);
    Dim dim;
    if (kind == "as_int") {
      dim.value = integer(*held, field);
      if (*dim.value < 0) fail(field, "is a negative size");
    } else if (kind == "as_expr") {
      dim.expr = string(*held, "expr_str", field);
      if (const auto* hint = optional_member(*held, "hint")) {
        auto [hint_kind, hint_value] = one_of(*hint, field + ".hint");
        if (hint_kind == "as_int") dim.hint = integer(*hint_value, field + ".hint");
      }
    } else {
      fail(field, "is a '" + kind + "', not a size");
    }
    return dim;
  }

 private:
  std::string where_;
};

TensorMeta tensor_meta(const Reader& r, const json& value, const std::string& field) {
  TensorMeta meta;
  meta.dtype_code = static_cast<int>(r.integer(r.member(value, "dtype", field), field + ".dtype"));
  meta.dtype = dtype_from_schema(meta.dtype_code).value_or(ir::DType::kUnknown);
  const auto& sizes = r.array(value, "sizes", field);
  for (std::size_t i = 0; i < sizes.size(); ++i) meta.sizes.push_back(r.dim(sizes[i], field + ".sizes[" + std::to_string(i) + "]"));
  if (const auto* grad = r.optional_member(value, "requires_grad")) meta.requires_grad = grad->is_boolean() && grad->get<bool>();
  return meta;
}

// "  File "model.py", line 12, in forward\n    x = ..." -> "model.py:12", the innermost frame.
std::string location_of(const json& metadata) {
  auto it = metadata.is_object() ? metadata.find("stack_trace") : metadata.end();
  if (it == metadata.end() || !it->is_string()) return "";
  const auto& trace = it->get_ref<const std::string&>();
  auto file = trace.rfind("File \"");
  if (file == std::string::npos) return "";
  auto end = trace.find('"', file + 6);
  auto line = trace.find("line ", end);
  if (end == std::string::npos || line == std::string::npos) return "";
  auto digits = trace.find_first_not_of("0123456789", line + 5);
  return trace.substr(file + 6, end - file - 6) + ":" + trace.substr(line + 5, digits - line - 5);
}

Node node(const Reader& r, const json& value, const std::string& field) {
  Node node;
  node.target = r.string(value, "target", field);
  const auto& inputs = r.array(value, "inputs", field);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto at = field + ".inputs[" + std::to_string(i) + "]";
    NamedArgument named{r.string(inputs[i], "name", at), r.argument(r.member(inputs[i], "arg", at), at + ".arg"), false};
    // ArgumentKind: 1 positional, 2 keyword-only (absent before schema 8.3).
    if (const auto* kind = r.optional_member(inputs[i], "kind")) named.keyword = kind->is_number_integer() && *kind == 2;
    node.inputs.push_back(std::move(named));
  }
  const auto& outputs = r.array(value, "outputs", field);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    node.outputs.push_back(r.argument(outputs[i], field + ".outputs[" + std::to_string(i) + "]"));
  }
  if (const auto* metadata = r.optional_member(value, "metadata")) {
    node.location = location_of(*metadata);
    auto stack = metadata->is_object() ? metadata->find("nn_module_stack") : metadata->end();
    if (stack != metadata->end() && stack->is_string()) node.module = ir::module_path_from_nn_module_stack(stack->get_ref<const std::string&>());
  }
  return node;
}

std::string tensor_name(const Reader& r, const json& arg, const std::string& field) {
  return r.string(arg, "name", field);
}

InputSpec input_spec(const Reader& r, const json& value, const std::string& field) {
  auto [kind, held] = r.one_of(value, field);
  InputSpec spec;
  spec.kind_name = kind;
  const auto& body = *held;
  if (kind == "user_input") {
    spec.kind = InputKind::kUserInput;
    auto arg = r.argument(r.member(body, "arg", field), field + ".arg");
    if (arg.kind == "as_tensor") spec.arg = tensor_name(r, arg.value, field + ".arg");
    else spec.kind_name = "user_input " + arg.kind;  // a non-tensor user input: refused by the frontend
    if (arg.kind != "as_tensor") spec.kind = InputKind::kOther;
  } else if (kind == "parameter") {
    spec.kind = InputKind::kParameter;
    spec.arg = tensor_name(r, r.member(body, "arg", field), field + ".arg");
    spec.target = r.string(body, "parameter_name", field);
  } else if (kind == "buffer") {
    spec.kind = InputKind::kBuffer;
    spec.arg = tensor_name(r, r.member(body, "arg", field), field + ".arg");
    spec.target = r.string(body, "buffer_name", field);
    if (const auto* persistent = r.optional_member(body, "persistent")) spec.persistent = !persistent->is_boolean() || persistent->get<bool>();
  } else if (kind == "tensor_constant") {
    spec.kind = InputKind::kTensorConstant;
    spec.arg = tensor_name(r, r.member(body, "arg", field), field + ".arg");
    spec.target = r.string(body, "tensor_constant_name", field);
  } else if (kind == "constant_input") {
    spec.kind = InputKind::kConstantInput;
    spec.arg = r.string(body, "name", field);
    spec.constant = r.argument(r.member(body, "value", field), field + ".value");
  }
  return spec;
}

OutputSpec output_spec(const Reader& r, const json& value, const std::string& field) {
  auto [kind, held] = r.one_of(value, field);
  OutputSpec spec;
  spec.kind_name = kind;
  if (kind == "user_output") {
    spec.kind = OutputKind::kUserOutput;
    spec.arg = r.argument(r.member(*held, "arg", field), field + ".arg");
  } else if (kind == "buffer_mutation") {
    spec.kind = OutputKind::kBufferMutation;
    spec.arg = {"as_tensor", r.member(*held, "arg", field)};
    spec.target = r.string(*held, "buffer_name", field);
  }
  return spec;
}

void read_graph(const Reader& r, const json& graph, ExportedProgram& program) {
  const auto& inputs = r.array(graph, "inputs", "graph");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto field = "graph.inputs[" + std::to_string(i) + "]";
    auto arg = r.argument(inputs[i], field);
    program.graph_inputs.push_back(arg.kind == "as_tensor" ? tensor_name(r, arg.value, field) : std::string());
  }
  const auto& nodes = r.array(graph, "nodes", "graph");
  for (std::size_t i = 0; i < nodes.size(); ++i) program.nodes.push_back(node(r, nodes[i], "graph.nodes[" + std::to_string(i) + "]"));
  const auto& tensors = r.member(graph, "tensor_values", "graph");
  if (!tensors.is_object()) r.fail("graph.tensor_values", "is not an object");
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    program.tensors[it.key()] = tensor_meta(r, *it, "graph.tensor_values." + it.key());
  }
  if (const auto* sym_ints = r.optional_member(graph, "sym_int_values")) {
    for (auto it = sym_ints->begin(); sym_ints->is_object() && it != sym_ints->end(); ++it) {
      program.sym_ints[it.key()] = r.dim(*it, "graph.sym_int_values." + it.key());
    }
  }
}

void read_signature(const Reader& r, const json& signature, ExportedProgram& program) {
  const auto& inputs = r.array(signature, "input_specs", "signature");
  for (std::size_t i = 0; i < inputs.size(); ++i)
    program.input_specs.push_back(input_spec(r, inputs[i], "signature.input_specs[" + std::to_string(i) + "]"));
  const auto& outputs = r.array(signature, "output_specs", "signature");
  for (std::size_t i = 0; i < outputs.size(); ++i)
    program.output_specs.push_back(output_spec(r, outputs[i], "signature.output_specs[" + std::to_string(i) + "]"));
}

// --- sympy expressions: a small recursive-descent evaluator over str and srepr forms. ---

class ExprEvaluator {
 public:
  ExprEvaluator(const std::string& text, const std::map<std::string, std::int64_t>* symbols) : s_(text), symbols_(symbols) {}

  std::optional<std::int64_t> run() {
    auto value = sum(0);
    skip_space();
    if (at_ != s_.size()) return std::nullopt;
    return value;
  }
  // The symbol when the whole expression is one ("s0", "Symbol('s0', integer=True)").
  std::optional<std::string> bare() {
    auto name = identifier();
    if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return std::nullopt;
    if (eat("(")) {
      if (name != "Symbol") return std::nullopt;
      auto text = quoted();
      if (!text || !skip_arguments(0)) return std::nullopt;
      name = *text;
    }
    skip_space();
    if (at_ != s_.size()) return std::nullopt;
    return name;
  }

 private:
  // In calls of sum(): each level of parentheses or of a call takes 4, so 128 levels (sympy's
  // expressions of real models take a few), and a few hundred small frames of stack.
  static constexpr int kMaxDepth = 512;
  using Result = std::optional<std::int64_t>;

  void skip_space() {
    while (at_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[at_]))) ++at_;
  }
  bool eat(const char* token) {
    skip_space();
    std::string_view t(token);
    if (s_.compare(at_, t.size(), t) != 0) return false;
    at_ += t.size();
    return true;
  }
  static Result checked(__int128 v) {
    if (v > std::numeric_limits<std::int64_t>::max() || v < std::numeric_limits<std::int64_t>::min()) return std::nullopt;
    return static_cast<std::int64_t>(v);
  }
  // b != 0, and not INT64_MIN / -1 (which traps on x86): the callers check.
  static std::int64_t floor_div(std::int64_t a, std::int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
  static bool overflows_division(std::int64_t a, std::int64_t b) {
    return a == std::numeric_limits<std::int64_t>::min() && b == -1;
  }

  Result sum(int depth) {
    if (depth > kMaxDepth) return std::nullopt;
    Result left = product(depth + 1);
    while (left) {
      if (eat("+")) left = combine(left, product(depth + 1), '+');
      else if (peek_minus()) left = combine(left, product(depth + 1), '-');
      else break;
    }
    return left;
  }
  bool peek_minus() { return eat("-"); }
  Result product(int depth) {
    Result left = unary(depth + 1);
    while (left) {
      if (eat("**")) left = combine(left, unary(depth + 1), 'p');
      else if (eat("//")) left = combine(left, unary(depth + 1), '/');
      else if (eat("*")) left = combine(left, unary(depth + 1), '*');
      else if (eat("%")) left = combine(left, unary(depth + 1), '%');
      else break;
    }
    return left;
  }
  Result unary(int depth) {
    if (depth > kMaxDepth) return std::nullopt;
    if (eat("-")) return combine(Result(0), unary(depth + 1), '-');
    return primary(depth + 1);
  }
  static Result combine(Result a, Result b, char op) {
    if (!a || !b) return std::nullopt;
    __int128 x = *a, y = *b;
    switch (op) {
      case '+': return checked(x + y);
      case '-': return checked(x - y);
      case '*': return checked(x * y);
      case '/': return y == 0 || overflows_division(*a, *b) ? Result() : Result(floor_div(*a, *b));
      case '%':
        if (y == 0) return Result();
        if (overflows_division(*a, *b)) return Result(0);
        return Result(*a - floor_div(*a, *b) * *b);
      case 'p': {
        if (y < 0 || y > 64) return std::nullopt;
        __int128 r = 1;
        for (__int128 i = 0; i < y; ++i) {
          r *= x;
          if (!checked(r)) return std::nullopt;
        }
        return checked(r);
      }
    }
    return std::nullopt;
  }
  Result primary(int depth) {
    skip_space();
    if (at_ >= s_.size()) return std::nullopt;
    if (eat("(")) {
      auto value = sum(depth + 1);
      return eat(")") ? value : Result();
    }
    if (std::isdigit(static_cast<unsigned char>(s_[at_]))) return number();
    std::string name = identifier();
    if (name.empty()) return std::nullopt;
    if (!eat("(")) return symbol(name);
    return call(name, depth);
  }
  Result number() {
    std::int64_t v = 0;
    while (at_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[at_]))) {
      auto next = checked(static_cast<__int128>(v) * 10 + (s_[at_++] - '0'));
      if (!next) return std::nullopt;
      v = *next;
    }
    return v;
  }
  std::string identifier() {
    skip_space();
    std::size_t start = at_;
    while (at_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[at_])) || s_[at_] == '_')) ++at_;
    return s_.substr(start, at_ - start);
  }
  std::optional<std::string> quoted() {
    skip_space();
    if (at_ >= s_.size() || (s_[at_] != '\'' && s_[at_] != '"')) return std::nullopt;
    char quote = s_[at_++];
    auto end = s_.find(quote, at_);
    if (end == std::string::npos) return std::nullopt;
    std::string text = s_.substr(at_, end - at_);
    at_ = end + 1;
    return text;
  }
  Result symbol(const std::string& name) {
    if (!symbols_) return std::nullopt;
    auto it = symbols_->find(name);
    return it == symbols_->end() ? Result() : Result(it->second);
  }
  // srepr calls: Symbol('s0', integer=True), Integer(2), Add(a, b), FloorDiv(a, b), Max(a, b)...
  Result call(const std::string& name, int depth) {
    if (name == "Symbol") {
      auto text = quoted();
      if (!skip_arguments(depth)) return std::nullopt;
      return text ? symbol(*text) : Result();
    }
    std::vector<Result> args;
    while (true) {
      if (eat(")")) break;
      std::size_t before = at_;
      std::string key = identifier();
      if (!key.empty() && eat("=")) {
        identifier();  // a keyword flag (positive=True): no value of ours
      } else {
        at_ = before;
        args.push_back(sum(depth + 1));
      }
      if (!eat(",") && !eat(")")) return std::nullopt;
      if (s_[at_ - 1] == ')') break;
    }
    return apply(name, args);
  }
  // The rest of Symbol(...)'s arguments (its assumptions: positive=True, integer=True) to its
  // ')'; false, having stopped, at anything else (each round must consume something).
  bool skip_arguments(int depth) {
    while (!eat(")")) {
      std::size_t before = at_;
      if (!eat(",")) {
        std::string key = identifier();
        if (eat("=")) identifier();
        else if (key.empty()) sum(depth + 1);
      }
      if (at_ == before) return false;
    }
    return true;
  }
  static Result apply(const std::string& name, const std::vector<Result>& args) {
    for (const auto& a : args)
      if (!a) return std::nullopt;
    auto fold = [&](char op) {
      if (args.empty()) return Result();
      Result r = args[0];
      for (std::size_t i = 1; i < args.size(); ++i) r = combine(r, args[i], op);
      return r;
    };
    if (name == "Integer" && args.size() == 1) return args[0];
    if (name == "Add") return fold('+');
    if (name == "Mul") return fold('*');
    if (name == "Pow" && args.size() == 2) return combine(args[0], args[1], 'p');
    if ((name == "FloorDiv" || name == "floor") && args.size() == 2) return combine(args[0], args[1], '/');
    if ((name == "Mod" || name == "PythonMod") && args.size() == 2) return combine(args[0], args[1], '%');
    if ((name == "CleanDiv" || name == "IntTrueDiv" || name == "ExactDiv") && args.size() == 2) {
      if (*args[1] == 0 || overflows_division(*args[0], *args[1]) || *args[0] % *args[1] != 0) return std::nullopt;
      return *args[0] / *args[1];
    }
    if (name == "CeilDiv" && args.size() == 2)
      return combine(Result(0), combine(combine(Result(0), args[0], '-'), args[1], '/'), '-');
    if ((name == "Max" || name == "Min") && !args.empty()) {
      std::int64_t r = *args[0];
      for (const auto& a : args) r = name == "Max" ? std::max(r, *a) : std::min(r, *a);
      return r;
    }
    // torch's integer-valued wrappers, identities on integers, and |x|.
    if ((name == "FloorToInt" || name == "CeilToInt" || name == "TruncToInt" || name == "RoundToInt" || name == "ceiling") &&
        args.size() == 1)
      return args[0];
    if (name == "Abs" && args.size() == 1) return *args[0] < 0 ? combine(Result(0), args[0], '-') : args[0];
    if (name == "One" && args.empty()) return 1;
    if (name == "Zero" && args.empty()) return 0;
    if (name == "NegativeOne" && args.empty()) return -1;
    return std::nullopt;
  }

  const std::string& s_;
  const std::map<std::string, std::int64_t>* symbols_;
  std::size_t at_ = 0;
};

// Python's json writes a float argument that is infinite or NaN (masked_fill(mask, -inf), as
// every causal mask does) as the bare tokens -Infinity, Infinity and NaN, which are no JSON:
// outside strings they become the strings "-Infinity", "Infinity" and "NaN", which the
// frontend reads as those floats.
std::string quote_special_floats(const std::string& text) {
  if (text.find("Infinity") == std::string::npos && text.find("NaN") == std::string::npos) return text;
  std::string out;
  out.reserve(text.size() + 64);
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool matched = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      std::string_view t(token);
      if (text.compare(i, t.size(), t) == 0) {
        out += '"';
        out += t;
        out += '"';
        i += t.size() - 1;
        matched = true;
        break;
      }
    }
    if (!matched) out += c;
  }
  return out;
}

}  // namespace

ExportedProgram parse_exported_program(const std::string& raw_text, const std::string& where) {
  check_json_depth(raw_text, where);
  const std::string text = quote_special_floats(raw_text);
  json document = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) throw InputError(where + ": the exported program is not valid JSON");
  Reader r(where);
  ExportedProgram program;
  const auto& version = r.member(document, "schema_version", "program");
  // Compared before narrowing: 2^32 + 8 is no 8.
  auto major = r.integer(r.member(version, "major", "schema_version"), "schema_version.major");
  auto minor = r.integer(r.member(version, "minor", "schema_version"), "schema_version.minor");
  if (major != kSchemaMajor || minor < 0 || minor > std::numeric_limits<int>::max()) {
    throw InputError(where + ": ExportedProgram schema version " + std::to_string(major) + "." + std::to_string(minor) +
                     " (this build reads " + std::to_string(kSchemaMajor) + ".x, as written by PyTorch 2.6 to 2.9)");
  }
  program.schema_major = static_cast<int>(major);
  program.schema_minor = static_cast<int>(minor);
  if (const auto* torch_version = r.optional_member(document, "torch_version"); torch_version && torch_version->is_string())
    program.torch_version = torch_version->get<std::string>();
  if (const auto* verifiers = r.optional_member(document, "verifiers"); verifiers && verifiers->is_array())
    for (const auto& v : *verifiers)
      if (v.is_string()) program.verifiers.push_back(v.get<std::string>());
  const auto& module = r.member(document, "graph_module", "program");
  read_graph(r, r.member(module, "graph", "graph_module"), program);
  read_signature(r, r.member(module, "signature", "graph_module"), program);
  return program;
}

TensorMeta parse_tensor_meta(const nlohmann::json& value, const std::string& where) {
  return tensor_meta(Reader(where), value, "tensor_meta");
}

// torch/_export/serde/schema.py ScalarType: 1..12 are c10's 0..11 shifted by one; BFLOAT16 is 13.
std::optional<int> c10_scalar_type(int code) {
  if (code >= 1 && code <= 12) return code - 1;
  if (code == 13) return 15;  // bfloat16
  return std::nullopt;
}

std::optional<ir::DType> dtype_from_schema(int code) {
  using ir::DType;
  switch (code) {
    case 1: return DType::kUInt8;
    case 2: return DType::kInt8;
    case 3: return DType::kInt16;
    case 4: return DType::kInt32;
    case 5: return DType::kInt64;
    case 6: return DType::kFloat16;
    case 7: return DType::kFloat32;
    case 8: return DType::kFloat64;
    case 10: return DType::kComplex64;
    case 11: return DType::kComplex128;
    case 12: return DType::kBool;
    case 13: return DType::kBFloat16;
    default: return std::nullopt;
  }
}

std::optional<std::int64_t> evaluate_expr(const std::string& expr, const std::map<std::string, std::int64_t>& symbols) {
  return ExprEvaluator(expr, &symbols).run();
}

// A scan, not the evaluator: that stops at the first symbol it cannot bind. Every identifier
// is a symbol but for a call's name ("Add(") and keyword arguments ("integer=True"); a srepr
// Symbol's is its quoted first argument.
std::vector<std::string> expr_symbols(const std::string& expr) {
  std::vector<std::string> names;
  auto add = [&](std::string name) {
    if (!name.empty() && std::find(names.begin(), names.end(), name) == names.end()) names.push_back(std::move(name));
  };
  auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  auto skip_space = [&](std::size_t at) {
    while (at < expr.size() && std::isspace(static_cast<unsigned char>(expr[at]))) ++at;
    return at;
  };
  char before = '\0';  // the last character that is no space before the identifier
  for (std::size_t at = 0; at < expr.size();) {
    char c = expr[at];
    if (c == '\'' || c == '"') {  // a string outside Symbol(...): skipped
      auto end = expr.find(c, at + 1);
      at = end == std::string::npos ? expr.size() : end + 1;
      before = c;
      continue;
    }
    if (!is_word(c) || std::isdigit(static_cast<unsigned char>(c))) {
      while (at < expr.size() && std::isdigit(static_cast<unsigned char>(expr[at]))) ++at;  // a number
      if (at < expr.size() && !is_word(expr[at])) {
        if (!std::isspace(static_cast<unsigned char>(expr[at]))) before = expr[at];
        ++at;
      }
      continue;
    }
    std::size_t start = at;
    while (at < expr.size() && is_word(expr[at])) ++at;
    std::string word = expr.substr(start, at - start);
    std::size_t next = skip_space(at);
    char follow = next < expr.size() ? expr[next] : '\0';
    bool keyword = follow == '=' && (next + 1 >= expr.size() || expr[next + 1] != '=');
    if (follow == '(' && word == "Symbol") {
      std::size_t quote = skip_space(next + 1);
      if (quote < expr.size() && (expr[quote] == '\'' || expr[quote] == '"')) {
        auto end = expr.find(expr[quote], quote + 1);
        if (end != std::string::npos) add(expr.substr(quote + 1, end - quote - 1));
        at = end == std::string::npos ? expr.size() : end + 1;
      }
    } else if (follow != '(' && !keyword && before != '=') {
      add(word);
    }
    before = word.back();
  }
  return names;
}

std::optional<std::string> bare_symbol(const std::string& expr) { return ExprEvaluator(expr, nullptr).bare(); }

}  // namespace rannc::pt2
