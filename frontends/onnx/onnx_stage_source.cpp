#include "frontends/onnx/onnx_stage_source.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>

#include "compiler/source_rank_cut.h"
#include "support/error.h"
#include "support/format.h"
#include "support/input_file.h"

// How the generated source is written:
// - Every ONNX value is a Tensor variable, shape values included (Shape gives a CPU int64
//   tensor computed from the input at run time), so the stage works at any batch size.
// - The source is compiled by Module::define, whose resolver knows only `torch` (aten ops):
//   no torch.nn.functional, no torch.jit.annotate, no torch.long. Dtypes are written as
//   ScalarType numbers and int lists from tensors use annotated assignments
//   (`_l0: List[int] = t.tolist()`).
// - Inputs that only steer an op (axes, split sizes, Slice bounds) are read at generation
//   time when they are constants; shape tensors (Reshape/Expand targets) always at run time.
namespace rannc {
namespace {

using onnx::TensorProto;

// ---------------------------------------------------------------------------------------------
// Tensor data and literals
// ---------------------------------------------------------------------------------------------

// c10::ScalarType numbers: the resolver of Module::define has no torch.float32.
int scalar_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::kUInt8: return 0;
    case ir::DType::kInt8: return 1;
    case ir::DType::kInt16: return 2;
    case ir::DType::kInt32: return 3;
    case ir::DType::kInt64: return 4;
    case ir::DType::kFloat16: return 5;
    case ir::DType::kFloat32: return 6;
    case ir::DType::kFloat64: return 7;
    case ir::DType::kComplex64: return 9;
    case ir::DType::kComplex128: return 10;
    case ir::DType::kBool: return 11;
    case ir::DType::kBFloat16: return 15;
    case ir::DType::kUnknown: break;
  }
  throw std::logic_error("internal error: no ScalarType for an unknown dtype");
}

bool is_integral(ir::DType dtype) {
  return dtype == ir::DType::kInt64 || dtype == ir::DType::kInt32 || dtype == ir::DType::kInt16 ||
         dtype == ir::DType::kInt8 || dtype == ir::DType::kUInt8 || dtype == ir::DType::kBool;
}

std::vector<std::int64_t> dims_of(const TensorProto& tensor) { return {tensor.dims().begin(), tensor.dims().end()}; }

std::int64_t numel_of(const TensorProto& tensor) {
  std::int64_t n = 1;
  for (auto d : tensor.dims()) n *= d;
  return n;
}

// Copies `count` values of a typed repeated field, each narrowed to `width` little-endian bytes
// (ONNX stores int8..int32, bool and the 16-bit floats' bits in int32_data).
template <typename Field>
bool copy_field(const Field& field, std::size_t count, std::size_t width, std::string& out) {
  if (static_cast<std::size_t>(field.size()) != count) return false;
  out.assign(count * width, '\0');
  for (std::size_t i = 0; i < count; ++i) {
    auto value = field.Get(static_cast<int>(i));
    std::memcpy(&out[i * width], &value, width);
  }
  return true;
}

std::string external_bytes(const TensorProto& tensor, std::size_t bytes, const std::string& model_path) {
  std::string location;
  std::int64_t offset = 0, length = static_cast<std::int64_t>(bytes);
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location") location = entry.value();
    if (entry.key() == "offset") offset = std::stoll(entry.value());
    if (entry.key() == "length") length = std::stoll(entry.value());
  }
  auto file = std::filesystem::path(model_path).parent_path() / location;
  std::error_code ec;
  if (location.empty() || !std::filesystem::is_regular_file(file, ec)) {
    throw InputError(model_path + ": weights in external data file '" + text_excerpt(location) +
                     "' are not beside the model (weight '" + text_excerpt(tensor.name()) +
                     "'): put it there, or plan with --plan-only");
  }
  std::string data(bytes, '\0');
  std::ifstream in(file, std::ios::binary);
  in.seekg(offset);
  if (length != static_cast<std::int64_t>(bytes) || !in.read(data.data(), static_cast<std::streamsize>(bytes))) {
    throw InputError(model_path + ": external file '" + location + "' does not hold the " + std::to_string(bytes) +
                     " bytes of weight '" + tensor.name() + "'");
  }
  return data;
}

// The elements of a tensor as raw little-endian bytes of its dtype.
std::string tensor_bytes(const TensorProto& tensor, ir::DType dtype, const std::string& model_path) {
  auto numel = static_cast<std::size_t>(numel_of(tensor));
  auto width = static_cast<std::size_t>(ir::dtype_size(dtype));
  if (tensor.data_location() == TensorProto::EXTERNAL) return external_bytes(tensor, numel * width, model_path);
  if (tensor.has_raw_data() || numel == 0) {
    if (tensor.raw_data().size() == numel * width) return tensor.raw_data();
  } else {
    std::string out;
    bool complex = dtype == ir::DType::kComplex64 || dtype == ir::DType::kComplex128;
    std::size_t count = complex ? 2 * numel : numel, part = complex ? width / 2 : width;
    bool ok = false;
    switch (dtype) {
      case ir::DType::kFloat32:
      case ir::DType::kComplex64: ok = copy_field(tensor.float_data(), count, part, out); break;
      case ir::DType::kFloat64:
      case ir::DType::kComplex128: ok = copy_field(tensor.double_data(), count, part, out); break;
      case ir::DType::kInt64: ok = copy_field(tensor.int64_data(), count, part, out); break;
      default: ok = copy_field(tensor.int32_data(), count, part, out); break;
    }
    if (ok) return out;
  }
  throw InputError(model_path + ": tensor '" + tensor.name() + "' does not hold the " + std::to_string(numel) +
                   " elements its dims give");
}

// Element i of raw bytes as a number, for inline literals and constant ints.
double element_as_double(const std::string& bytes, ir::DType dtype, std::size_t i) {
  auto read = [&](auto sample) {
    decltype(sample) value;
    std::memcpy(&value, bytes.data() + i * sizeof(value), sizeof(value));
    return static_cast<double>(value);
  };
  switch (dtype) {
    case ir::DType::kFloat32: return read(float{});
    case ir::DType::kFloat64: return read(double{});
    case ir::DType::kInt32: return read(std::int32_t{});
    case ir::DType::kInt16: return read(std::int16_t{});
    case ir::DType::kInt8: return read(std::int8_t{});
    case ir::DType::kUInt8:
    case ir::DType::kBool: return read(std::uint8_t{});
    default: throw std::logic_error("internal error: no scalar read for this dtype");
  }
}

std::int64_t element_as_int(const std::string& bytes, ir::DType dtype, std::size_t i) {
  if (dtype != ir::DType::kInt64) return static_cast<std::int64_t>(element_as_double(bytes, dtype, i));
  std::int64_t value;
  std::memcpy(&value, bytes.data() + i * sizeof(value), sizeof(value));
  return value;
}

std::string int_literal(std::int64_t v) {
  // -2^63 has no literal: its magnitude does not fit the lexer's int.
  if (v == INT64_MIN) return "(-9223372036854775807 - 1)";
  return std::to_string(v);
}

// The shortest decimal that reads back as the same float (or double): 1e-05 rather than
// 9.99999975e-06, so that attributes stored as float32 give the values torch itself used.
std::string float_literal(double v, bool single = true) {
  if (std::isnan(v)) return "float(\"nan\")";
  if (std::isinf(v)) return v > 0 ? "float(\"inf\")" : "float(\"-inf\")";
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof buffer, "%.*g", precision, v);
    bool same = single ? std::strtof(buffer, nullptr) == static_cast<float>(v) : std::strtod(buffer, nullptr) == v;
    if (same) break;
  }
  std::string text = buffer;
  if (text.find_first_of(".e") == std::string::npos) text += ".0";  // a float, not an int
  return text;
}

std::string int_list_literal(const std::vector<std::int64_t>& values) {
  std::vector<std::string> items;
  for (auto v : values) items.push_back(int_literal(v));
  return "[" + join(items) + "]";
}

