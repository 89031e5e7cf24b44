// The intermediate representation: a DAG of ops and the values they read and write.
//
// Both frontends (TorchScript and ONNX) lower a model into this graph; the cost model, the
// partitioner and the emitters read it. Values and ops are stored in vectors and referred to by
// index, so the graph is cheap to copy and its iteration order is deterministic.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "ir/dtype.h"

namespace rannc::ir {

using ValueId = std::int32_t;
using OpId = std::int32_t;
inline constexpr std::int32_t kNoId = -1;

// A small non-tensor payload: a constant, a recorded int/list (e.g. the result of aten::size),
// or an op attribute. monostate means "none or not known".
using Literal = std::variant<std::monostate, std::int64_t, double, bool, std::string,
                             std::vector<std::int64_t>, std::vector<double>>;

// The element count of a shape; nullopt when a dim is negative (unknown) or the product
// overflows int64.
std::optional<std::int64_t> checked_numel(const std::vector<std::int64_t>& shape);

struct TensorType {
  std::vector<std::int64_t> shape;  // a dim of -1 is not known
  DType dtype = DType::kUnknown;
  bool rank_known = true;
  int batch_dim = -1;  // the dim that scales with the batch size, -1 if none

  bool shape_known() const;
  // Element count and bytes; 0 when the shape is not fully known (or does not fit int64).
  std::int64_t numel() const;
  std::int64_t bytes() const;
};

enum class ValueKind : std::uint8_t { kTensor, kInt, kFloat, kBool, kIntList, kFloatList, kString, kNone, kOther };

enum class ValueRole : std::uint8_t {
  kIntermediate,  // produced by an op
  kModelInput,    // a batch input of the model
  kParam,         // a trainable parameter
  kBuffer,        // a non-trainable tensor of the model (BatchNorm statistics, masks)
};

struct Value {
  ValueId id = kNoId;
  std::string name;
  ValueKind kind = ValueKind::kTensor;
  TensorType type;  // meaningful for kTensor
  Literal literal;  // meaningful for scalars and lists whose value is known
  ValueRole role = ValueRole::kIntermediate;
  bool model_output = false;
  bool batch_dependent = false;  // depends on the model inputs (set by propagate_batch_dependence)
  // Computed from the contents of the model inputs, not only from their shapes (x.size(0),
  // masks built from a length, zeros_like): set by propagate_batch_dependence. What depends on
  // the inputs' shapes alone is recomputed wherever it is needed instead of being sent.
  bool data_dependent = false;
  OpId producer = kNoId;
  std::vector<OpId> consumers;  // one entry per use, in op order
  // Ops that change its contents in place after its producer made it, directly or through a
  // view of it (TorchScript's fill_ on a slice of a mask), in op order. Its readers see their
  // writes, so whatever computes the value must run them too.
  std::vector<OpId> writers;

  bool is_tensor() const { return kind == ValueKind::kTensor; }
  bool is_weight() const { return role == ValueRole::kParam || role == ValueRole::kBuffer; }
};

struct Op {
  OpId id = kNoId;
  std::string kind;  // "aten::linear", "prim::ListConstruct", "onnx::Gemm", ...
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::vector<ValueId> writes;  // values it changes in place (each lists it in its writers)
  std::map<std::string, Literal> attrs;
  // Index of the frontend's node this op came from, so emit can rebuild it; -1 if none.
  std::int64_t source_node = -1;
  // The model's module the op belongs to ("encoder.layers.3.self_attn"), as an index into
  // Graph::module_paths(); kNoId when the frontend does not know it. Graph::module_path reads it.
  std::int32_t module = kNoId;
};

class Graph {
 public:
  // Adds a value and returns its id (the value's own id field is overwritten).
  ValueId add_value(Value value);
  // Adds an op; links producers and consumers of its inputs and outputs.
  OpId add_op(std::string kind, std::vector<ValueId> inputs, std::vector<ValueId> outputs,
              std::int64_t source_node = -1);

  void add_model_output(ValueId id);
  // Records that `op` changes `value` in place (Value::writers, Op::writes).
  void add_write(OpId op, ValueId value);

  const Value& value(ValueId id) const { return values_.at(static_cast<std::size_t>(id)); }
  Value& value(ValueId id) { return values_.at(static_cast<std::size_t>(id)); }
  const Op& op(OpId id) const { return ops_.at(static_cast<std::size_t>(id)); }
  Op& op(OpId id) { return ops_.at(static_cast<std::size_t>(id)); }

  const std::vector<Value>& values() const { return values_; }
  const std::vector<Op>& ops() const { return ops_; }
  const std::vector<ValueId>& model_outputs() const { return model_outputs_; }
  // Values of the given role, in id order.
  std::vector<ValueId> values_with_role(ValueRole role) const;

  // Module paths, each stored once however many ops share it. set_module_path("") forgets the
  // op's module; module_path is "" for an op without one.
  void set_module_path(OpId op, std::string_view path);
  const std::string& module_path(OpId op) const;
  const std::vector<std::string>& module_paths() const { return module_paths_; }

  // Ops ordered so that producers come before consumers; ties keep insertion order, so the
  // result is deterministic. Throws InputError on a cycle.
  std::vector<OpId> topological_order() const;
  // The ops `values` are computed from: their producers and writers and, recursively, those of
  // their inputs, not walking past the values in `stop`. Ascending.
  std::vector<OpId> ops_computing(const std::vector<ValueId>& values, const std::set<ValueId>& stop = {}) const;

  // Checks ids, producer/consumer links and acyclicity; throws InputError describing the first
  // inconsistency. Frontends call it before handing the graph on.
  void validate() const;

 private:
  std::vector<Value> values_;
  std::vector<Op> ops_;
  std::vector<ValueId> model_outputs_;
  std::vector<std::string> module_paths_;
  std::unordered_map<std::string, std::int32_t> module_ids_;
};

std::string_view value_kind_name(ValueKind kind);
std::string_view value_role_name(ValueRole role);

}  // namespace rannc::ir
