// torch.export's ExportedProgram as its JSON serialization describes it (the schema of
// torch/_export/serde/schema.py, major version 8): the graph's nodes with their ATen targets and
// arguments, every tensor's dtype and sizes (symbolic where dynamic_shapes made them so), and the
// graph signature that says which inputs are parameters, buffers, constants or the user's.
// Read from the JSON alone: no weights, no Python. Pure C++.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ir/dtype.h"

namespace rannc::pt2 {

// The schema major version this reader knows; a newer major is refused, not guessed at.
inline constexpr int kSchemaMajor = 8;

// One dim of a tensor: a number, or a sympy expression (srepr text, "Symbol('s0', ...)") with
// the value it had when the model was exported.
struct Dim {
  std::optional<std::int64_t> value;
  std::string expr;
  std::int64_t hint = 0;
};

struct TensorMeta {
  ir::DType dtype = ir::DType::kUnknown;
  int dtype_code = 0;  // the schema's ScalarType number, for messages
  std::vector<Dim> sizes;
  bool requires_grad = false;
};

// An argument as serialized: {"as_tensor": {...}}, {"as_int": 3}, ... The kind is the key.
struct Argument {
  std::string kind;      // "as_tensor", "as_ints", "as_none", ...
  nlohmann::json value;  // what the key holds
};

struct NamedArgument {
  std::string name;  // the schema's argument name ("self", "weight", "dim")
  Argument arg;
  bool keyword = false;  // the schema's kind says keyword-only (schema 8.3 and later)
};

struct Node {
  std::string target;  // "torch.ops.aten.linear.default", "_operator.mul"
  std::vector<NamedArgument> inputs;
  std::vector<Argument> outputs;
  std::string location;  // "model.py:12", the last frame of the stack trace; may be empty
  std::string module;    // "layers.0.fc1", the innermost of its nn_module_stack; may be empty
};

enum class InputKind { kUserInput, kParameter, kBuffer, kTensorConstant, kConstantInput, kOther };

struct InputSpec {
  InputKind kind = InputKind::kOther;
  std::string kind_name;  // the schema's key, for messages ("custom_obj", "token")
  std::string arg;        // the placeholder's name in the graph
  std::string target;     // the parameter's, buffer's or constant's name in the module; "" for user inputs
  bool persistent = true; // a buffer in the state_dict (a non-persistent one is not)
  Argument constant;      // a constant_input's value
};

enum class OutputKind { kUserOutput, kBufferMutation, kOther };

struct OutputSpec {
  OutputKind kind = OutputKind::kOther;
  std::string kind_name;
  Argument arg;
  std::string target;  // the mutated buffer
};

struct ExportedProgram {
  int schema_major = 0, schema_minor = 0;
  std::string torch_version;
  std::vector<std::string> verifiers;  // "TRAINING" for torch.export.export's training IR
  std::vector<std::string> graph_inputs;  // placeholder names, in order
  std::vector<Node> nodes;
  std::map<std::string, TensorMeta> tensors;
  std::map<std::string, Dim> sym_ints;
  std::vector<InputSpec> input_specs;
  std::vector<OutputSpec> output_specs;
};

// Parses the program's JSON text; InputError "WHERE: ..." naming the first field that does not
// fit the schema. `where` is the file and entry ("model.pt2: models/model.json").
ExportedProgram parse_exported_program(const std::string& text, const std::string& where);

// A TensorMeta object of the schema (a weights config holds them too).
TensorMeta parse_tensor_meta(const nlohmann::json& value, const std::string& where);

// The dtype of the schema's ScalarType number (which is not c10's numbering); nullopt for a
// type the IR does not have.
std::optional<ir::DType> dtype_from_schema(int code);
// c10::ScalarType's number of the schema's ScalarType number, as TorchScript takes a dtype.
std::optional<int> c10_scalar_type(int code);

// The value of a sympy expression (srepr form: Symbol('s0', integer=True), Integer(2), Add,
// Mul, FloorDiv, ...) with its symbols bound; nullopt for a form it does not know or an
// unbound symbol or overflow. Never recurses deeper than a fixed depth.
std::optional<std::int64_t> evaluate_expr(const std::string& expr, const std::map<std::string, std::int64_t>& symbols);
// The symbols an expression names, in order of first appearance.
std::vector<std::string> expr_symbols(const std::string& expr);
// The symbol an expression is, when it is one and nothing else ("s0", "Symbol('s0',
// positive=True, integer=True)"); nullopt for "2*s0", "s0 + 1" or a number.
std::optional<std::string> bare_symbol(const std::string& expr);

}  // namespace rannc::pt2