// Replaces {0}, {1}, ... in a pattern by the given arguments.
std::string format(const std::string& pattern, const std::vector<std::string>& args) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '{' && i + 2 < pattern.size() && pattern[i + 2] == '}') {
      out += args.at(static_cast<std::size_t>(pattern[i + 1] - '0'));
      i += 2;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// Constant values small enough to write into the source: scalars, and int/bool tensors up to
// this many elements (shape vectors, axes). Larger ones become "c<i>" buffers.
constexpr std::int64_t kInlineInts = 16;
// Int tensors up to this size are read at generation time when an op needs their values.
constexpr std::int64_t kKnownInts = 64;

// ---------------------------------------------------------------------------------------------
// The stage emitter
// ---------------------------------------------------------------------------------------------

class StageEmitter;

// What a mapping sees of one ONNX node: its inputs as expressions, its outputs as variables,
// its attributes, and the means to write lines.
class Node {
 public:
  Node(StageEmitter& emitter, const onnx::NodeProto& node, const ir::Op& op, int index)
      : e_(emitter), node_(node), op_(op), index_(index) {}

  const onnx::NodeProto& proto() const { return node_; }
  int inputs() const { return node_.input_size(); }
  int outputs() const { return node_.output_size(); }
  bool has(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }
  std::string in(int i) const;
  std::string out(int i) const;
  bool used(int i) const;  // whether anything reads output i
  void assign(int i, const std::string& expr) const { line(out(i) + " = " + expr); }
  void line(const std::string& text) const;
  std::string temp(const std::string& prefix) const;

  // What the IR knows of input i: rank, dtype; and its values when it is a small int constant.
  std::optional<int> rank(int i) const;
  std::optional<std::vector<std::int64_t>> shape(int i) const;  // dims of -1 are unknown
  ir::DType dtype(int i) const;
  std::optional<std::vector<std::int64_t>> known_ints(int i) const;
  // Input i as a List[int] expression: a literal when known, else converted at run time.
  std::string int_list(int i) const;
  // The device of the stage's data (for ops that create tensors from nothing but a shape).
  std::string device_arg() const;
  int opset() const;

  const onnx::AttributeProto* attr(const std::string& name) const;
  std::int64_t attr_int(const std::string& name, std::int64_t fallback) const;
  double attr_float(const std::string& name, double fallback) const;
  std::optional<std::vector<std::int64_t>> attr_ints(const std::string& name) const;
  std::string attr_string(const std::string& name, const std::string& fallback) const;

  // Axes from input i (newer opsets) or the attribute (older ones).
  std::optional<std::vector<std::int64_t>> axes(int input, const std::string& attribute = "axes") const;
  // Axis normalised against `rank_of_input`'s rank; a run-time expression when the rank is unknown.
  std::string axis(std::int64_t axis, int rank_of_input, int extra = 0) const;

  [[noreturn]] void unsupported(const std::string& why) const;
  StageEmitter& emitter() const { return e_; }

  // A tensor rank's cut (source_rank_cut.h) of a region op's size arguments along the split dim:
  // the entry of its shape that is the rank's share (-1: none; ONNX's 0 and 1 keep the input's
  // dim, already the share), the dim along which its input is split (-1: none), and whether an
  // axis is that dim. Off where the stage is written whole.
  int divided_entry() const;
  int input_split_dim() const;
  bool cuts_split_dim(std::int64_t axis) const;
  const SourceRankCut& cut() const;
  std::optional<int> output_rank(int i) const;
  // A size along the split dim (a literal, or an expression) as the rank's share.
  std::string divided(const std::optional<std::vector<std::int64_t>>& known, std::size_t k,
                      const std::string& expr) const;
  [[noreturn]] void not_cut(const std::string& why) const;

 private:
  StageEmitter& e_;
  const onnx::NodeProto& node_;
  const ir::Op& op_;
  int index_;
};

using Mapping = std::function<void(const Node&)>;
const std::map<std::string, Mapping>& mappings();
std::string gemm_product(const Node& n);
std::string shape_range(const Node& n);

class StageEmitter {
 public:
  StageEmitter(const std::string& path, const onnx::ModelProto& model, const ir::Graph& graph, const emit::StageLayout& stage,
               int tensor_rank)
      : path_(path), model_(model), graph_(graph), stage_(stage) {
    if (tensor_rank >= 0 && stage.tensor_shard.degree > 1) cut_.emplace(graph, stage.tensor_shard, tensor_rank);
    index_constants();
    for (const auto& import : model.opset_import()) {
      if (import.domain().empty() || import.domain() == "ai.onnx") opset_ = static_cast<int>(import.version());
    }
  }

  StageSource run() {
    StageSource source;
    add_weights(source);
    std::vector<std::string> args, returns, types;
    for (const auto& input : stage_.inputs) args.push_back(bind(input.value) + ": Tensor");
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
    std::string header = "def forward(self" + std::string(args.empty() ? "" : ", ") + join(args) + ") -> Tuple[" +
                         (types.empty() ? "()" : join(types)) + "]:\n";
    source.forward = header + body_ + "    return " + tuple + "\n";
    for (auto& constant : constants_) source.attributes.push_back(std::move(constant));
    source.core_lines = core_lines.lines();
    return source;
  }

  // --- used by Node ---
  const std::string& path() const { return path_; }
  const ir::Graph& graph() const { return graph_; }
  int opset() const { return opset_; }
  void line(const std::string& text) { body_ += "    " + text + "\n"; }
  std::string temp(const std::string& prefix) { return prefix + std::to_string(temps_++); }

  // What reads a value: its variable or attribute, as the op being written reads it on a tensor rank.
  std::string expr(ir::ValueId id) {
    if (auto it = substituted_.find(id); it != substituted_.end()) return it->second;
    if (!cut_ || !cut_->writing()) return vars_.expr(id);
    return cut_->read(id, vars_.expr(id), writer(prelude_));
  }
  std::string bind(ir::ValueId id) { return vars_.bind(id); }
  const SourceRankCut* cut() const { return cut_ ? &*cut_ : nullptr; }

  const TensorProto* constant(const std::string& name) const {
    auto it = constants_by_name_.find(name);
    return it == constants_by_name_.end() ? nullptr : it->second;
  }

  std::optional<std::vector<std::int64_t>> known_ints(const std::string& name) const {
    const auto* tensor = constant(name);
    if (!tensor || tensor->data_location() == TensorProto::EXTERNAL || numel_of(*tensor) > kKnownInts) return std::nullopt;
    auto dtype = ir::dtype_from_onnx(tensor->data_type());
    if (dtype != ir::DType::kInt64 && dtype != ir::DType::kInt32) return std::nullopt;
    auto bytes = tensor_bytes(*tensor, *dtype, path_);
    std::vector<std::int64_t> values;
    for (std::int64_t i = 0; i < numel_of(*tensor); ++i) values.push_back(element_as_int(bytes, *dtype, i));
    return values;
  }

  // A constant tensor as an expression: inline when small, else a new "c<i>" buffer.
  std::string constant_expr(const TensorProto& tensor) {
    auto dtype = ir::dtype_from_onnx(tensor.data_type());
    if (!dtype) throw InputError(path_ + ": constant '" + tensor.name() + "' has ONNX data type " +
                                 std::to_string(tensor.data_type()) + ", which TorchScript has no tensor type for");
    auto bytes = tensor_bytes(tensor, *dtype, path_);
    if (auto literal = inline_literal(tensor, *dtype, bytes)) return *literal;
    StageAttribute attribute{"c" + std::to_string(constants_.size()), false, *dtype, dims_of(tensor), std::move(bytes)};
    constants_.push_back(std::move(attribute));
    return "self." + constants_.back().stage_name;
  }

  std::string device_arg() const {
    std::string device = vars_.device(stage_.inputs.empty() ? ir::kNoId : stage_.inputs.front().value);
    return device.empty() ? "" : ", device=" + device;
  }

 private:
  // Initializers and Constant nodes by output name, for values an op needs at generation time.
  void index_constants() {
    for (const auto& init : model_.graph().initializer()) constants_by_name_[init.name()] = &init;
    for (const auto& node : model_.graph().node()) {
      if (node.op_type() != "Constant" || node.output_size() != 1) continue;
      if (auto tensor = constant_node_tensor(node)) constants_by_name_[node.output(0)] = tensor;
    }
  }

  // The tensor a Constant node holds, whichever of its attribute forms it uses.
  const TensorProto* constant_node_tensor(const onnx::NodeProto& node) {
    for (const auto& a : node.attribute()) {
      if (a.name() == "value") return &a.t();
      TensorProto tensor;
      tensor.set_name(node.output(0));
      if (a.name() == "value_float") {
        tensor.set_data_type(TensorProto::FLOAT);
        tensor.add_float_data(a.f());
      } else if (a.name() == "value_floats") {
        tensor.set_data_type(TensorProto::FLOAT);
        tensor.add_dims(a.floats_size());
        for (auto f : a.floats()) tensor.add_float_data(f);
      } else if (a.name() == "value_int") {
        tensor.set_data_type(TensorProto::INT64);
        tensor.add_int64_data(a.i());
      } else if (a.name() == "value_ints") {
        tensor.set_data_type(TensorProto::INT64);
        tensor.add_dims(a.ints_size());
        for (auto i : a.ints()) tensor.add_int64_data(i);
      } else {
        continue;
      }
      synthesized_.push_back(std::move(tensor));
      return &synthesized_.back();
    }
    return nullptr;
  }

  std::optional<std::string> inline_literal(const TensorProto& tensor, ir::DType dtype, const std::string& bytes) {
    auto dims = dims_of(tensor);
    auto numel = numel_of(tensor);
    std::string type = ", dtype=" + std::to_string(scalar_type(dtype)) + ")";
    if (numel == 0) return "torch.zeros(" + int_list_literal(dims) + type;
    bool floating = dtype == ir::DType::kFloat32 || dtype == ir::DType::kFloat64;
    if (!(floating && numel == 1) && !(is_integral(dtype) && numel <= kInlineInts)) return std::nullopt;
    std::vector<std::string> items;
    for (std::int64_t i = 0; i < numel; ++i) {
      if (floating) items.push_back(float_literal(element_as_double(bytes, dtype, i), dtype == ir::DType::kFloat32));
      else if (dtype == ir::DType::kBool) items.push_back(element_as_int(bytes, dtype, i) ? "True" : "False");
      else items.push_back(int_literal(element_as_int(bytes, dtype, i)));
    }
    if (dims.empty()) return "torch.tensor(" + items[0] + type;
    std::string flat = "torch.tensor([" + join(items) + "]" + type;
    return dims.size() == 1 ? flat : flat + ".reshape(" + int_list_literal(dims) + ")";
  }

  // One attribute per weight of the layout, parameters first, with the initializer's data.
  void add_weights(StageSource& source) {
    std::map<std::string, const TensorProto*> initializers;
    for (const auto& init : model_.graph().initializer()) initializers[init.name()] = &init;
    auto add = [&](const emit::StageWeight& weight, bool trainable) {
      const auto& name = graph_.value(weight.value).name;
      auto it = initializers.find(name);
      if (it == initializers.end()) throw std::logic_error("internal error: weight '" + name + "' is no initializer");
      auto dtype = ir::dtype_from_onnx(it->second->data_type());
      if (!dtype) throw InputError(path_ + ": weight '" + name + "' has ONNX data type " +
                                   std::to_string(it->second->data_type()) + ", which TorchScript has no tensor type for");
      source.attributes.push_back(
          {weight.stage_name, trainable, *dtype, dims_of(*it->second), tensor_bytes(*it->second, *dtype, path_)});
      if (cut_) cut_->cut_weight(weight.value, source.attributes.back());
      vars_.add_weight(weight.value, weight.stage_name);
    };
    for (const auto& weight : stage_.params) add(weight, true);
    for (const auto& weight : stage_.buffers) add(weight, false);
  }

  void emit_op(ir::OpId id) {
    const auto& op = graph_.op(id);
    const auto& nodes = model_.graph().node();
    if (op.source_node < 0 || op.source_node >= nodes.size()) {
      throw std::logic_error("internal error: IR op " + std::to_string(id) + " has no ONNX node");
    }
    int index = static_cast<int>(op.source_node);
    const auto& node = nodes[index];
    bool default_domain = node.domain().empty() || node.domain() == "ai.onnx";
    auto mapping = mappings().find(node.op_type());
    Node view(*this, node, op, index);
    if (!default_domain || mapping == mappings().end()) {
      std::string type = default_domain ? node.op_type() : node.domain() + "::" + node.op_type();
      throw InputError(path_ + ": ONNX op '" + type + "' (node " + node_label(node, index) +
                       ") has no TorchScript mapping; plan with --plan-only");
    }
    if (cut_) emit_cut_op(op, view, mapping->second);
    else mapping->second(view);
    if (++ops_since_break_ >= kInlineChain) break_inline_chain(op);
  }

  // Lines into `text`, indented as the forward's body; fresh variables.
  SourceRankCut::Writer writer(std::string& text) {
    return {[&text](const std::string& line) { text += "    " + line + "\n"; }, [this] { return temp("_tp"); }};
  }

  // An op as a tensor rank runs it (source_rank_cut.h). The collectives its inputs need go before
  // its lines, whichever line of a mapping first reads them.
  void emit_cut_op(const ir::Op& op, const Node& view, const Mapping& mapping) {
    cut_->write_op(op, body_, prelude_, vars_, [&] {
      switch (cut_->role(op.id)) {
        case emit::RankOp::kVocabularyLookup: vocabulary_lookup(op, view, mapping); break;
        case emit::RankOp::kRowOp: row_op(op, view, mapping); break;
        case emit::RankOp::kWhole:
          if (!size_query(op, view)) mapping(view);
          break;
        case emit::RankOp::kRegion:
        case emit::RankOp::kSequence: mapping(view); break;
      }
    });
    substituted_.clear();
  }

  // The vocabulary embedding (a Gather of the table's rows): the rank's rows looked up, the
  // others zeroed, the group's sum.
  void vocabulary_lookup(const ir::Op& op, const Node& view, const Mapping& mapping) {
    if (view.proto().op_type() != "Gather" || view.attr_int("axis", 0) != 0) view.not_cut("is no lookup of a table's rows");
    auto lookup = cut_->vocabulary_ids(op, view.in(1), writer(prelude_));
    substituted_[op.inputs.at(1)] = lookup.local;
    mapping(view);
    cut_->sum_vocabulary_rows(op, view.out(0), lookup, writer(body_));
  }

  // A row op: its partial sums summed over the group, a Gemm's C added once after the sum.
  void row_op(const ir::Op& op, const Node& view, const Mapping& mapping) {
    const auto& type = view.proto().op_type();
    if (type != "MatMul" && type != "Gemm") view.not_cut("is a row-parallel product of a kind the cut does not know");
    std::string bias;
    if (type == "Gemm" && view.has(2)) {
      double beta = view.attr_float("beta", 1.0);
      bias = beta == 1.0 ? view.in(2) : "torch.mul(" + view.in(2) + ", " + float_literal(beta) + ")";
      view.assign(0, gemm_product(view));
    } else {
      mapping(view);
    }
    cut_->sum(op, view.out(0), bias, writer(body_));
  }

  // Shape of a value split along the sequence reads it where it is, that dim times the degree.
  bool size_query(const ir::Op& op, const Node& view) {
    if (view.proto().op_type() != "Shape") return false;
    std::string x = vars_.expr(op.inputs.at(0));
    int dim = cut_->sequence_dim(x);
    if (dim < 0) return false;
    std::string sizes = temp("_l"), at = "[" + std::to_string(dim) + "]";
    line(sizes + ": List[int] = " + x + ".size()");
    line(sizes + at + " = " + sizes + at + " * " + std::to_string(cut_->degree()));
    view.assign(0, "torch.tensor(" + sizes + shape_range(view) + ", dtype=4)");
    return true;
  }

  // libtorch's interpreter emits a value that is used once, right after it is made, inline into
  // its user, recursively (CanEmitInline, then Code's emitter): a chain of thousands of such ops
  // recurses thousands of frames deep and overflows the stack when the stage first runs. Every
  // kInlineChain ops, each tensor the op made is passed through where(True, v, v), which uses v
  // twice, so no chain is longer than that. Values and gradients are unchanged (the gradient of
  // the unused branch is 0).
  static constexpr int kInlineChain = 64;
  void break_inline_chain(const ir::Op& op) {
    bool broke = false;
    for (auto id : op.outputs) {
      const auto& value = graph_.value(id);
      const std::string* name = vars_.variable(id);
      if (!value.is_tensor() || !name || value.consumers.empty()) continue;
      std::string flag = temp("_true");
      line(flag + " = torch.ones([], dtype=11, device=" + *name + ".device)");
      line(*name + " = torch.where(" + flag + ", " + *name + ", " + *name + ")");
      broke = true;
    }
    if (broke) ops_since_break_ = 0;
  }

 public:
  static std::string node_label(const onnx::NodeProto& node, int index) {
    return node.name().empty() ? "#" + std::to_string(index) : node.name();
  }

 private:
  const std::string& path_;
  const onnx::ModelProto& model_;
  const ir::Graph& graph_;
  const emit::StageLayout& stage_;
  int opset_ = 0;
  StageVariables vars_{graph_, stage_.id};
  std::map<std::string, const TensorProto*> constants_by_name_;
  std::deque<TensorProto> synthesized_;  // Constant nodes' value_int(s)/value_float(s) as tensors
  std::vector<StageAttribute> constants_;
  std::string body_;
  std::optional<SourceRankCut> cut_;  // set where the stage is written for one tensor rank
  std::string prelude_;               // under a cut, the collectives an op's inputs need
  std::map<ir::ValueId, std::string> substituted_;  // the op's inputs it reads as other variables
  int temps_ = 0;
  int ops_since_break_ = 0;
};

// --- Node members that need the emitter ---

std::string Node::in(int i) const {
  if (!has(i)) unsupported("lacks its input " + std::to_string(i));
  return e_.expr(op_.inputs.at(static_cast<std::size_t>(i)));
}

std::string Node::out(int i) const { return e_.bind(op_.outputs.at(static_cast<std::size_t>(i))); }

bool Node::used(int i) const {
  if (i >= node_.output_size() || node_.output(i).empty()) return false;
  const auto& value = e_.graph().value(op_.outputs.at(static_cast<std::size_t>(i)));
  return !value.consumers.empty() || value.model_output;
}

void Node::line(const std::string& text) const { e_.line(text); }
std::string Node::temp(const std::string& prefix) const { return e_.temp(prefix); }
std::string Node::device_arg() const { return e_.device_arg(); }
int Node::opset() const { return e_.opset(); }

std::optional<int> Node::rank(int i) const {
  if (!has(i)) return std::nullopt;
  const auto& value = e_.graph().value(op_.inputs.at(static_cast<std::size_t>(i)));
  if (!value.is_tensor() || !value.type.rank_known) return std::nullopt;
  return static_cast<int>(value.type.shape.size());
}

std::optional<std::vector<std::int64_t>> Node::shape(int i) const {
  if (!rank(i)) return std::nullopt;
  return e_.graph().value(op_.inputs.at(static_cast<std::size_t>(i))).type.shape;
}

ir::DType Node::dtype(int i) const {
  if (!has(i)) return ir::DType::kUnknown;
  return e_.graph().value(op_.inputs.at(static_cast<std::size_t>(i))).type.dtype;
}

std::optional<std::vector<std::int64_t>> Node::known_ints(int i) const {
  return has(i) ? e_.known_ints(node_.input(i)) : std::nullopt;
}

std::string Node::int_list(int i) const {
  if (auto values = known_ints(i); values && !values->empty()) return int_list_literal(*values);
  std::string list = temp("_l");
  line(list + ": List[int] = " + in(i) + ".tolist()");
  return list;
}

const onnx::AttributeProto* Node::attr(const std::string& name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

std::int64_t Node::attr_int(const std::string& name, std::int64_t fallback) const {
  const auto* a = attr(name);
  return a ? a->i() : fallback;
}

double Node::attr_float(const std::string& name, double fallback) const {
  const auto* a = attr(name);
  return a ? a->f() : fallback;
}

std::optional<std::vector<std::int64_t>> Node::attr_ints(const std::string& name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<std::int64_t>(a->ints().begin(), a->ints().end());
}

std::string Node::attr_string(const std::string& name, const std::string& fallback) const {
  const auto* a = attr(name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<std::int64_t>> Node::axes(int input, const std::string& attribute) const {
  if (has(input)) {
    auto values = known_ints(input);
    if (!values) unsupported("takes its " + attribute + " from a tensor computed at run time");
    return values;
  }
  return attr_ints(attribute);
}

std::string Node::axis(std::int64_t axis, int rank_of_input, int extra) const {
  if (axis >= 0) return std::to_string(axis);
  if (auto r = rank(rank_of_input)) return std::to_string(axis + *r + extra);
  return "(" + in(rank_of_input) + ".dim() + " + std::to_string(axis + extra) + ")";
}

void Node::unsupported(const std::string& why) const {
  throw InputError(e_.path() + ": ONNX op '" + node_.op_type() + "' (node " + StageEmitter::node_label(node_, index_) +
                   ") " + why + ", which has no TorchScript mapping; plan with --plan-only");
}

// A region op on a tensor rank: what its cut is, and off where it is none.
int Node::divided_entry() const {
  const auto* cut = e_.cut();
  return cut && cut->role(op_.id) == emit::RankOp::kRegion ? cut->share().divided_shape_entry(op_) : -1;
}

int Node::input_split_dim() const {
  const auto* cut = e_.cut();
  if (!cut || cut->role(op_.id) != emit::RankOp::kRegion || op_.inputs.empty()) return -1;
  return cut->share().split_dim(op_.inputs[0]);
}

bool Node::cuts_split_dim(std::int64_t axis) const {
  return input_split_dim() >= 0 && e_.cut()->share().cuts_split_dim(op_, axis);
}

const SourceRankCut& Node::cut() const { return *e_.cut(); }

std::optional<int> Node::output_rank(int i) const {
  const auto& value = e_.graph().value(op_.outputs.at(static_cast<std::size_t>(i)));
  if (!value.is_tensor() || !value.type.rank_known) return std::nullopt;
  return static_cast<int>(value.type.shape.size());
}

std::string Node::divided(const std::optional<std::vector<std::int64_t>>& known, std::size_t k,
                          const std::string& expr) const {
  return known ? int_literal(cut().divided(known->at(k))) : cut().divided(expr);
}

void Node::not_cut(const std::string& why) const {
  throw InputError(e_.path() + ": ONNX op '" + node_.op_type() + "' (node " + StageEmitter::node_label(node_, index_) +
                   ") of a tensor-parallel region " + why + ", so its stage cannot be cut for tensor ranks; plan with "
                   "--tensor-parallel 1");
}

// ---------------------------------------------------------------------------------------------
// The mappings, one per ONNX op type
// ---------------------------------------------------------------------------------------------

// Ops that are one aten call on their inputs: {0}, {1}, ... stand for the input expressions.
const std::map<std::string, std::string> kElementwise = {
    {"Identity", "{0}"},
    {"Relu", "torch.relu({0})"},
    {"Sigmoid", "torch.sigmoid({0})"},
    {"Tanh", "torch.tanh({0})"},
    {"Erf", "torch.erf({0})"},
    {"Neg", "torch.neg({0})"},
    {"Abs", "torch.abs({0})"},
    {"Sqrt", "torch.sqrt({0})"},
    {"Exp", "torch.exp({0})"},
    {"Log", "torch.log({0})"},
    {"Reciprocal", "torch.reciprocal({0})"},
    {"Floor", "torch.floor({0})"},
    {"Ceil", "torch.ceil({0})"},
    {"Round", "torch.round({0})"},  // both round half to even
    {"Sign", "torch.sign({0})"},
    {"Sin", "torch.sin({0})"},
    {"Cos", "torch.cos({0})"},
    {"Not", "torch.logical_not({0})"},
    {"HardSwish", "torch.hardswish({0})"},
    {"Mish", "torch.mish({0})"},
    {"Add", "torch.add({0}, {1})"},
    {"Sub", "torch.sub({0}, {1})"},
    {"Mul", "torch.mul({0}, {1})"},
    {"Pow", "torch.pow({0}, {1})"},
    {"MatMul", "torch.matmul({0}, {1})"},
    {"Equal", "torch.eq({0}, {1})"},
    {"Less", "torch.lt({0}, {1})"},
    {"LessOrEqual", "torch.le({0}, {1})"},
    {"Greater", "torch.gt({0}, {1})"},
    {"GreaterOrEqual", "torch.ge({0}, {1})"},
    {"And", "torch.logical_and({0}, {1})"},
    {"Or", "torch.logical_or({0}, {1})"},
    {"Xor", "torch.logical_xor({0}, {1})"},
    {"Where", "torch.where({0}, {1}, {2})"},
    {"CastLike", "{0}.to({1}.dtype)"},
};

void map_elementwise(const Node& n) {
  const auto& pattern = kElementwise.at(n.proto().op_type());
  std::vector<std::string> args;
  for (int i = 0; i < n.inputs(); ++i) args.push_back(n.in(i));
  n.assign(0, format(pattern, args));
}

// Sum/Max/Min take any number of inputs: one binary call per line into an accumulator, so that
// thousands of inputs give flat source rather than calls nested thousands deep (which the
// TorchScript parser would follow by recursion).
void map_variadic(const Node& n) {
  static const std::map<std::string, std::string> kBinary = {
      {"Sum", "torch.add"}, {"Max", "torch.maximum"}, {"Min", "torch.minimum"}};
  if (n.inputs() == 1) return n.assign(0, n.in(0));
  const auto& fn = kBinary.at(n.proto().op_type());
  std::string sum = n.temp("_a");
  n.line(sum + " = " + fn + "(" + n.in(0) + ", " + n.in(1) + ")");
  for (int i = 2; i < n.inputs(); ++i) n.line(sum + " = " + fn + "(" + sum + ", " + n.in(i) + ")");
  n.assign(0, sum);
}

// ONNX Div of integers truncates; torch.div would give floats.
void map_div(const Node& n) {
  auto a = n.in(0), b = n.in(1);
  auto dtype = n.dtype(0);
  if (dtype == ir::DType::kUnknown) {
    n.assign(0, "torch.div(" + a + ", " + b + ") if " + a + ".is_floating_point() else torch.div(" + a + ", " + b +
                    ", rounding_mode=\"trunc\")");
  } else {
    n.assign(0, "torch.div(" + a + ", " + b + (is_integral(dtype) ? ", rounding_mode=\"trunc\")" : ")"));
  }
}

void map_mod(const Node& n) {
  n.assign(0, std::string(n.attr_int("fmod", 0) ? "torch.fmod(" : "torch.remainder(") + n.in(0) + ", " + n.in(1) + ")");
}

void map_constant(const Node& n) {
  const auto* tensor = n.emitter().constant(n.proto().output(0));
  if (!tensor) n.unsupported("holds a sparse, string or graph value");
  n.assign(0, n.emitter().constant_expr(*tensor));
}

// Shape's start and end as a Python slice of the sizes ("[1:]"), "" for all of them.
std::string shape_range(const Node& n) {
  if (!n.attr("start") && !n.attr("end")) return "";
  return "[" + (n.attr("start") ? std::to_string(n.attr_int("start", 0)) : "") + ":" +
         (n.attr("end") ? std::to_string(n.attr_int("end", 0)) : "") + "]";
}

// Shape is computed from the tensor at run time: it must follow the microbatch size.
void map_shape(const Node& n) { n.assign(0, "torch.tensor(" + n.in(0) + ".size()" + shape_range(n) + ", dtype=4)"); }

void map_size(const Node& n) { n.assign(0, "torch.tensor(" + n.in(0) + ".numel(), dtype=4)"); }

int scalar_type_of_onnx(const Node& n, int elem_type) {
  auto dtype = ir::dtype_from_onnx(elem_type);
  if (!dtype) n.unsupported("converts to ONNX data type " + std::to_string(elem_type));
  return scalar_type(*dtype);
}

void map_cast(const Node& n) {
  n.assign(0, n.in(0) + ".to(" + std::to_string(scalar_type_of_onnx(n, static_cast<int>(n.attr_int("to", 1)))) + ")");
}

void map_constant_of_shape(const Node& n) {
  std::string value = "0.0";
  int type = 6;
  if (const auto* a = n.attr("value")) {
    auto dtype = ir::dtype_from_onnx(a->t().data_type());
    if (!dtype || numel_of(a->t()) != 1) n.unsupported("has a value that is not a one-element tensor");
    auto bytes = tensor_bytes(a->t(), *dtype, n.emitter().path());
    type = scalar_type(*dtype);
    if (*dtype == ir::DType::kBool) value = element_as_int(bytes, *dtype, 0) ? "True" : "False";
    else if (is_integral(*dtype)) value = int_literal(element_as_int(bytes, *dtype, 0));
    else if (*dtype == ir::DType::kFloat32 || *dtype == ir::DType::kFloat64)
      value = float_literal(element_as_double(bytes, *dtype, 0), *dtype == ir::DType::kFloat32);
    else n.unsupported("fills with a value of ONNX data type " + std::to_string(a->t().data_type()));
  }
  std::string shape = n.int_list(0);
  n.assign(0, "torch.full(" + shape + ", " + value + ", dtype=" + std::to_string(type) + n.device_arg() + ")");
}

// Gather = index_select on the flattened indices, reshaped to data[:axis] + indices + data[axis+1:];
// a constant scalar index is a select. Both keep the gradient of an embedding table.
void map_gather(const Node& n) {
  auto data = n.in(0), indices = n.in(1);
  auto axis_attr = n.attr_int("axis", 0);
  auto known = n.known_ints(1);
  if (known && n.rank(1) == 0) {
    n.assign(0, "torch.select(" + data + ", " + std::to_string(axis_attr) + ", " + int_literal(known->at(0)) + ")");
    return;
  }
  bool non_negative = known && std::all_of(known->begin(), known->end(), [](auto v) { return v >= 0; });
  std::string index = indices;
  auto axis = n.axis(axis_attr, 0);
  if (!non_negative) {
    index = n.temp("_t");
    n.line(index + " = torch.where(" + indices + " < 0, " + indices + " + " + data + ".size(" + axis + "), " + indices +
           ")");
  }
  std::string selected = "torch.index_select(" + data + ", " + axis + ", " + index + ".reshape(-1).to(" + data +
                         ".device))";
  if (n.rank(1) == 1) {
    n.assign(0, selected);
    return;
  }
  auto after = axis_attr >= 0 || n.rank(0) ? std::to_string(std::stoll(axis) + 1) : axis + " + 1";
  n.assign(0, selected + ".reshape(" + data + ".size()[:" + axis + "] + " + indices + ".size() + " + data +
                  ".size()[" + after + ":])");
}

void map_gather_elements(const Node& n) {
  n.assign(0, "torch.gather(" + n.in(0) + ", " + std::to_string(n.attr_int("axis", 0)) + ", " + n.in(1) + ")");
}

void map_transpose(const Node& n) {
  auto perm = n.attr_ints("perm");
  if (!perm) {
    auto rank = n.rank(0);
    if (!rank) n.unsupported("reverses the dims of a tensor of unknown rank");
    perm.emplace();
    for (int d = *rank - 1; d >= 0; --d) perm->push_back(d);
  }
  n.assign(0, "torch.permute(" + n.in(0) + ", " + int_list_literal(*perm) + ")");
}

// Reshape's 0 copies the input's dim (unless allowzero): substituted in the literal, or by a loop
// over the target computed at run time.
void map_reshape(const Node& n) {
  auto data = n.in(0);
  bool copy_zeros = n.attr_int("allowzero", 0) == 0;
  auto known = n.known_ints(1);
  int divided = n.divided_entry();
  if (known && !known->empty()) {
    std::vector<std::string> items;
    for (std::size_t i = 0; i < known->size(); ++i) {
      auto size = (*known)[i];
      bool copy = copy_zeros && size == 0;
      if (static_cast<int>(i) == divided && size > 0) size = n.cut().divided(size);
      items.push_back(copy ? data + ".size(" + std::to_string(i) + ")" : int_literal(size));
    }
    n.assign(0, data + ".reshape([" + join(items) + "])");
    return;
  }
  std::string shape = n.int_list(1);
  if (divided >= 0) {
    std::string entry = shape + "[" + std::to_string(divided) + "]";
    n.line("if " + entry + " > 0:");
    n.line("    " + entry + " = " + n.cut().divided(entry));
  }
  if (copy_zeros) {
    std::string i = n.temp("_i");
    n.line("for " + i + " in range(len(" + shape + ")):");
    n.line("    if " + shape + "[" + i + "] == 0:");
    n.line("        " + shape + "[" + i + "] = " + data + ".size(" + i + ")");
  }
  n.assign(0, data + ".reshape(" + shape + ")");
}

void map_flatten(const Node& n) {
  auto x = n.in(0);
  auto axis_attr = n.attr_int("axis", 1);
  auto rank = n.rank(0);
  if (axis_attr < 0 && !rank) n.unsupported("has a negative axis on a tensor of unknown rank");
  auto axis = axis_attr < 0 ? axis_attr + *rank : axis_attr;
  if (axis == 0) return n.assign(0, x + ".reshape([1, -1])");
  if (rank && axis == *rank) return n.assign(0, x + ".reshape([-1, 1])");
  std::string inner = "torch.flatten(" + x + ", " + std::to_string(axis) + ")";
  n.assign(0, axis == 1 ? inner : "torch.flatten(" + inner + ", 0, " + std::to_string(axis - 1) + ")");
}

// Unsqueeze inserts at output positions: in ascending order; a single axis maps directly (torch
// counts a negative dim from the output's end too).
void map_unsqueeze(const Node& n) {
  auto axes = *n.axes(1);
  std::string expr = n.in(0);
  if (axes.size() == 1) return n.assign(0, "torch.unsqueeze(" + expr + ", " + std::to_string(axes[0]) + ")");
  auto rank = n.rank(0);
  for (auto& a : axes) {
    if (a < 0 && !rank) n.unsupported("has negative axes on a tensor of unknown rank");
    if (a < 0) a += *rank + static_cast<std::int64_t>(axes.size());
  }
  std::sort(axes.begin(), axes.end());
  for (auto a : axes) expr = "torch.unsqueeze(" + expr + ", " + std::to_string(a) + ")";
  n.assign(0, expr);
}

void map_squeeze(const Node& n) {
  auto axes = n.axes(1);
  std::string expr = n.in(0);
  if (!axes || axes->empty()) return n.assign(0, "torch.squeeze(" + expr + ")");
  auto rank = n.rank(0);
  for (auto& a : *axes) {
    if (a < 0 && !rank) n.unsupported("has negative axes on a tensor of unknown rank");
    if (a < 0) a += *rank;
  }
  std::sort(axes->rbegin(), axes->rend());  // from the last, so earlier positions stay put
  for (auto a : *axes) expr = "torch.squeeze(" + expr + ", " + std::to_string(a) + ")";
  n.assign(0, expr);
}

void map_concat(const Node& n) {
  std::vector<std::string> parts;
  for (int i = 0; i < n.inputs(); ++i) parts.push_back(n.in(i));
  n.assign(0, "torch.cat([" + join(parts) + "], " + std::to_string(n.attr_int("axis", 0)) + ")");
}

// Split sizes: the second input (opset 13+), the attribute (older), else equal parts, the last
// one smaller (opset 18's num_outputs). On a tensor rank, sizes along the split dim are divided
// (equal parts follow the rank's share of the dim by themselves).
void map_split(const Node& n) {
  auto x = n.in(0);
  bool cut = n.cuts_split_dim(n.attr_int("axis", 0));
  auto axis = std::to_string(n.attr_int("axis", 0));
  std::string parts = n.temp("_s"), call;
  auto sizes = n.has(1) ? n.known_ints(1) : n.attr_ints("split");
  if (sizes && sizes->empty() && n.has(1)) sizes.reset();  // read at run time, as an empty constant has no type
  if (sizes && cut)
    for (auto& size : *sizes) size = n.cut().divided(size);
  if (n.has(1) && !sizes) {
    std::string list = n.int_list(1);
    if (cut) {
      std::string i = n.temp("_i"), entry = list + "[" + i + "]";
      n.line("for " + i + " in range(len(" + list + ")):");
      n.line("    " + entry + " = " + n.cut().divided(entry));
    }
    call = "torch.split_with_sizes(" + x + ", " + list + ", " + axis + ")";
  } else if (sizes) {
    call = "torch.split_with_sizes(" + x + ", " + int_list_literal(*sizes) + ", " + axis + ")";
  } else {
    auto count = std::to_string(n.outputs());
    call = "torch.split(" + x + ", (" + x + ".size(" + axis + ") + " + count + " - 1) // " + count + ", " + axis + ")";
  }
  n.line(parts + " = " + call);
  for (int i = 0; i < n.outputs(); ++i) n.assign(i, parts + "[" + std::to_string(i) + "]");
}

// One axis of a Slice with a negative step: ONNX clamps start to [0, n-1] and end to [-1, n-1]
// (after adding n to negative ones) and walks down; torch.slice only walks up, so the axis is
// flipped, which maps index i to n-1-i. Writes the lines and returns the sliced variable.
std::string slice_down(const Node& n, const std::string& x, const std::string& axis, const std::string& start,
                       const std::string& end, const std::string& step, const std::string& indent = "") {
  std::string size = n.temp("_n"), s = n.temp("_b"), e = n.temp("_e"), y = n.temp("_y");
  n.line(indent + size + " = " + x + ".size(" + axis + ")");
  n.line(indent + s + " = " + start);
  n.line(indent + "if " + s + " < 0:");
  n.line(indent + "    " + s + " = " + s + " + " + size);
  n.line(indent + s + " = min(max(" + s + ", 0), " + size + " - 1)");
  n.line(indent + e + " = " + end);
  n.line(indent + "if " + e + " < 0:");
  n.line(indent + "    " + e + " = " + e + " + " + size);
  n.line(indent + e + " = min(max(" + e + ", -1), " + size + " - 1)");
  n.line(indent + y + " = torch.slice(torch.flip(" + x + ", [" + axis + "]), " + axis + ", " + size + " - 1 - " + s +
         ", " + size + " - 1 - " + e + ", 0 - (" + step + "))");  // -(-1) does not lex
  return y;
}

// Slice with any of starts, ends, axes and steps computed at run time: a loop over the axes.
void map_slice_at_run_time(const Node& n) {
  auto x = n.in(0);
  auto list = [&](int input) {
    std::string name = n.temp("_l");
    n.line(name + ": List[int] = " + n.int_list(input));
    return name;
  };
  std::string starts = list(1), ends = list(2);
  std::string axes = n.temp("_l"), steps = n.temp("_l"), k = n.temp("_k"), y = n.temp("_y");
  std::string a = n.temp("_c"), p = n.temp("_p");
  if (n.has(3)) n.line(axes + ": List[int] = " + n.int_list(3));
  else n.line(axes + ": List[int] = [" + k + " for " + k + " in range(len(" + starts + "))]");
  if (n.has(4)) n.line(steps + ": List[int] = " + n.int_list(4));
  else n.line(steps + ": List[int] = [1 for " + k + " in range(len(" + starts + "))]");
  if (int split = n.input_split_dim(); split >= 0) {
    // A tensor rank's bounds along the split dim are its share.
    n.line("for " + k + " in range(len(" + axes + ")):");
    n.line("    if " + axes + "[" + k + "] == " + std::to_string(split) + " or " + axes + "[" + k + "] == " +
           std::to_string(split) + " - " + x + ".dim():");
    for (const auto& bounds : {starts, ends})
      n.line("        " + bounds + "[" + k + "] = " + n.cut().divided(bounds + "[" + k + "]"));
  }
  n.line(y + " = " + x);
  n.line("for " + k + " in range(len(" + axes + ")):");
  n.line("    " + a + " = " + axes + "[" + k + "]");
  n.line("    if " + a + " < 0:");
  n.line("        " + a + " = " + a + " + " + x + ".dim()");
  n.line("    " + p + " = " + steps + "[" + k + "]");
  n.line("    if " + p + " > 0:");
  n.line("        " + y + " = torch.slice(" + y + ", " + a + ", " + starts + "[" + k + "], " + ends + "[" + k + "], " + p +
         ")");
  n.line("    else:");
  auto down = slice_down(n, y, a, starts + "[" + k + "]", ends + "[" + k + "]", p, "        ");
  n.line("        " + y + " = " + down);
  n.assign(0, y);
}

// Slice: bounds known at generation time or computed at run time; axes and steps constants give
// one torch.slice per axis, otherwise the bounds are walked at run time. Negative steps flip.
void map_slice(const Node& n) {
  if (n.opset() < 10) n.unsupported("takes its bounds from attributes (opset < 10)");
  auto known_starts = n.known_ints(1), known_ends = n.known_ints(2);
  auto axes = n.has(3) ? n.known_ints(3) : std::nullopt;
  auto steps = n.has(4) ? n.known_ints(4) : std::nullopt;
  std::size_t count = axes ? axes->size() : known_starts ? known_starts->size() : known_ends ? known_ends->size() : 0;
  bool at_run_time = (n.has(3) && !axes) || (n.has(4) && !steps) || count == 0;
  if (!at_run_time && steps && steps->size() != count) n.unsupported("has steps that do not match its axes");
  if (at_run_time) return map_slice_at_run_time(n);
  // Bound k: the constant, else element k of the list converted at run time.
  auto bound = [&](int input, const std::optional<std::vector<std::int64_t>>& known) {
    std::vector<std::string> items;
    std::string list = known ? "" : n.int_list(input);
    if (known && known->size() != count) n.unsupported("has bounds that do not match its axes");
    for (std::size_t k = 0; k < count; ++k)
      items.push_back(known ? int_literal(known->at(k)) : list + "[" + std::to_string(k) + "]");
    return items;
  };
  auto starts = bound(1, known_starts), ends = bound(2, known_ends);
  std::string expr = n.in(0);
  for (std::size_t k = 0; k < count; ++k) {
    auto step = steps ? steps->at(k) : 1;
    if (step == 0) n.unsupported("has a step of 0");
    if (n.cuts_split_dim(axes ? axes->at(k) : static_cast<std::int64_t>(k))) {
      starts[k] = n.divided(known_starts, k, starts[k]);
      ends[k] = n.divided(known_ends, k, ends[k]);
    }
    auto axis = n.axis(axes ? axes->at(k) : static_cast<std::int64_t>(k), 0);
    if (step > 0) {
      expr = "torch.slice(" + expr + ", " + axis + ", " + starts[k] + ", " + ends[k] + ", " + std::to_string(step) + ")";
    } else {
      std::string x = n.temp("_x");
      n.line(x + " = " + expr);
      expr = slice_down(n, x, axis, starts[k], ends[k], int_literal(step));
    }
  }
  n.assign(0, expr);
}

// ONNX Expand broadcasts both ways; torch expand keeps a dim only for -1, so target dims of 1
// over existing dims become -1 and missing leading dims are kept.
void map_expand(const Node& n) {
  auto x = n.in(0);
  std::string shape = n.temp("_l"), offset = n.temp("_o"), i = n.temp("_i");
  n.line(shape + ": List[int] = " + n.in(1) + ".tolist()");
  if (int divided = n.divided_entry(); divided >= 0) {
    // On a tensor rank, the entry at the split dim of the output, where it is not a broadcast 1.
    auto rank = n.output_rank(0);
    if (!rank) n.not_cut("expands to a shape of unknown rank");
    std::string at = n.temp("_k"), entry = shape + "[" + at + "]";
    n.line(at + " = len(" + shape + ") - " + std::to_string(*rank - divided));
    n.line("if " + at + " >= 0 and " + entry + " > 1:");
    n.line("    " + entry + " = " + n.cut().divided(entry));
  }
  n.line(offset + " = len(" + shape + ") - " + x + ".dim()");
  n.line("for " + i + " in range(len(" + shape + ")):");
  n.line("    if " + shape + "[" + i + "] == 1 and " + i + " >= " + offset + ":");
  n.line("        " + shape + "[" + i + "] = -1");
  n.line("if " + offset + " < 0:");
  n.line("    " + shape + " = [-1] * (-" + offset + ") + " + shape);
  n.assign(0, x + ".expand(" + shape + ")");
}

void map_tile(const Node& n) { n.assign(0, n.in(0) + ".repeat(" + n.int_list(1) + ")"); }

void map_range(const Node& n) {
  auto start = n.in(0);
  n.assign(0, "torch.arange(" + start + ".item(), " + n.in(1) + ".item(), " + n.in(2) + ".item(), dtype=" + start +
                  ".dtype, device=" + start + ".device)");
}

std::string gemm_operand(const Node& n, int i, const char* transposed) {
  return n.attr_int(transposed, 0) ? "torch.t(" + n.in(i) + ")" : n.in(i);
}

// alpha A B, without C.
std::string gemm_product(const Node& n) {
  std::string product = "torch.mm(" + gemm_operand(n, 0, "transA") + ", " + gemm_operand(n, 1, "transB") + ")";
  double alpha = n.attr_float("alpha", 1.0);
  return alpha == 1.0 ? product : "torch.mul(" + product + ", " + float_literal(alpha) + ")";
}

void map_gemm(const Node& n) {
  if (!n.has(2)) return n.assign(0, gemm_product(n));
  auto a = gemm_operand(n, 0, "transA"), b = gemm_operand(n, 1, "transB");
  double alpha = n.attr_float("alpha", 1.0), beta = n.attr_float("beta", 1.0);
  std::string scale;
  if (beta != 1.0) scale += ", beta=" + float_literal(beta);
  if (alpha != 1.0) scale += ", alpha=" + float_literal(alpha);
  n.assign(0, "torch.addmm(" + n.in(2) + ", " + a + ", " + b + scale + ")");
}

// Kernel, strides, dilations and pads of Conv and the pools.
struct Window {
  int spatial = 0;
  std::vector<std::int64_t> kernel, strides, dilations, begin, end;
};

void same_pads(const Node& n, bool upper, Window& w);

Window window_of(const Node& n, int weight_input) {
  Window w;
  if (auto kernel = n.attr_ints("kernel_shape")) {
    w.kernel = *kernel;
  } else if (auto weight = n.shape(weight_input); weight && weight->size() > 2) {
    w.kernel.assign(weight->begin() + 2, weight->end());  // Conv may leave it to the weight
  }
  if (w.kernel.empty()) n.unsupported("has no kernel_shape");
  w.spatial = static_cast<int>(w.kernel.size());
  auto ones = std::vector<std::int64_t>(w.spatial, 1);
  w.strides = n.attr_ints("strides").value_or(ones);
  w.dilations = n.attr_ints("dilations").value_or(ones);
  auto pads = n.attr_ints("pads").value_or(std::vector<std::int64_t>(2 * w.spatial, 0));
  if (pads.size() != 2 * w.kernel.size() || w.strides.size() != w.kernel.size() ||
      w.dilations.size() != w.kernel.size()) {
    n.unsupported("has pads, strides or dilations that do not match its kernel");
  }
  w.begin.assign(pads.begin(), pads.begin() + w.spatial);
  w.end.assign(pads.begin() + w.spatial, pads.end());
  auto auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    w.begin.assign(w.spatial, 0);
    w.end.assign(w.spatial, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    same_pads(n, auto_pad == "SAME_UPPER", w);
  }
  return w;
}

// SAME pads from the input's spatial dims, which do not scale with the batch, so the inferred
// shape holds at any microbatch size.
void same_pads(const Node& n, bool upper, Window& w) {
  auto input = n.shape(0);
  if (!input || input->size() != static_cast<std::size_t>(w.spatial) + 2) n.unsupported("pads SAME on an unknown shape");
  for (int d = 0; d < w.spatial; ++d) {
    auto size = (*input)[2 + d], stride = w.strides[d];
    if (size <= 0) n.unsupported("pads SAME on an unknown shape");
    auto out = (size + stride - 1) / stride;
    auto total = std::max<std::int64_t>((out - 1) * stride + (w.kernel[d] - 1) * w.dilations[d] + 1 - size, 0);
    auto small = total / 2;
    w.begin[d] = upper ? small : total - small;
    w.end[d] = total - w.begin[d];
  }
}

// Pads that differ at the two ends are applied with constant_pad_nd (last dim first, as F.pad).
std::string padded_input(const Node& n, Window& w, const std::string& fill) {
  if (w.begin == w.end) return n.in(0);
  std::vector<std::int64_t> pad;
  for (int d = w.spatial - 1; d >= 0; --d) {
    pad.push_back(w.begin[d]);
    pad.push_back(w.end[d]);
  }
  w.begin.assign(w.spatial, 0);
  w.end.assign(w.spatial, 0);
  return "torch.constant_pad_nd(" + n.in(0) + ", " + int_list_literal(pad) + ", " + fill + ")";
}

void check_spatial(const Node& n, const Window& w) {
  if (w.spatial < 1 || w.spatial > 3) n.unsupported("has " + std::to_string(w.spatial) + " spatial dims");
}

// Pad (opset 11+): pads [begin..., end...] over every dim, or over the axes of input 3 (18+),
// constants or computed at run time (torchvision's Swin pads to whole windows, F.pad's export
// reverses its list with shape arithmetic). torch takes them last dim first, as one list
// written here at run time. ONNX modes edge and wrap are torch's replicate and circular,
// which (as reflect) pad only the last one to three dims of a tensor with one or two more.
void map_pad(const Node& n) {
  static const std::map<std::string, std::string> kModes = {
      {"constant", "constant"}, {"reflect", "reflect"}, {"edge", "replicate"}, {"wrap", "circular"}};
  if (n.opset() < 11) n.unsupported("takes its pads from attributes (opset < 11)");
  auto mode = kModes.find(n.attr_string("mode", "constant"));
  if (mode == kModes.end()) n.unsupported("pads in mode '" + n.attr_string("mode", "") + "'");
  auto x = n.in(0);
  std::string pads = n.temp("_p"), axes = n.temp("_a"), order = n.temp("_t"), k = n.temp("_k"), d = n.temp("_d");
  n.line(pads + ": List[int] = " + n.int_list(1));
  if (n.has(3)) n.line(axes + ": List[int] = " + n.int_list(3));
  else n.line(axes + ": List[int] = [" + d + " for " + d + " in range(" + x + ".dim())]");
  n.line(order + ": List[int] = [0] * (2 * " + x + ".dim())");
  n.line("for " + k + " in range(len(" + axes + ")):");
  n.line("    " + d + " = " + axes + "[" + k + "]");
  n.line("    if " + d + " < 0:");
  n.line("        " + d + " = " + d + " + " + x + ".dim()");
  n.line("    " + order + "[2 * (" + x + ".dim() - 1 - " + d + ")] = " + pads + "[" + k + "]");
  n.line("    " + order + "[2 * (" + x + ".dim() - 1 - " + d + ") + 1] = " + pads + "[" + k + " + len(" + axes + ")]");
  if (mode->second == "constant") {
    auto value = n.has(2) ? n.in(2) + ".item()" : "0.0";
    return n.assign(0, "torch.constant_pad_nd(" + x + ", " + order + ", " + value + ")");
  }
  // torch pads the last 1-3 dims of a tensor of that many dims and two more (N and C): the
  // list is cut to the dims padded, every dim but two leading ones, and the tensor given
  // leading dims where it has too few (circular wants them all).
  std::string t = n.temp("_x"), added = n.temp("_n"), y = n.temp("_y"), i = n.temp("_i");
  n.line("while len(" + order + ") > 2 and " + order + "[-1] == 0 and " + order + "[-2] == 0:");
  n.line("    " + order + " = " + order + "[:-2]");
  n.line("while len(" + order + ") // 2 < " + x + ".dim() - 2:");
  n.line("    " + order + " = " + order + " + [0, 0]");
  n.line(t + " = " + x);
  n.line(added + " = 0");
  n.line("while " + t + ".dim() < len(" + order + ") // 2 + 2:");
  n.line("    " + t + " = torch.unsqueeze(" + t + ", 0)");
  n.line("    " + added + " = " + added + " + 1");
  n.line(y + " = torch.pad(" + t + ", " + order + ", \"" + mode->second + "\")");
  n.line("for " + i + " in range(" + added + "):");
  n.line("    " + y + " = torch.squeeze(" + y + ", 0)");
  n.assign(0, y);
}

void map_conv(const Node& n) {
  auto w = window_of(n, 1);
  check_spatial(n, w);
  auto x = padded_input(n, w, "0.0");
  auto bias = n.has(2) ? n.in(2) : "None";
  n.assign(0, "torch.conv" + std::to_string(w.spatial) + "d(" + x + ", " + n.in(1) + ", " + bias + ", " +
                  int_list_literal(w.strides) + ", " + int_list_literal(w.begin) + ", " +
                  int_list_literal(w.dilations) + ", " + std::to_string(n.attr_int("group", 1)) + ")");
}

// ConvTranspose: W is [C, M/group, k...]. Symmetric pads with an output_padding torch accepts
// map to torch.conv_transpose directly; otherwise the full result (no pads) is extended by
// output_padding and cut by the pads, and the bias added after. output_shape and SAME pads are
// computed from the input's spatial dims, which do not scale with the batch.
void map_conv_transpose(const Node& n) {
  Window w;
  if (auto kernel = n.attr_ints("kernel_shape")) w.kernel = *kernel;
  else if (auto weight = n.shape(1); weight && weight->size() > 2) w.kernel.assign(weight->begin() + 2, weight->end());
  if (w.kernel.empty()) n.unsupported("has no kernel_shape");
  w.spatial = static_cast<int>(w.kernel.size());
  check_spatial(n, w);
  auto ones = std::vector<std::int64_t>(w.spatial, 1), zeros = std::vector<std::int64_t>(w.spatial, 0);
  w.strides = n.attr_ints("strides").value_or(ones);
  w.dilations = n.attr_ints("dilations").value_or(ones);
  auto pads = n.attr_ints("pads").value_or(std::vector<std::int64_t>(2 * w.spatial, 0));
  auto output_padding = n.attr_ints("output_padding").value_or(zeros);
  if (pads.size() != 2 * w.kernel.size() || w.strides.size() != w.kernel.size() ||
      w.dilations.size() != w.kernel.size() || output_padding.size() != w.kernel.size()) {
    n.unsupported("has pads, strides, dilations or output_padding that do not match its kernel");
  }
  w.begin.assign(pads.begin(), pads.begin() + w.spatial);
  w.end.assign(pads.begin() + w.spatial, pads.end());
  auto auto_pad = n.attr_string("auto_pad", "NOTSET");
  auto output_shape = n.attr_ints("output_shape");
  if (auto_pad == "VALID") {
    w.begin = w.end = zeros;
  } else if (output_shape || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    auto input = n.shape(0);
    if (!input || input->size() != static_cast<std::size_t>(w.spatial) + 2) n.unsupported("pads to a shape of an unknown input");
    if (output_shape && output_shape->size() < static_cast<std::size_t>(w.spatial)) n.unsupported("has a short output_shape");
    for (int d = 0; d < w.spatial; ++d) {
      auto size = (*input)[2 + d];
      if (size <= 0) n.unsupported("pads to a shape of an unknown input");
      auto target = output_shape ? (*output_shape)[output_shape->size() - w.spatial + d] : size * w.strides[d];
      auto total = w.strides[d] * (size - 1) + output_padding[d] + (w.kernel[d] - 1) * w.dilations[d] + 1 - target;
      if (total < 0) n.unsupported("has an output_shape larger than its result");
      bool upper = auto_pad == "SAME_UPPER";
      w.begin[d] = upper ? total / 2 : total - total / 2;
      w.end[d] = total - w.begin[d];
    }
  }
  auto fn = "torch.conv_transpose" + std::to_string(w.spatial) + "d(";
  auto group = std::to_string(n.attr_int("group", 1));
  auto bias = n.has(2) ? n.in(2) : "None";
  bool torch_padding = w.begin == w.end;
  for (int d = 0; d < w.spatial; ++d)
    torch_padding = torch_padding && output_padding[d] < std::max(w.strides[d], w.dilations[d]) && output_padding[d] >= 0;
  if (torch_padding) {
    return n.assign(0, fn + n.in(0) + ", " + n.in(1) + ", " + bias + ", " + int_list_literal(w.strides) + ", " +
                           int_list_literal(w.begin) + ", " + int_list_literal(output_padding) + ", " + group + ", " +
                           int_list_literal(w.dilations) + ")");
  }
  std::string y = n.temp("_y");
  n.line(y + " = " + fn + n.in(0) + ", " + n.in(1) + ", None, " + int_list_literal(w.strides) + ", " +
         int_list_literal(zeros) + ", " + int_list_literal(zeros) + ", " + group + ", " + int_list_literal(w.dilations) +
         ")");
  std::vector<std::int64_t> extend;  // output_padding at the end of each dim, last dim first
  for (int d = w.spatial - 1; d >= 0; --d) {
    extend.push_back(0);
    extend.push_back(output_padding[d]);
  }
  n.line(y + " = torch.constant_pad_nd(" + y + ", " + int_list_literal(extend) + ", 0.0)");
  for (int d = 0; d < w.spatial; ++d) {
    auto dim = std::to_string(2 + d);
    n.line(y + " = torch.slice(" + y + ", " + dim + ", " + int_literal(w.begin[d]) + ", " + y + ".size(" + dim + ") - " +
           int_literal(w.end[d]) + ")");
  }
  if (n.has(2)) {
    std::vector<std::int64_t> shape = {1, -1};
    shape.resize(2 + w.spatial, 1);
    n.line(y + " = torch.add(" + y + ", " + bias + ".reshape(" + int_list_literal(shape) + "))");
  }
  n.assign(0, y);
}

// An int scalar input (Trilu's k, CumSum's axis): the constant, else read at run time.
std::string int_scalar(const Node& n, int input) {
  if (auto known = n.known_ints(input); known && known->size() == 1) return int_literal(known->front());
  return "int(" + n.in(input) + ".item())";
}

void map_trilu(const Node& n) {
  auto k = n.has(1) ? int_scalar(n, 1) : "0";
  auto fn = n.attr_int("upper", 1) ? "torch.triu(" : "torch.tril(";
  n.assign(0, fn + n.in(0) + ", " + k + ")");
}

// CumSum: reverse sums from the end (flip, sum, flip back); exclusive shifts the sums by one
// along the axis, starting from 0. torch.cumsum widens small ints; ONNX keeps the type.
void map_cumsum(const Node& n) {
  std::string axis = n.temp("_c"), x = n.temp("_x"), y = n.temp("_y");
  n.line(axis + " = " + int_scalar(n, 1));
  n.line(x + " = " + n.in(0));
  bool reverse = n.attr_int("reverse", 0) != 0, exclusive = n.attr_int("exclusive", 0) != 0;
  if (reverse) n.line(x + " = torch.flip(" + x + ", [" + axis + "])");
  auto dtype = n.dtype(0);
  std::string keep = is_integral(dtype) ? ", dtype=" + std::to_string(scalar_type(dtype)) : "";
  n.line(y + " = torch.cumsum(" + x + ", " + axis + keep + ")");
  if (exclusive) {
    n.line(y + " = torch.cat([torch.zeros_like(torch.slice(" + y + ", " + axis + ", 0, 1)), torch.slice(" + y + ", " +
           axis + ", 0, -1)], " + axis + ")");
  }
  if (reverse) n.line(y + " = torch.flip(" + y + ", [" + axis + "])");
  n.assign(0, y);
}

// LSTM and GRU. ONNX stacks the gates of W [dirs, G*hidden, input], R [dirs, G*hidden, hidden]
// and B [dirs, 2*G*hidden] (input then recurrence biases) as LSTM i,o,f,c and GRU z,r,h; torch's
// kernels take LSTM i,f,g,o and GRU r,z,n, per direction [w_ih, w_hh, b_ih, b_hh]. The ONNX
// defaults (activations, no clip, no peepholes, no sequence_lens) are what torch computes; GRU
// with linear_before_reset=1 is torch's GRU, and with 0 (the ONNX default) an explicit loop.
// Outputs: Y [seq, dirs, batch, hidden] (layout 1: [batch, seq, dirs, hidden]), Y_h and Y_c
// [dirs, batch, hidden] (layout 1: [batch, dirs, hidden]).
struct Recurrence {
  bool lstm = true;
  int gates = 4;
  int dirs = 1;
  bool reverse = false;  // one direction, from the last step to the first
  bool batch_first = false;
  std::string x, hidden;  // the input as torch takes it ([seq, batch, input] or batch first)
};

std::string reordered_gates(const Node& n, const Recurrence& r, const std::string& stacked) {
  std::string parts = n.temp("_g");
  n.line(parts + " = torch.chunk(" + stacked + ", " + std::to_string(r.gates) + ", 0)");
  if (r.lstm) return "torch.cat([" + parts + "[0], " + parts + "[2], " + parts + "[3], " + parts + "[1]], 0)";
  return "torch.cat([" + parts + "[1], " + parts + "[0], " + parts + "[2]], 0)";
}

void check_recurrence(const Node& n, const Recurrence& r) {
  if (n.has(4)) n.unsupported("takes sequence_lens");
  if (r.lstm && n.has(7)) n.unsupported("has peepholes");
  if (n.attr("clip")) n.unsupported("clips its cell input");
  if (r.lstm && n.attr_int("input_forget", 0) != 0) n.unsupported("couples its input and forget gates");
  if (const auto* a = n.attr("activations")) {
    std::vector<std::string> expected = r.lstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                               : std::vector<std::string>{"Sigmoid", "Tanh"};
    if (a->strings_size() != static_cast<int>(expected.size()) * r.dirs) n.unsupported("has activations other than the defaults");
    for (int i = 0; i < a->strings_size(); ++i) {
      if (a->strings(i) != expected[static_cast<std::size_t>(i) % expected.size()]) {
        n.unsupported("has activations other than the defaults");
      }
    }
  }
}

Recurrence recurrence_of(const Node& n) {
  Recurrence r;
  r.lstm = n.proto().op_type() == "LSTM";
  r.gates = r.lstm ? 4 : 3;
  auto direction = n.attr_string("direction", "forward");
  if (direction == "bidirectional") r.dirs = 2;
  else if (direction == "reverse") r.reverse = true;
  else if (direction != "forward") n.unsupported("has direction '" + direction + "'");
  auto layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1) n.unsupported("has layout " + std::to_string(layout));
  r.batch_first = layout == 1;
  check_recurrence(n, r);
  if (n.attr("hidden_size")) r.hidden = std::to_string(n.attr_int("hidden_size", 0));
  else r.hidden = n.in(2) + ".size(2)";
  r.x = n.in(0);
  if (r.reverse) {
    std::string flipped = n.temp("_x");
    n.line(flipped + " = torch.flip(" + r.x + ", [" + (r.batch_first ? "1" : "0") + "])");
    r.x = flipped;
  }
  return r;
}

// Initial state input i ([dirs, batch, hidden] as torch takes it), zeros when absent.
std::string initial_state(const Node& n, const Recurrence& r, int input) {
  if (n.has(input)) return r.batch_first ? "torch.transpose(" + n.in(input) + ", 0, 1)" : n.in(input);
  std::string batch = r.x + ".size(" + (r.batch_first ? "0" : "1") + ")";
  return r.x + ".new_zeros([" + std::to_string(r.dirs) + ", " + batch + ", " + r.hidden + "])";
}

// Y from torch's output ([seq, batch, dirs*hidden] or batch first), and a final state.
void assign_recurrence_outputs(const Node& n, const Recurrence& r, const std::string& out,
                               const std::vector<std::string>& states) {
  std::string y = out;
  if (r.reverse) y = "torch.flip(" + y + ", [" + (r.batch_first ? "1" : "0") + "])";
  std::string split = y + ".reshape([" + out + ".size(0), " + out + ".size(1), " + std::to_string(r.dirs) + ", " + r.hidden + "])";
  if (n.used(0)) n.assign(0, r.batch_first ? split : "torch.permute(" + split + ", [0, 2, 1, 3])");
  for (std::size_t i = 0; i < states.size(); ++i) {
    int output = static_cast<int>(i) + 1;
    if (n.used(output)) n.assign(output, r.batch_first ? "torch.transpose(" + states[i] + ", 0, 1)" : states[i]);
  }
}

void map_recurrence_with_torch(const Node& n, const Recurrence& r) {
  std::vector<std::string> params;
  for (int d = 0; d < r.dirs; ++d) {
    auto dir = std::to_string(d);
    params.push_back(reordered_gates(n, r, n.in(1) + "[" + dir + "]"));
    params.push_back(reordered_gates(n, r, n.in(2) + "[" + dir + "]"));
    if (n.has(3)) {
      std::string halves = n.temp("_h");
      n.line(halves + " = torch.chunk(" + n.in(3) + "[" + dir + "], 2, 0)");
      params.push_back(reordered_gates(n, r, halves + "[0]"));
      params.push_back(reordered_gates(n, r, halves + "[1]"));
    }
  }
  std::string result = n.temp("_r");
  std::string flags = std::string(n.has(3) ? "True" : "False") + ", 1, 0.0, False, " + (r.dirs == 2 ? "True" : "False") +
                      ", " + (r.batch_first ? "True" : "False") + ")";
  if (r.lstm) {
    n.line(result + " = torch.lstm(" + r.x + ", [" + initial_state(n, r, 5) + ", " + initial_state(n, r, 6) + "], [" +
           join(params) + "], " + flags);
    assign_recurrence_outputs(n, r, result + "[0]", {result + "[1]", result + "[2]"});
  } else {
    n.line(result + " = torch.gru(" + r.x + ", " + initial_state(n, r, 5) + ", [" + join(params) + "], " + flags);
    assign_recurrence_outputs(n, r, result + "[0]", {result + "[1]"});
  }
}

// GRU with linear_before_reset=0: h' = tanh(x Wh^T + (r * h) Rh^T + Wbh + Rbh), step by step.
void map_gru_reset_before_linear(const Node& n, const Recurrence& r) {
  std::string seq = r.batch_first ? "torch.transpose(" + r.x + ", 0, 1)" : r.x;
  std::string xs = n.temp("_x"), outs = n.temp("_o"), finals = n.temp("_f");
  n.line(xs + " = " + seq);
  n.line(outs + ": List[Tensor] = []");
  n.line(finals + ": List[Tensor] = []");
  std::string h0 = n.temp("_s");
  n.line(h0 + " = " + initial_state(n, r, 5));
  for (int d = 0; d < r.dirs; ++d) {
    auto dir = std::to_string(d);
    std::string w = n.temp("_w"), u = n.temp("_u"), b = n.temp("_b"), h = n.temp("_h"), ys = n.temp("_y");
    std::string t = n.temp("_t"), z = n.temp("_z"), g = n.temp("_r"), c = n.temp("_n"), xw = n.temp("_p");
    n.line(w + " = torch.chunk(" + n.in(1) + "[" + dir + "], 3, 0)");
    n.line(u + " = torch.chunk(" + n.in(2) + "[" + dir + "], 3, 0)");
    if (n.has(3)) n.line(b + " = torch.chunk(" + n.in(3) + "[" + dir + "], 6, 0)");
    n.line(h + " = " + h0 + "[" + dir + "]");
    n.line(ys + ": List[Tensor] = []");
    bool backward = d == 1;  // the second direction of bidirectional runs from the end
    n.line("for " + t + " in range(" + xs + ".size(0)):");
    std::string step = backward ? xs + ".size(0) - 1 - " + t : t;
    n.line("    " + xw + " = " + xs + "[" + step + "]");
    auto gate = [&](int k, const std::string& state) {
      auto ks = std::to_string(k);
      std::string expr = "torch.matmul(" + xw + ", torch.t(" + w + "[" + ks + "])) + torch.matmul(" + state +
                         ", torch.t(" + u + "[" + ks + "]))";
      if (n.has(3)) expr += " + " + b + "[" + ks + "] + " + b + "[" + std::to_string(k + 3) + "]";
      return expr;
    };
    n.line("    " + z + " = torch.sigmoid(" + gate(0, h) + ")");
    n.line("    " + g + " = torch.sigmoid(" + gate(1, h) + ")");
    n.line("    " + c + " = torch.tanh(" + gate(2, g + " * " + h) + ")");
    n.line("    " + h + " = (1.0 - " + z + ") * " + c + " + " + z + " * " + h);
    n.line("    " + ys + ".append(" + h + ")");
    if (backward) n.line(ys + ".reverse()");
    n.line(outs + ".append(torch.stack(" + ys + ", 0))");
    n.line(finals + ".append(" + h + ")");
  }
  // [seq, batch, dirs*hidden] as torch gives it, so the outputs are shaped as for the kernels.
  std::string out = n.temp("_y");
  n.line(out + " = torch.cat(" + outs + ", 2)");
  if (r.batch_first) n.line(out + " = torch.transpose(" + out + ", 0, 1)");
  assign_recurrence_outputs(n, r, out, {"torch.stack(" + finals + ", 0)"});
}

void map_recurrence(const Node& n) {
  auto r = recurrence_of(n);
  if (!r.lstm && n.attr_int("linear_before_reset", 0) == 0) return map_gru_reset_before_linear(n, r);
  map_recurrence_with_torch(n, r);
}

void map_max_pool(const Node& n) {
  if (n.used(1)) n.unsupported("returns indices");
  auto w = window_of(n, -1);
  check_spatial(n, w);
  auto x = padded_input(n, w, "float(\"-inf\")");
  n.assign(0, "torch.max_pool" + std::to_string(w.spatial) + "d(" + x + ", " + int_list_literal(w.kernel) + ", " +
                  int_list_literal(w.strides) + ", " + int_list_literal(w.begin) + ", " +
                  int_list_literal(w.dilations) + ", " + (n.attr_int("ceil_mode", 0) ? "True" : "False") + ")");
}

void map_average_pool(const Node& n) {
  auto w = window_of(n, -1);
  check_spatial(n, w);
  if (std::any_of(w.dilations.begin(), w.dilations.end(), [](auto d) { return d != 1; })) n.unsupported("has dilations");
  bool count_pad = n.attr_int("count_include_pad", 0) != 0;
  if (w.begin != w.end && !count_pad) n.unsupported("has asymmetric pads excluded from the average");
  auto x = padded_input(n, w, "0.0");
  n.assign(0, "torch.avg_pool" + std::to_string(w.spatial) + "d(" + x + ", " + int_list_literal(w.kernel) + ", " +
                  int_list_literal(w.strides) + ", " + int_list_literal(w.begin) + ", " +
                  (n.attr_int("ceil_mode", 0) ? "True" : "False") + ", " + (count_pad ? "True" : "False") + ")");
}

// Global pools reduce every dim after N and C.
void map_global_pool(const Node& n) {
  auto x = n.in(0);
  auto rank = n.rank(0);
  std::string dims;
  if (rank) {
    std::vector<std::int64_t> all;
    for (int d = 2; d < *rank; ++d) all.push_back(d);
    dims = int_list_literal(all);
  } else {
    dims = n.temp("_l");
    n.line(dims + ": List[int] = [_d for _d in range(2, " + x + ".dim())]");
  }
  auto reduce = n.proto().op_type() == "GlobalAveragePool" ? "torch.mean(" : "torch.amax(";
  n.assign(0, reduce + x + ", " + dims + ", True)");
}

// Training mode (opset 14+ attribute; older opsets: the extra outputs) normalises with batch
// statistics and updates the running statistics in place, as torch's train-mode batch_norm
// does. ONNX momentum weighs the old statistics: torch's momentum is 1 - it.
void map_batch_norm(const Node& n) {
  bool training = n.opset() >= 14 ? n.attr_int("training_mode", 0) != 0 : n.outputs() > 1;
  // 1 - 0.9f is 0.100000024; the complement of the decimal torch wrote (0.9) is its 0.1.
  double momentum = 1.0 - std::stod(float_literal(n.attr_float("momentum", 0.9)));
  std::string mean = n.in(3), var = n.in(4);
  n.assign(0, "torch.batch_norm(" + n.in(0) + ", " + n.in(1) + ", " + n.in(2) + ", " + mean + ", " + var + ", " +
                  (training ? "True" : "False") + ", " + float_literal(momentum) + ", " +
                  float_literal(n.attr_float("epsilon", 1e-5)) + ", True)");
  if (n.opset() >= 14 && training) {
    if (n.used(1)) n.assign(1, mean);  // updated in place by batch_norm
    if (n.used(2)) n.assign(2, var);
  } else if (n.used(1) || n.used(2) || n.used(3) || n.used(4)) {
    n.unsupported("returns statistics of an older opset");
  }
}

void map_layer_norm(const Node& n) {
  auto x = n.in(0);
  auto axis = std::to_string(n.attr_int("axis", -1));
  auto bias = n.has(2) ? n.in(2) : "None";
  auto eps = float_literal(n.attr_float("epsilon", 1e-5));
  std::string shape = x + ".size()[" + axis + ":]";
  if (!n.used(1) && !n.used(2)) {
    return n.assign(0, "torch.layer_norm(" + x + ", " + shape + ", " + n.in(1) + ", " + bias + ", " + eps + ")");
  }
  std::string parts = n.temp("_n");
  n.line(parts + " = torch.native_layer_norm(" + x + ", " + shape + ", " + n.in(1) + ", " + bias + ", " + eps + ")");
  for (int i = 0; i < n.outputs(); ++i) n.assign(i, parts + "[" + std::to_string(i) + "]");
}

// Opset 13+ normalises along one axis; older opsets over all dims from axis on (as 2-D).
void map_softmax(const Node& n) {
  auto x = n.in(0);
  bool log = n.proto().op_type() == "LogSoftmax";
  auto fn = std::string(log ? "torch.log_softmax(" : "torch.softmax(");
  auto axis = n.attr_int("axis", n.opset() >= 13 ? -1 : 1);
  bool last = axis == -1 || (n.rank(0) && axis == *n.rank(0) - 1);
  if (n.opset() >= 13 || last) return n.assign(0, fn + x + ", " + std::to_string(axis) + ")");
  n.assign(0, fn + "torch.flatten(" + x + ", " + std::to_string(axis) + "), -1).reshape(" + x + ".size())");
}

// Reductions as the aten composition of their ONNX definitions: {0} is the input, {1} the
// dims, {2} keepdim. ReduceProd, whose aten form takes one dim, is map_reduce_prod.
const std::map<std::string, std::string> kReductions = {
    {"ReduceMean", "torch.mean({0}, {1}, {2})"},
    {"ReduceSum", "torch.sum({0}, {1}, {2})"},
    {"ReduceMax", "torch.amax({0}, {1}, {2})"},
    {"ReduceMin", "torch.amin({0}, {1}, {2})"},
    {"ReduceL1", "torch.sum(torch.abs({0}), {1}, {2})"},
    {"ReduceL2", "torch.sqrt(torch.sum(torch.mul({0}, {0}), {1}, {2}))"},
    {"ReduceSumSquare", "torch.sum(torch.mul({0}, {0}), {1}, {2})"},
    {"ReduceLogSum", "torch.log(torch.sum({0}, {1}, {2}))"},
    {"ReduceLogSumExp", "torch.logsumexp({0}, {1}, {2})"},
};

// Every dim of input i: a literal when its rank is known.
std::string all_dims(const Node& n, int i) {
  if (auto rank = n.rank(i)) {
    std::vector<std::int64_t> dims;
    for (int d = 0; d < *rank; ++d) dims.push_back(d);
    return int_list_literal(dims);
  }
  std::string d = n.temp("_d");
  return "[" + d + " for " + d + " in range(" + n.in(i) + ".dim())]";
}

void map_reduce_prod(const Node& n, std::vector<std::int64_t> axes, bool keep);

// Axes from input 1 (ReduceSum 13+, every reduction 18+) or the attribute; no axes reduce every
// dim, or none with noop_with_empty_axes. Axes computed at run time are read then.
void map_reduce(const Node& n) {
  const auto& op = n.proto().op_type();
  auto x = n.in(0);
  std::string keep = n.attr_int("keepdims", 1) ? "True" : "False";
  bool noop = n.attr_int("noop_with_empty_axes", 0) != 0;
  auto known = n.has(1) ? n.known_ints(1) : n.attr_ints("axes").value_or(std::vector<std::int64_t>{});
  if (op == "ReduceProd") {
    if (!known) n.unsupported("takes its axes from a tensor computed at run time");
    if (known->empty() && noop) return n.assign(0, x);
    return map_reduce_prod(n, *known, keep == "True");
  }
  const auto& pattern = kReductions.at(op);
  if (known) {
    if (known->empty() && noop) return n.assign(0, x);
    return n.assign(0, format(pattern, {x, known->empty() ? all_dims(n, 0) : int_list_literal(*known), keep}));
  }
  std::string axes = n.temp("_l"), y = n.temp("_y");
  n.line(axes + ": List[int] = " + n.in(1) + ".tolist()");
  n.line("if len(" + axes + ") == 0:");
  n.line("    " + (noop ? y + " = " + x : axes + " = " + all_dims(n, 0)));
  if (noop) n.line("else:");
  n.line((noop ? "    " : "") + y + " = " + format(pattern, {x, axes, keep}));
  n.assign(0, y);
}

// torch.prod reduces one dim: from the last, so that earlier positions stay put.
void map_reduce_prod(const Node& n, std::vector<std::int64_t> axes, bool keep) {
  auto rank = n.rank(0);
  if (axes.empty() || std::any_of(axes.begin(), axes.end(), [](auto a) { return a < 0; })) {
    if (!rank) n.unsupported("reduces a tensor of unknown rank");
    if (axes.empty())
      for (int d = 0; d < *rank; ++d) axes.push_back(d);
    for (auto& a : axes) a = a < 0 ? a + *rank : a;
  }
  std::sort(axes.rbegin(), axes.rend());
  std::string expr = n.in(0);
  for (auto a : axes) expr = "torch.prod(" + expr + ", " + std::to_string(a) + ", " + (keep ? "True" : "False") + ")";
  n.assign(0, expr);
}

// Dropout drops only when its training_mode input is a true constant (training exports).
void map_dropout(const Node& n) {
  if (n.used(1)) n.unsupported("returns its mask");
  double ratio = n.attr_float("ratio", 0.5);
  if (n.has(1)) {
    const auto* tensor = n.emitter().constant(n.proto().input(1));
    auto dtype = tensor ? ir::dtype_from_onnx(tensor->data_type()) : std::nullopt;
    if (!dtype || numel_of(*tensor) != 1) n.unsupported("has a ratio computed at run time");
    ratio = element_as_double(tensor_bytes(*tensor, *dtype, n.emitter().path()), *dtype, 0);
  }
  bool training = false;
  if (n.has(2)) {
    const auto* tensor = n.emitter().constant(n.proto().input(2));
    if (!tensor || numel_of(*tensor) != 1) n.unsupported("has a training_mode computed at run time");
    training = element_as_int(tensor_bytes(*tensor, ir::DType::kBool, n.emitter().path()), ir::DType::kBool, 0) != 0;
  }
  n.assign(0, training && ratio > 0 ? "torch.dropout(" + n.in(0) + ", " + float_literal(ratio) + ", True)" : n.in(0));
}

void map_clip(const Node& n) {
  if (n.opset() < 11) {
    n.assign(0, "torch.clamp(" + n.in(0) + ", " + float_literal(n.attr_float("min", -INFINITY)) + ", " +
                    float_literal(n.attr_float("max", INFINITY)) + ")");
    return;
  }
  n.assign(0, "torch.clamp(" + n.in(0) + ", " + (n.has(1) ? n.in(1) : "None") + ", " + (n.has(2) ? n.in(2) : "None") +
                  ")");
}

void map_leaky_relu(const Node& n) {
  n.assign(0, "torch.leaky_relu(" + n.in(0) + ", " + float_literal(n.attr_float("alpha", 0.01)) + ")");
}

void map_elu(const Node& n) { n.assign(0, "torch.elu(" + n.in(0) + ", " + float_literal(n.attr_float("alpha", 1.0)) + ")"); }

void map_hard_sigmoid(const Node& n) {
  n.assign(0, "torch.clamp(torch.add(torch.mul(" + n.in(0) + ", " + float_literal(n.attr_float("alpha", 0.2)) + "), " +
                  float_literal(n.attr_float("beta", 0.5)) + "), 0.0, 1.0)");
}

void map_einsum(const Node& n) {
  auto equation = n.attr_string("equation", "");
  if (equation.find_first_of("\"\\") != std::string::npos) n.unsupported("has an equation with quotes");
  std::vector<std::string> operands;
  for (int i = 0; i < n.inputs(); ++i) operands.push_back(n.in(i));
  n.assign(0, "torch.einsum(\"" + equation + "\", [" + join(operands) + "])");
}

// ---------------------------------------------------------------------------------------------
// Ops of opsets 18-23 (onnx_opsets.h)
// ---------------------------------------------------------------------------------------------

void map_gelu(const Node& n) {
  auto approximate = n.attr_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") n.unsupported("approximates GELU by '" + approximate + "'");
  n.assign(0, "torch.gelu(" + n.in(0) + (approximate == "tanh" ? ", approximate=\"tanh\")" : ")"));
}

void map_instance_norm(const Node& n) {
  n.assign(0, "torch.instance_norm(" + n.in(0) + ", " + n.in(1) + ", " + n.in(2) + ", None, None, True, 0.0, " +
                  float_literal(n.attr_float("epsilon", 1e-5)) + ", False)");
}

// GroupNormalization: opset 21 scales and shifts each channel, as torch does; opsets 18-20
// each group, so their scale and bias are repeated over the channels of a group.
void map_group_norm(const Node& n) {
  auto x = n.in(0);
  auto groups = std::to_string(n.attr_int("num_groups", 1));
  auto scale = n.in(1), bias = n.in(2);
  if (n.opset() < 21) {
    std::string per_group = ", " + x + ".size(1) // " + groups + ", 0)";
    scale = "torch.repeat_interleave(" + scale + per_group;
    bias = "torch.repeat_interleave(" + bias + per_group;
  }
  n.assign(0, "torch.group_norm(" + x + ", " + groups + ", " + scale + ", " + bias + ", " +
                  float_literal(n.attr_float("epsilon", 1e-5)) + ", False)");
}

// RMSNormalization (23): x / sqrt(mean(x^2 over the dims from axis on) + epsilon) * scale.
void map_rms_norm(const Node& n) {
  auto x = n.in(0);
  auto axis = n.attr_int("axis", -1);
  std::string dims;
  if (auto rank = n.rank(0)) {
    std::vector<std::int64_t> list;
    for (auto d = axis < 0 ? axis + *rank : axis; d < *rank; ++d) list.push_back(d);
    dims = int_list_literal(list);
  } else {
    std::string d = n.temp("_d");
    dims = "[" + d + " for " + d + " in range(" + n.axis(axis, 0) + ", " + x + ".dim())]";
  }
  std::string mean_square = "torch.mean(torch.mul(" + x + ", " + x + "), " + dims + ", True)";
  n.assign(0, "torch.mul(torch.mul(" + x + ", torch.rsqrt(torch.add(" + mean_square + ", " +
                  float_literal(n.attr_float("epsilon", 1e-5)) + "))), " + n.in(1) + ")");
}

// RotaryEmbedding (23): X is [B, heads, S, D] or [B, S, heads * D]; the first
// rotary_embedding_dim (default D) of each head turn by the angles of cos and sin ([B, S, r/2],
// or [positions, r/2] looked up by position_ids), as halves or (interleaved) as even/odd pairs.
void map_rotary_embedding(const Node& n) {
  auto x = n.in(0);
  auto rank = n.rank(0);
  if (rank != 3 && rank != 4) n.unsupported("rotates a tensor that is not 3-D or 4-D");
  auto heads = n.attr_int("num_heads", 0);
  if (rank == 3 && heads <= 0) n.unsupported("takes a 3-D input without num_heads");
  std::string h = n.temp("_x"), rd = n.temp("_r"), rot = n.temp("_o"), pass = n.temp("_q");
  std::string c = n.temp("_c"), s = n.temp("_s"), x1 = n.temp("_u"), x2 = n.temp("_v"), y = n.temp("_y");
  n.line(h + " = " + (rank == 4 ? "torch.transpose(" + x + ", 1, 2)"
                                : x + ".reshape([" + x + ".size(0), " + x + ".size(1), " + std::to_string(heads) + ", -1])"));
  auto dim = n.attr_int("rotary_embedding_dim", 0);
  n.line(rd + " = " + (dim > 0 ? std::to_string(dim) : h + ".size(3)"));
  n.line(rot + " = torch.slice(" + h + ", 3, 0, " + rd + ")");
  n.line(pass + " = torch.slice(" + h + ", 3, " + rd + ", " + h + ".size(3))");
  auto angle = [&](int input) {
    return n.has(3) ? "torch.embedding(" + n.in(input) + ", " + n.in(3) + ".to(" + n.in(input) + ".device))" : n.in(input);
  };
  n.line(c + " = torch.unsqueeze(" + angle(1) + ", 2)");
  n.line(s + " = torch.unsqueeze(" + angle(2) + ", 2)");
  bool interleaved = n.attr_int("interleaved", 0) != 0;
  if (interleaved) {
    n.line(x1 + " = torch.slice(" + rot + ", 3, 0, " + rd + ", 2)");
    n.line(x2 + " = torch.slice(" + rot + ", 3, 1, " + rd + ", 2)");
  } else {
    std::string halves = n.temp("_h");
    n.line(halves + " = torch.chunk(" + rot + ", 2, 3)");
    n.line(x1 + " = " + halves + "[0]");
    n.line(x2 + " = " + halves + "[1]");
  }
  std::string real = "torch.sub(torch.mul(" + c + ", " + x1 + "), torch.mul(" + s + ", " + x2 + "))";
  std::string imag = "torch.add(torch.mul(" + s + ", " + x1 + "), torch.mul(" + c + ", " + x2 + "))";
  std::string turned = interleaved ? "torch.stack([" + real + ", " + imag + "], -1).reshape(" + rot + ".size())"
                                   : "torch.cat([" + real + ", " + imag + "], -1)";
  n.line(y + " = torch.cat([" + turned + ", " + pass + "], -1)");
  n.assign(0, rank == 4 ? "torch.transpose(" + y + ", 1, 2)" : y + ".reshape(" + x + ".size())");
}

// Attention (23), composed of matmul and softmax (libtorch 1.13 has no
// scaled_dot_product_attention), as the ONNX reference computes it (with its errata: grouped
// K/V heads repeat each head in place, softcap comes before the mask, and the causal mask lets
// query i see keys up to i + the past's length). Q, K, V are [B, heads, S, E] or [B, S,
// heads * E] with the head counts as attributes; attn_mask is boolean (True: attend) or added,
// and a shorter one is padded with masked keys. Outputs: Y; the present key and value (the past
// followed by K and V); the QK product after the step qk_matmul_output_mode names (0: scaled
// product, 1: softcap, 2: mask, 3: softmax).
struct AttentionInputs {
  std::string q, k, v;  // 4-D
  std::string past;     // the past's length
};

AttentionInputs attention_heads(const Node& n) {
  auto rank = n.rank(0);
  if (rank != 3 && rank != 4) n.unsupported("attends over tensors that are not 3-D or 4-D");
  AttentionInputs a{n.temp("_q"), n.temp("_k"), n.temp("_v"), "0"};
  auto heads = [&](int input, const std::string& attribute) {
    if (rank == 4) return n.in(input);
    auto count = n.attr_int(attribute, 0);
    if (count <= 0) n.unsupported("takes 3-D inputs without " + attribute);
    auto t = n.in(input);
    return "torch.transpose(" + t + ".reshape([" + t + ".size(0), " + t + ".size(1), " + std::to_string(count) +
           ", -1]), 1, 2)";
  };
  n.line(a.q + " = " + heads(0, "q_num_heads"));
  n.line(a.k + " = " + heads(1, "kv_num_heads"));
  n.line(a.v + " = " + heads(2, "kv_num_heads"));
  if (n.has(4)) {
    a.past = n.in(4) + ".size(2)";
    n.line(a.k + " = torch.cat([" + n.in(4) + ", " + a.k + "], 2)");
  }
  if (n.has(5)) n.line(a.v + " = torch.cat([" + n.in(5) + ", " + a.v + "], 2)");
  if (n.used(1)) n.assign(1, a.k);
  if (n.used(2)) n.assign(2, a.v);
  return a;
}

// The additive bias of attn_mask and is_causal, [.., S, L], or empty when there is none.
std::string attention_bias(const Node& n, const AttentionInputs& a) {
  std::string bias;
  auto options = ", dtype=" + a.q + ".dtype, device=" + a.q + ".device)";
  if (n.has(3)) {
    auto mask = n.in(3) + ".to(" + a.q + ".device)";  // a small constant mask is inline, on the CPU
    bias = n.temp("_m");
    if (n.dtype(3) == ir::DType::kBool) {
      n.line(bias + " = torch.masked_fill(torch.zeros(" + mask + ".size()" + options + ", torch.logical_not(" + mask +
             "), float(\"-inf\"))");
    } else {
      n.line(bias + " = " + mask);
    }
    n.line("if " + bias + ".size(-1) < " + a.k + ".size(2):");
    n.line("    " + bias + " = torch.constant_pad_nd(" + bias + ", [0, " + a.k + ".size(2) - " + bias +
           ".size(-1)], float(\"-inf\"))");
  }
  if (n.attr_int("is_causal", 0)) {
    std::string causal = "torch.triu(torch.full([" + a.q + ".size(2), " + a.k + ".size(2)], float(\"-inf\")" + options +
                         ", " + a.past + " + 1)";
    if (bias.empty()) return causal;
    n.line(bias + " = torch.add(" + bias + ", " + causal + ")");
  }
  return bias;
}

void map_attention(const Node& n) {
  auto mode = n.attr_int("qk_matmul_output_mode", 0);
  if (mode < 0 || mode > 3) n.unsupported("has qk_matmul_output_mode " + std::to_string(mode));
  auto a = attention_heads(n);
  std::string k = n.temp("_k"), v = n.temp("_v"), scores = n.temp("_w"), probs = n.temp("_p"), y = n.temp("_y");
  // Grouped-query attention: each K/V head serves the query heads next to each other.
  n.line(k + " = " + a.k);
  n.line(v + " = " + a.v);
  n.line("if " + a.q + ".size(1) != " + a.k + ".size(1):");
  n.line("    " + k + " = torch.repeat_interleave(" + a.k + ", " + a.q + ".size(1) // " + a.k + ".size(1), 1)");
  n.line("    " + v + " = torch.repeat_interleave(" + a.v + ", " + a.q + ".size(1) // " + a.v + ".size(1), 1)");
  std::string scale = n.attr("scale") ? float_literal(n.attr_float("scale", 1.0))
                                      : "1.0 / (float(" + a.q + ".size(3)) ** 0.5)";
  n.line(scores + " = torch.mul(torch.matmul(" + a.q + ", torch.transpose(" + k + ", -2, -1)), " + scale + ")");
  auto stage_output = [&](int step) {
    if (mode == step && n.used(3)) n.assign(3, step == 3 ? probs : scores);
  };
  stage_output(0);
  if (auto cap = n.attr_float("softcap", 0.0); cap > 0) {
    n.line(scores + " = torch.mul(torch.tanh(torch.div(" + scores + ", " + float_literal(cap) + ")), " +
           float_literal(cap) + ")");
  }
  stage_output(1);
  auto bias = attention_bias(n, a);
  if (!bias.empty()) n.line(scores + " = torch.add(" + scores + ", " + bias + ")");
  stage_output(2);
  if (n.attr("softmax_precision")) {
    int type = scalar_type_of_onnx(n, static_cast<int>(n.attr_int("softmax_precision", 1)));
    n.line(probs + " = torch.softmax(" + scores + ".to(" + std::to_string(type) + "), -1).to(" + a.q + ".dtype)");
  } else {
    n.line(probs + " = torch.softmax(" + scores + ", -1)");
  }
  stage_output(3);
  n.line(y + " = torch.matmul(" + probs + ", " + v + ")");
  n.assign(0, n.rank(0) == 4 ? y : "torch.transpose(" + y + ", 1, 2).reshape([" + y + ".size(0), " + y + ".size(2), -1])");
}

// Resize, one axis at a time, as the ONNX reference computes it: output position o maps to the
// input coordinate x (coordinate_transformation_mode); nearest picks one input, linear and
// cubic weigh the taps around x with their kernel (stretched by 1 / scale where antialias
// downscales, then normalised), edge values repeating beyond the ends. The taps are gathered
// with index_select, so the gradient flows to the input. Coordinates and weights are float64,
// as the reference's.
const std::map<std::string, std::string> kResizeCoordinates = {
    // {o}: output positions, {s}: scale, {n}: input size, {w}: output size (float, scale * n)
    {"half_pixel", "({o} + 0.5) / {s} - 0.5"},
    {"asymmetric", "{o} / {s}"},
    {"pytorch_half_pixel", "({o} + 0.5) / {s} - 0.5 if {w} != 1.0 else torch.full_like({o}, -0.5)"},
    {"align_corners", "{o} * (float({n}) - 1.0) / ({w} - 1.0) if {w} != 1.0 else torch.zeros_like({o})"},
    {"half_pixel_symmetric",
     "float({n}) / 2.0 * (1.0 - float({z}) / {w}) + ({o} + 0.5) / {s} - 0.5"},  // {z}: output size (int)
};
const std::map<std::string, std::string> kNearestRounding = {
    {"round_prefer_floor", "torch.ceil({0} - 0.5)"},
    {"round_prefer_ceil", "torch.floor({0} + 0.5)"},
    {"floor", "torch.floor({0})"},
    {"ceil", "torch.ceil({0})"},
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (auto at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) text.replace(at, from.size(), to);
  return text;
}

// The kernel of linear or cubic interpolation at float64 distances d ([taps, out]).
std::string resize_kernel(const Node& n, bool cubic, const std::string& d) {
  if (!cubic) return "torch.clamp(1.0 - torch.abs(" + d + "), 0.0, 1.0)";
  double a = n.attr_float("cubic_coeff_a", -0.75);
  auto A = [&](double k) { return float_literal(k * a, false); };
  std::string t = n.temp("_t");
  n.line("        " + t + " = torch.abs(" + d + ")");
  return "torch.where(" + t + " <= 1.0, ((" + float_literal(a + 2, false) + " * " + t + " - " + float_literal(a + 3, false) +
         ") * " + t + " * " + t + " + 1.0), torch.where(" + t + " < 2.0, ((" + A(1) + " * " + t + " - " + A(5) + ") * " + t +
         " + " + A(8) + ") * " + t + " - " + A(4) + ", torch.zeros_like(" + t + ")))";
}

// The lines that resample `y` along dim `d` to `size` outputs at `scale`; indented in a loop.
void resample_axis(const Node& n, const std::string& y, const std::string& d, const std::string& size,
                   const std::string& scale) {
  const std::string in = "        ";
  auto mode = n.attr_string("mode", "nearest");
  auto coordinates = kResizeCoordinates.find(n.attr_string("coordinate_transformation_mode", "half_pixel"));
  if (coordinates == kResizeCoordinates.end()) {
    n.unsupported("maps coordinates by '" + n.attr_string("coordinate_transformation_mode", "") + "'");
  }
  std::string count = n.temp("_n"), o = n.temp("_o"), x = n.temp("_x");
  n.line(in + count + " = " + y + ".size(" + d + ")");
  n.line(in + o + " = torch.arange(" + size + ", dtype=7, device=" + y + ".device)");
  std::string w = "(" + scale + " * float(" + count + "))";
  std::string coordinate = replace_all(replace_all(replace_all(replace_all(coordinates->second, "{o}", o), "{s}", scale),
                                                   "{n}", count), "{w}", w);
  n.line(in + x + " = " + replace_all(coordinate, "{z}", size));
  if (mode == "nearest") {
    auto rounding = kNearestRounding.find(n.attr_string("nearest_mode", "round_prefer_floor"));
    if (rounding == kNearestRounding.end()) n.unsupported("rounds by '" + n.attr_string("nearest_mode", "") + "'");
    n.line(in + y + " = torch.index_select(" + y + ", " + d + ", torch.clamp(" + format(rounding->second, {x}) + ", 0.0, float(" +
           count + " - 1)).to(4))");
    return;
  }
  if (mode != "linear" && mode != "cubic") n.unsupported("interpolates by '" + mode + "'");
  bool cubic = mode == "cubic", antialias = n.attr_int("antialias", 0) != 0;
  bool exclude = n.attr_int("exclude_outside", 0) != 0;
  // Taps from `first` on, around x's integer below (ratio in (0, 1]), reach (1 or 2) / stretch.
  std::string stretch = n.temp("_s"), reach = n.temp("_q"), first = n.temp("_f"), base = n.temp("_b");
  std::string taps = n.temp("_t"), weight = n.temp("_w"), index = n.temp("_j"), shape = n.temp("_l"), acc = n.temp("_y");
  std::string m = n.temp("_m"), e = n.temp("_e");
  n.line(in + stretch + " = " + (antialias ? "min(" + scale + ", 1.0)" : "1.0"));
  n.line(in + reach + " = -" + (cubic ? "2.0" : "1.0") + " / " + stretch);
  n.line(in + first + " = int(" + reach + ")");
  n.line(in + "if float(" + first + ") > " + reach + ":");
  n.line(in + "    " + first + " = " + first + " - 1");
  n.line(in + first + " = " + first + " + 1");
  n.line(in + base + " = torch.ceil(" + x + ") - 1.0");
  n.line(in + taps + " = torch.unsqueeze(torch.arange(" + first + ", 2 - " + first + ", dtype=7, device=" + y + ".device), 1)");
  n.line(in + weight + " = " + resize_kernel(n, cubic, "(" + taps + " - torch.unsqueeze(" + x + " - " + base + ", 0)) * " + stretch));
  n.line(in + index + " = " + taps + " + torch.unsqueeze(" + base + ", 0)");
  if (exclude) {
    n.line(in + weight + " = torch.where((" + index + " < 0.0) | (" + index + " > float(" + count + " - 1)), torch.zeros_like(" +
           weight + "), " + weight + ")");
  }
  if (antialias || exclude) n.line(in + weight + " = " + weight + " / torch.sum(" + weight + ", 0, True)");
  n.line(in + index + " = torch.clamp(" + index + ", 0.0, float(" + count + " - 1)).to(4)");
  n.line(in + weight + " = " + weight + ".to(" + y + ".dtype)");
  n.line(in + shape + ": List[int] = [1 for " + e + " in range(" + y + ".dim())]");
  n.line(in + shape + "[" + d + "] = " + size);
  n.line(in + acc + " = torch.index_select(" + y + ", " + d + ", " + index + "[0]) * " + weight + "[0].reshape(" + shape + ")");
  n.line(in + "for " + m + " in range(1, " + index + ".size(0)):");
  n.line(in + "    " + acc + " = " + acc + " + torch.index_select(" + y + ", " + d + ", " + index + "[" + m + "]) * " + weight + "[" +
         m + "].reshape(" + shape + ")");
  n.line(in + y + " = " + acc);
}

// Resize (opsets 11-19): scales (input 2) or sizes (input 3) for every dim or, from opset 18,
// for the dims of `axes`, the sizes under keep_aspect_ratio_policy. Axes at scale 1 and of the
// same size are left alone, so N and C cost nothing.
void map_resize(const Node& n) {
  if (n.attr_string("mode", "nearest") == "nearest" && n.attr_int("antialias", 0)) n.unsupported("antialiases nearest");
  auto x = n.in(0);
  std::string axes = n.temp("_a"), sizes = n.temp("_z"), scales = n.temp("_c"), k = n.temp("_k"), d = n.temp("_d");
  std::string y = n.temp("_y");
  if (auto list = n.attr_ints("axes")) n.line(axes + ": List[int] = " + int_list_literal(*list));
  else n.line(axes + ": List[int] = [" + d + " for " + d + " in range(" + x + ".dim())]");
  n.line("for " + k + " in range(len(" + axes + ")):");
  n.line("    if " + axes + "[" + k + "] < 0:");
  n.line("        " + axes + "[" + k + "] = " + axes + "[" + k + "] + " + x + ".dim()");
  auto in_size = [&](const std::string& index) { return "float(" + x + ".size(" + axes + "[" + index + "]))"; };
  if (n.has(3)) {
    n.line(sizes + ": List[int] = " + n.int_list(3));
    n.line(scales + ": List[float] = [float(" + sizes + "[" + k + "]) / " + in_size(k) + " for " + k + " in range(len(" +
           axes + "))]");
    auto policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "not_larger" || policy == "not_smaller") {
      std::string s = n.temp("_s");
      n.line(s + " = " + (policy == "not_larger" ? "min(" : "max(") + scales + ")");
      n.line(scales + " = [" + s + " for " + k + " in range(len(" + axes + "))]");
      n.line(sizes + " = [int(" + s + " * " + in_size(k) + " + 0.5) for " + k + " in range(len(" + axes + "))]");
    } else if (policy != "stretch") {
      n.unsupported("keeps the aspect ratio by '" + policy + "'");
    }
  } else {
    n.line(scales + ": List[float] = " + n.in(2) + ".tolist()");
    n.line(sizes + ": List[int] = [int(" + in_size(k) + " * " + scales + "[" + k + "]) for " + k + " in range(len(" + axes +
           "))]");
  }
  n.line(y + " = " + x);
  n.line("for " + k + " in range(len(" + axes + ")):");
  n.line("    if " + sizes + "[" + k + "] != " + y + ".size(" + axes + "[" + k + "]) or " + scales + "[" + k + "] != 1.0:");
  resample_axis(n, y, axes + "[" + k + "]", sizes + "[" + k + "]", scales + "[" + k + "]");
  n.assign(0, y);
}

// ScatterElements: reductions of opsets 16 and 18 are scatter_reduce's, with the input's own
// values included; negative indices count from the end.
void map_scatter_elements(const Node& n) {
  static const std::map<std::string, std::string> kReduce = {
      {"add", "sum"}, {"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
  auto data = n.in(0), indices = n.in(1);
  auto axis = n.axis(n.attr_int("axis", 0), 0);
  std::string index = n.temp("_i");
  // Small constant indices are written inline, on the CPU: moved to the data's device.
  n.line(index + " = torch.where(" + indices + " < 0, " + indices + " + " + data + ".size(" + axis + "), " + indices + ").to(" +
         data + ".device)");
  auto reduction = n.attr_string("reduction", "none");
  if (reduction == "none") return n.assign(0, "torch.scatter(" + data + ", " + axis + ", " + index + ", " + n.in(2) + ")");
  auto reduce = kReduce.find(reduction);
  if (reduce == kReduce.end()) n.unsupported("reduces by '" + reduction + "'");
  n.assign(0, "torch.scatter_reduce(" + data + ", " + axis + ", " + index + ", " + n.in(2) + ", \"" + reduce->second +
                  "\", include_self=True)");
}

// ScatterND: the last dim of indices addresses the first k dims of data; with them flattened
// into one (a row-major linear index), it is index_put (add: accumulating) or index_reduce.
void map_scatter_nd(const Node& n) {
  static const std::map<std::string, std::string> kReduce = {{"mul", "prod"}, {"max", "amax"}, {"min", "amin"}};
  auto data = n.in(0), indices = n.in(1);
  std::string linear = n.temp("_i"), m = n.temp("_m"), c = n.temp("_c"), rest = n.temp("_r"), flat = n.temp("_f");
  std::string where = n.temp("_w");
  n.line(linear + " = torch.zeros_like(torch.select(" + indices + ", -1, 0))");
  n.line("for " + m + " in range(" + indices + ".size(-1)):");
  n.line("    " + c + " = torch.select(" + indices + ", -1, " + m + ")");
  n.line("    " + c + " = torch.where(" + c + " < 0, " + c + " + " + data + ".size(" + m + "), " + c + ")");
  n.line("    " + linear + " = " + linear + " * " + data + ".size(" + m + ") + " + c);
  n.line(rest + ": List[int] = " + data + ".size()[" + indices + ".size(-1):]");
  n.line(flat + " = " + data + ".reshape([-1] + " + rest + ")");
  std::string updates = n.in(2) + ".reshape([-1] + " + rest + ")";
  n.line(linear + " = " + linear + ".reshape([-1]).to(" + data + ".device)");  // from inline indices, on the CPU
  n.line(where + ": List[Optional[Tensor]] = [" + linear + "]");
  auto reduction = n.attr_string("reduction", "none");
  std::string scattered;
  if (reduction == "none" || reduction == "add") {
    scattered = "torch.index_put(" + flat + ", " + where + ", " + updates + (reduction == "add" ? ", True)" : ")");
  } else if (auto reduce = kReduce.find(reduction); reduce != kReduce.end()) {
    scattered = "torch.index_reduce(" + flat + ", 0, " + linear + ", " + updates + ", \"" + reduce->second +
                "\", include_self=True)";
  } else {
    n.unsupported("reduces by '" + reduction + "'");
  }
  n.assign(0, scattered + ".reshape(" + data + ".size())");
}

const std::map<std::string, Mapping>& mappings() {
  static const std::map<std::string, Mapping> table = [] {
    std::map<std::string, Mapping> m = {
        {"Div", map_div},
        {"Mod", map_mod},
        {"Sum", map_variadic},
        {"Max", map_variadic},
        {"Min", map_variadic},
        {"Constant", map_constant},
        {"Shape", map_shape},
        {"Size", map_size},
        {"Cast", map_cast},
        {"ConstantOfShape", map_constant_of_shape},
        {"Gather", map_gather},
        {"GatherElements", map_gather_elements},
        {"Transpose", map_transpose},
        {"Reshape", map_reshape},
        {"Flatten", map_flatten},
        {"Unsqueeze", map_unsqueeze},
        {"Squeeze", map_squeeze},
        {"Concat", map_concat},
        {"Split", map_split},
        {"Slice", map_slice},
        {"Expand", map_expand},
        {"Tile", map_tile},
        {"Range", map_range},
        {"Gemm", map_gemm},
        {"Conv", map_conv},
        {"ConvTranspose", map_conv_transpose},
        {"Trilu", map_trilu},
        {"CumSum", map_cumsum},
        {"LSTM", map_recurrence},
        {"GRU", map_recurrence},
        {"Pad", map_pad},
        {"MaxPool", map_max_pool},
        {"AveragePool", map_average_pool},
        {"GlobalAveragePool", map_global_pool},
        {"GlobalMaxPool", map_global_pool},
        {"BatchNormalization", map_batch_norm},
        {"LayerNormalization", map_layer_norm},
        {"InstanceNormalization", map_instance_norm},
        {"GroupNormalization", map_group_norm},
        {"RMSNormalization", map_rms_norm},
        {"RotaryEmbedding", map_rotary_embedding},
        {"Attention", map_attention},
        {"Gelu", map_gelu},
        {"ScatterElements", map_scatter_elements},
        {"ScatterND", map_scatter_nd},
        {"Resize", map_resize},
        {"Softmax", map_softmax},
        {"LogSoftmax", map_softmax},
        {"ReduceProd", map_reduce},
        {"Dropout", map_dropout},
        {"Clip", map_clip},
        {"LeakyRelu", map_leaky_relu},
        {"Elu", map_elu},
        {"HardSigmoid", map_hard_sigmoid},
        {"Einsum", map_einsum},
    };
    for (const auto& [op, pattern] : kElementwise) m[op] = map_elementwise;
    for (const auto& [op, pattern] : kReductions) m[op] = map_reduce;
    return m;
  }();
  return table;
}

}  // namespace

StageSource onnx_stage_source(const std::string& model_path, const onnx::ModelProto& model, const ir::Graph& graph,
                              const emit::StageLayout& stage, int tensor_rank) {
  return StageEmitter(model_path, model, graph, stage, tensor_rank).run();
}

}  // namespace rannc
