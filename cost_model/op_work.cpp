#include "cost_model/op_work.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>

namespace rannc::cost {
namespace {

// Which kinds are which: ir/op_kinds.def.
using ir::has_op_trait;
using namespace ir::op_trait;

const ir::TensorType* tensor_input(const ir::Graph& graph, const ir::Op& op, std::size_t index) {
  if (index >= op.inputs.size()) return nullptr;
  const auto& value = graph.value(op.inputs[index]);
  return value.is_tensor() && value.type.shape_known() ? &value.type : nullptr;
}

double first_output_numel(const ir::Graph& graph, const ir::Op& op) {
  if (op.outputs.empty()) return 0;
  const auto& value = graph.value(op.outputs.front());
  return value.is_tensor() ? static_cast<double>(value.type.numel()) : 0;
}

double last_dim(const ir::TensorType* type) {
  return type && !type->shape.empty() ? static_cast<double>(type->shape.back()) : 0;
}

bool has_value(const ir::Graph& graph, const ir::Op& op, std::size_t index) {
  return index < op.inputs.size() && graph.value(op.inputs[index]).kind != ir::ValueKind::kNone;
}

bool literal_true(const ir::Graph& graph, const ir::Op& op, std::size_t index) {
  if (index >= op.inputs.size()) return false;
  const auto* flag = std::get_if<bool>(&graph.value(op.inputs[index]).literal);
  return flag && *flag;
}

// The contraction length K of a matrix product: out = 2 * numel(out) * K FLOPs.
double contraction_length(const ir::Graph& graph, const ir::Op& op) {
  if (op.kind == "aten::addmm" || op.kind == "aten::baddbmm") return last_dim(tensor_input(graph, op, 1));
  if (op.kind == "aten::addbmm") {  // sums the b products into one [n, p] output: K is b * k
    const auto* batch1 = tensor_input(graph, op, 1);
    return batch1 && batch1->shape.size() == 3 ? static_cast<double>(batch1->shape[0] * batch1->shape[2]) : 0;
  }
  if (op.kind == "onnx::Gemm") {
    const auto* a = tensor_input(graph, op, 0);
    auto trans = op.attrs.find("transA");
    const auto* flag = trans == op.attrs.end() ? nullptr : std::get_if<std::int64_t>(&trans->second);
    bool transposed = flag && *flag != 0;
    return a && a->shape.size() == 2 ? static_cast<double>(a->shape[transposed ? 0 : 1]) : 0;
  }
  return last_dim(tensor_input(graph, op, 0));
}

// The products alone, without the bias addition: what each gradient of an operand costs too.
double product_flops(const ir::Graph& graph, const ir::Op& op) {
  return 2 * first_output_numel(graph, op) * contraction_length(graph, op);
}

// ONNX recurrences: X [seq, batch, input] (layout 1: batch first), W [dirs, G*hidden, input],
// R [dirs, G*hidden, hidden] with G = 4 (LSTM), 3 (GRU) or 1 (RNN): every step multiplies the
// step's input by W and the state by R, 2 FLOPs per multiply-add.
bool is_recurrence(const ir::Op& op) { return has_op_trait(op.kind, kRecurrence); }

double recurrence_flops(const ir::Graph& graph, const ir::Op& op) {
  const auto* x = tensor_input(graph, op, 0);
  const auto* w = tensor_input(graph, op, 1);
  const auto* r = tensor_input(graph, op, 2);
  if (!x || !w || !r || x->shape.size() != 3 || w->shape.size() != 3 || r->shape.size() != 3) return 0;
  double steps_times_batch = static_cast<double>(x->shape[0]) * static_cast<double>(x->shape[1]);
  double per_sample = static_cast<double>(w->shape[0]) * static_cast<double>(w->shape[1]) *
                      (static_cast<double>(w->shape[2]) + static_cast<double>(r->shape[2]));
  return 2 * steps_times_batch * per_sample;
}

// Fused attention, softmax(Q K^T) V: queries [..., L, E], keys [..., S, E] (ONNX's 3-D form
// [B, S, H*E] too), so the two products cost 2 S (numel(Q) + numel(out)), the softmax 5 per score.
bool is_attention(const ir::Op& op) { return has_op_trait(op.kind, kFusedAttention); }

double attention_flops(const ir::Graph& graph, const ir::Op& op) {
  const auto* q = tensor_input(graph, op, 0);
  const auto* k = tensor_input(graph, op, 1);
  if (!q || !k || k->shape.size() < 2 || q->shape.empty()) return 0;
  double keys = static_cast<double>(k->shape[k->shape.size() - 2]);
  double scores = static_cast<double>(q->numel()) / std::max<double>(last_dim(q), 1) * keys;
  return 2 * keys * (static_cast<double>(q->numel()) + first_output_numel(graph, op)) + 5 * scores;
}

double matmul_flops(const ir::Graph& graph, const ir::Op& op) {
  if (is_recurrence(op)) return recurrence_flops(graph, op);
  if (is_attention(op)) return attention_flops(graph, op);
  bool bias = (op.kind == "aten::linear" && has_value(graph, op, 2)) || op.kind == "aten::addmm" ||
              op.kind == "aten::baddbmm" || op.kind == "aten::addbmm" || (op.kind == "onnx::Gemm" && has_value(graph, op, 2));
  return product_flops(graph, op) + (bias ? first_output_numel(graph, op) : 0);
}

bool is_transposed_conv(const ir::Graph& graph, const ir::Op& op) {
  if (has_op_trait(op.kind, kTransposedConv)) return true;
  return (op.kind == "aten::_convolution" || op.kind == "aten::convolution") && literal_true(graph, op, 6);
}

// Each output element of a convolution is a dot product over Cin/groups x kernel (the weight's
// dims after the first); a transposed convolution scatters each input element the same way.
double conv_flops(const ir::Graph& graph, const ir::Op& op) {
  const auto* weight = tensor_input(graph, op, 1);
  if (!weight) return 0;
  double per_element = 1;
  for (std::size_t i = 1; i < weight->shape.size(); ++i) per_element *= static_cast<double>(weight->shape[i]);
  const auto* input = tensor_input(graph, op, 0);
  double elements = is_transposed_conv(graph, op) ? (input ? static_cast<double>(input->numel()) : 0)
                                                  : first_output_numel(graph, op);
  return 2 * elements * per_element;
}

// A bag sums its looked-up rows: one add per looked-up element.
double embedding_flops(const ir::Graph& graph, const ir::Op& op) {
  if (!has_op_trait(op.kind, kSumsBags)) return 0;
  const auto* weight = tensor_input(graph, op, 0);
  const auto* indices = tensor_input(graph, op, 1);
  return weight && indices ? static_cast<double>(indices->numel()) * last_dim(weight) : 0;
}

double input_numel(const ir::Graph& graph, const ir::Op& op) {
  const auto* input = tensor_input(graph, op, 0);
  return input ? static_cast<double>(input->numel()) : 0;
}

double tensor_bytes(const ir::Graph& graph, const std::vector<ir::ValueId>& ids) {
  double bytes = 0;
  for (auto id : ids) {
    const auto& value = graph.value(id);
    if (value.is_tensor()) bytes += static_cast<double>(value.type.bytes());
  }
  return bytes;
}


// Reshaping views cost nothing backward; these slicing and expanding ones scatter or sum into a
// gradient of the input's size.
bool is_slicing_view(const ir::Op& op) { return has_op_trait(op.kind, kSlicingView); }

// The table is input 0 of aten::embedding, aten::embedding_bag and onnx::Gather.
constexpr std::size_t kEmbeddingWeight = 0;

// Which inputs of an op need a gradient, and how large the gradients are.
class BackwardInputs {
 public:
  BackwardInputs(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad)
      : graph_(graph), op_(op), requires_grad_(requires_grad) {}

  bool needs_grad(std::size_t input) const {
    return input < op_.inputs.size() && requires_grad_[static_cast<std::size_t>(op_.inputs[input])];
  }

  int count_needing_grad() const {
    int count = 0;
    for (std::size_t i = 0; i < op_.inputs.size(); ++i) count += needs_grad(i) ? 1 : 0;
    return count;
  }

  // The two factors of the product: inputs 1 and 2 of addmm-like kinds, else 0 and 1.
  double operands_needing_grad(const std::string& kind) const {
    std::size_t first = has_leading_bias(kind) ? 1 : 0;
    return (needs_grad(first) ? 1.0 : 0.0) + (needs_grad(first + 1) ? 1.0 : 0.0);
  }

  bool bias_needs_grad(const std::string& kind) const { return needs_grad(has_leading_bias(kind) ? 0 : 2); }

  double output_grad_bytes() const { return gradient_bytes(op_.outputs, false); }
  double input_grad_bytes() const { return gradient_bytes(op_.inputs, true); }

 private:
  static bool has_leading_bias(const std::string& kind) {
    return kind == "aten::addmm" || kind == "aten::baddbmm" || kind == "aten::addbmm";
  }

  double gradient_bytes(const std::vector<ir::ValueId>& ids, bool only_needing_grad) const {
    double bytes = 0;
    for (auto id : ids) {
      const auto& value = graph_.value(id);
      bool counted = value.is_tensor() && ir::is_floating_point(value.type.dtype) &&
                     (!only_needing_grad || requires_grad_[static_cast<std::size_t>(id)]);
      if (counted) bytes += static_cast<double>(value.type.bytes());
    }
    return bytes;
  }

  const ir::Graph& graph_;
  const ir::Op& op_;
  const std::vector<bool>& requires_grad_;
};

// Shape arithmetic (ONNX's Shape -> Gather -> Unsqueeze -> Concat chains before a Reshape):
// every output a short integer vector. It runs on the host in any runtime; the partitioner
// copies it into each stage that needs it, like aten::size.
bool computes_shapes(const ir::Graph& graph, const ir::Op& op) {
  constexpr std::int64_t kLongestShape = 16;
  if (op.outputs.empty()) return false;
  return std::all_of(op.outputs.begin(), op.outputs.end(), [&](ir::ValueId id) {
    const auto& value = graph.value(id);
    return value.is_tensor() && !ir::is_floating_point(value.type.dtype) && value.type.shape_known() &&
           value.type.shape.size() <= 1 && value.type.numel() <= kLongestShape && value.type.batch_dim < 0;
  });
}

}  // namespace

OpClass classify(const ir::Graph& graph, const ir::Op& op) {
  if (computes_shapes(graph, op)) return OpClass::kGlue;
  if (has_op_trait(op.kind, kLookupWhenWeight) && !op.inputs.empty()) {
    const auto& data = graph.value(op.inputs.front());
    if (data.is_weight() && ir::is_floating_point(data.type.dtype)) return OpClass::kEmbedding;
  }
  return ir::op_class_of(op.kind);
}

OpWork op_work(const ir::Graph& graph, const ir::Op& op) {
  OpWork work;
  work.op_class = classify(graph, op);
  if (work.op_class == OpClass::kGlue || is_view(op)) return work;
  work.bytes_fwd = tensor_bytes(graph, op.inputs) + tensor_bytes(graph, op.outputs);
  switch (work.op_class) {
    case OpClass::kMatMul: work.flops_fwd = matmul_flops(graph, op); break;
    case OpClass::kConv: work.flops_fwd = conv_flops(graph, op); break;
    case OpClass::kEmbedding: work.flops_fwd = embedding_flops(graph, op); break;
    case OpClass::kNorm:
    case OpClass::kSoftmax:
    case OpClass::kElementwise: work.flops_fwd = ir::flops_per_element(op.kind) * first_output_numel(graph, op); break;
    case OpClass::kReduction:
    case OpClass::kPool: work.flops_fwd = input_numel(graph, op); break;
    default: break;
  }
  return work;
}

OpWork op_work(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad) {
  OpWork work = op_work(graph, op);
  if (work.op_class == OpClass::kGlue) return work;
  BackwardInputs grads{graph, op, requires_grad};
  if (grads.count_needing_grad() == 0) return work;
  double grad_out = grads.output_grad_bytes();
  switch (work.op_class) {
    case OpClass::kMatMul:
    case OpClass::kConv: {
      // One product per operand that needs a gradient, each as large as the forward one.
      double products = grads.operands_needing_grad(op.kind);
      double bias = grads.bias_needs_grad(op.kind) && !is_recurrence(op) ? first_output_numel(graph, op) : 0;
      double product = work.op_class == OpClass::kConv || is_recurrence(op) ? work.flops_fwd : product_flops(graph, op);
      if (is_recurrence(op)) products = (grads.needs_grad(0) ? 1.0 : 0.0) + (grads.needs_grad(1) || grads.needs_grad(2) ? 1.0 : 0.0);
      // Attention's backward: the scores' gradient, then those of Q, K and V: twice the forward.
      if (is_attention(op)) products = 2, product = work.flops_fwd;
      work.flops_bwd = products * product + bias;
      work.bytes_bwd = products * work.bytes_fwd + (bias > 0 ? grad_out : 0);
      break;
    }
    case OpClass::kEmbedding: {
      // A dense weight gradient: zero the table, then scatter-add the output gradient rows.
      const auto* weight = tensor_input(graph, op, kEmbeddingWeight);
      bool weight_grad = weight && grads.needs_grad(kEmbeddingWeight);
      work.flops_bwd = weight_grad ? first_output_numel(graph, op) : 0;
      work.bytes_bwd = weight_grad ? 2.0 * static_cast<double>(weight->bytes()) + grad_out : 0;
      break;
    }
    case OpClass::kNorm:
      work.flops_bwd = 2 * work.flops_fwd;
      work.bytes_bwd = work.bytes_fwd + grad_out;
      break;
    case OpClass::kDataMovement:
      work.bytes_bwd = is_view(op) && !is_slicing_view(op) ? 0 : grad_out + grads.input_grad_bytes();
      break;
    case OpClass::kUnknown:
      work.bytes_bwd = 2 * work.bytes_fwd;  // no formula: assume it reads and writes twice the forward bytes
      break;
    default:  // elementwise, softmax, reduction, pool: read the output gradient and what was saved, write input gradients
      work.flops_bwd = work.flops_fwd;
      work.bytes_bwd = work.bytes_fwd + grad_out;
      break;
  }
  return work;
}

ir::ValueId loss_input(const ir::Graph& graph, const std::vector<bool>& requires_grad) {
  if (graph.model_outputs().empty()) return ir::kNoId;
  const ir::Value& output = graph.value(graph.model_outputs().front());
  bool takes_loss = output.producer != ir::kNoId && !output.type.shape.empty() && output.type.numel() > 0 &&
                    ir::is_floating_point(output.type.dtype) && requires_grad[static_cast<std::size_t>(output.id)];
  return takes_loss ? output.id : ir::kNoId;
}

OpWork loss_work(const ir::Value& input) {
  const double elements = static_cast<double>(input.type.numel());
  const double bytes = elements * 4;
  return {OpClass::kSoftmax, 5 * elements, 2 * bytes, 5 * elements, 4 * bytes};
}

std::vector<std::string> uncosted_kinds(const ir::Graph& graph) {
  std::set<std::string> kinds;
  for (const auto& op : graph.ops()) {
    if (classify(graph, op) == OpClass::kUnknown) kinds.insert(op.kind);
  }
  return {kinds.begin(), kinds.end()};
}

bool is_attention_kernel(const ir::Graph& graph, const FusedKernel& kernel) {
  return std::any_of(kernel.begin(), kernel.end(),
                     [&](ir::OpId id) { return classify(graph, graph.op(id)) == OpClass::kMatMul; });
}

std::vector<bool> kernel_internal_values(const ir::Graph& graph, const std::vector<FusedKernel>& kernels) {
  std::vector<int> kernel_of(graph.ops().size(), -1);
  for (std::size_t k = 0; k < kernels.size(); ++k)
    for (auto op : kernels[k]) kernel_of[static_cast<std::size_t>(op)] = static_cast<int>(k);
  std::vector<bool> internal(graph.values().size(), false);
  for (const auto& value : graph.values()) {
    if (value.producer == ir::kNoId || value.model_output || value.consumers.empty()) continue;
    int kernel = kernel_of[static_cast<std::size_t>(value.producer)];
    bool inside = kernel >= 0;
    for (auto consumer : value.consumers) inside = inside && kernel_of[static_cast<std::size_t>(consumer)] == kernel;
    internal[static_cast<std::size_t>(value.id)] = inside;
  }
  return internal;
}

namespace {

// The dims a mean reduces (ONNX's axes attribute or input, aten::mean.dim's list), as written.
std::optional<std::vector<std::int64_t>> mean_dims(const ir::Graph& graph, const ir::Op& op) {
  auto listed = [&](std::size_t input) -> std::optional<std::vector<std::int64_t>> {
    if (input >= op.inputs.size()) return std::nullopt;
    if (const auto* dims = std::get_if<std::vector<std::int64_t>>(&graph.value(op.inputs[input]).literal)) return *dims;
    return std::nullopt;
  };
  if (op.kind == "onnx::ReduceMean") {
    if (auto it = op.attrs.find("axes"); it != op.attrs.end())
      if (const auto* axes = std::get_if<std::vector<std::int64_t>>(&it->second)) return *axes;
    return listed(1);
  }
  if (op.kind == "aten::mean") return listed(1);
  return std::nullopt;
}

// A norm's statistic written op by op: the mean over the last dim of each row (an RMS norm's mean
// of squares, a layer norm's mean), which a fused norm kernel computes on chip.
bool is_row_mean(const ir::Graph& graph, const ir::Op& op) {
  auto dims = mean_dims(graph, op);
  if (!dims || dims->size() != 1 || op.inputs.empty()) return false;
  const auto& in = graph.value(op.inputs[0]).type;
  const auto rank = static_cast<std::int64_t>(in.shape.size());
  return rank >= 2 && (dims->front() == -1 || dims->front() == rank - 1);
}

}  // namespace

std::vector<FusedKernel> elementwise_kernels(const ir::Graph& graph, const std::vector<FusedKernel>& taken) {
  const std::size_t ops = graph.ops().size();
  std::vector<bool> fusible(ops, false);
  for (const auto& op : graph.ops())
    fusible[static_cast<std::size_t>(op.id)] = classify(graph, op) == OpClass::kElementwise || is_row_mean(graph, op);
  for (const auto& kernel : taken)
    for (auto op : kernel) fusible[static_cast<std::size_t>(op)] = false;
  // An op's level: the most other ops (products, reductions, data movement) on a path to it. Ops
  // of one level joined along the values they pass are a kernel no path leaves and re-enters
  // (a residual add and the next one, with a layer in between, are not one kernel).
  std::vector<int> level(ops, 0);
  for (auto id : graph.topological_order()) {
    for (auto input : graph.op(id).inputs) {
      auto producer = graph.value(input).producer;
      if (producer == ir::kNoId) continue;
      auto p = static_cast<std::size_t>(producer);
      level[static_cast<std::size_t>(id)] = std::max(level[static_cast<std::size_t>(id)], level[p] + (fusible[p] ? 0 : 1));
    }
  }
  // Union-find over the fusible ops, joined along the values one passes the other at one level.
  std::vector<std::size_t> parent(ops);
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](std::size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  for (const auto& op : graph.ops()) {
    auto id = static_cast<std::size_t>(op.id);
    if (!fusible[id]) continue;
    for (auto input : op.inputs) {
      auto producer = graph.value(input).producer;
      if (producer == ir::kNoId) continue;
      auto p = static_cast<std::size_t>(producer);
      if (!fusible[p] || level[p] != level[id]) continue;
      auto a = root(p), b = root(id);
      parent[std::max(a, b)] = std::min(a, b);
    }
  }
  std::map<std::size_t, FusedKernel> by_root;
  for (std::size_t op = 0; op < ops; ++op)
    if (fusible[op]) by_root[root(op)].push_back(static_cast<ir::OpId>(op));
  std::vector<FusedKernel> kernels;
  for (auto& [_, kernel] : by_root)
    if (kernel.size() >= 2) kernels.push_back(std::move(kernel));
  std::sort(kernels.begin(), kernels.end());
  return kernels;
}

namespace {

bool all_outputs_internal(const ir::Op& op, const std::vector<bool>& internal) {
  if (op.outputs.empty()) return false;
  for (auto out : op.outputs)
    if (!internal[static_cast<std::size_t>(out)]) return false;
  return true;
}

// [op of the kernel, in its order]: the bytes of the tensors it reads from outside the kernel
// that no earlier op of the kernel read, and of those it writes for outside the kernel.
std::vector<double> boundary_bytes(const ir::Graph& graph, const std::vector<bool>& internal, const FusedKernel& kernel) {
  auto bytes_of = [&](ir::ValueId id) { return graph.value(id).is_tensor() ? static_cast<double>(graph.value(id).type.bytes()) : 0.0; };
  std::set<ir::ValueId> read;
  std::vector<double> bytes;
  for (auto id : kernel) {
    const ir::Op& op = graph.op(id);
    double moved = 0;
    for (auto in : op.inputs) {
      auto producer = graph.value(in).producer;
      bool outside = producer == ir::kNoId || !std::binary_search(kernel.begin(), kernel.end(), producer);
      if (outside && read.insert(in).second) moved += bytes_of(in);
    }
    for (auto out : op.outputs)
      if (!internal[static_cast<std::size_t>(out)]) moved += bytes_of(out);
    bytes.push_back(moved);
  }
  return bytes;
}

}  // namespace

void fuse_kernel_work(const ir::Graph& graph, const std::vector<bool>& internal, const FusedKernel& kernel,
                      std::vector<OpWork>& works) {
  constexpr double kFusedBackwardProducts = 5.0 / 2.0;  // FlashAttention's backward products over the forward's two
  const bool attention = is_attention_kernel(graph, kernel);
  const std::vector<double> boundary = attention ? std::vector<double>(kernel.size(), 0) : boundary_bytes(graph, internal, kernel);
  for (std::size_t i = 0; i < kernel.size(); ++i) {
    const ir::Op& op = graph.op(kernel[i]);
    OpWork& work = works.at(static_cast<std::size_t>(kernel[i]));
    const bool needs_backward = work.flops_bwd > 0 || work.bytes_bwd > 0;
    work.bytes_fwd = boundary[i];
    work.bytes_bwd = needs_backward ? 2 * boundary[i] : 0;
    if (is_attention(op)) work.flops_bwd = kFusedBackwardProducts * work.flops_fwd;
    else if (needs_backward && all_outputs_internal(op, internal)) work.flops_bwd += work.flops_fwd;
  }
}

double kernel_saved_bytes(const ir::Graph& graph, const std::vector<bool>& internal, const FusedKernel& kernel) {
  constexpr double kFloatBytes = 4;
  for (auto id : kernel) {
    const ir::Op& op = graph.op(id);
    const ir::TensorType* rows_of = nullptr;  // a tensor with one row per query: Q, or the scores
    if (is_attention(op)) rows_of = tensor_input(graph, op, 0);
    else if (classify(graph, op) == OpClass::kMatMul && all_outputs_internal(op, internal))
      rows_of = &graph.value(op.outputs.front()).type;
    if (rows_of && rows_of->shape_known() && !rows_of->shape.empty())
      return kFloatBytes * static_cast<double>(rows_of->numel()) / std::max<double>(last_dim(rows_of), 1);
  }
  return 0;
}

bool is_view(const ir::Op& op) { return has_op_trait(op.kind, kView); }

bool mean_over_dims_keeps_input() {
#ifdef RANNC_MEAN_KEEPS_INPUT
  return true;
#else
  return false;
#endif
}

namespace {

// aten::mean.dim (self, dim: a list, ...), not aten::mean (self, dtype: an int); or ONNX's
// ReduceMean, which the stage files run as it.
bool is_mean_over_dims(const ir::Graph& graph, const ir::Op& op) {
  if (op.kind == "onnx::ReduceMean") return true;
  return op.kind == "aten::mean" && op.inputs.size() >= 2 &&
         std::holds_alternative<std::vector<std::int64_t>>(graph.value(op.inputs[1]).literal);
}

}  // namespace

SavedForBackward saved_for_backward(const ir::Graph& graph, const ir::Op& op) {
  if (mean_over_dims_keeps_input() && is_mean_over_dims(graph, op)) return SavedForBackward::kInputs;
  if (is_view(op) || has_op_trait(op.kind, kSavesNothing)) return SavedForBackward::kNothing;
  if (has_op_trait(op.kind, kSavesOutput)) return SavedForBackward::kOutput;
  // x * 2 and x / 8 keep only the scalar.
  bool scalar_operand = op.inputs.size() >= 2 && !graph.value(op.inputs[1]).is_tensor();
  if (has_op_trait(op.kind, kSavesForOtherOperand) && scalar_operand) return SavedForBackward::kNothing;
  if (classify(graph, op) == OpClass::kGlue) return SavedForBackward::kNothing;
  return SavedForBackward::kInputs;
}

double extra_saved_bytes(const ir::Graph& graph, const ir::Op& op) {
  const std::string& kind = op.kind;
  double out = first_output_numel(graph, op);
  // A mask: bool on CUDA, the float noise tensor on CPU (libtorch 1.13's _dropout_impl): count the larger.
  if (has_op_trait(kind, kDropout)) return 4 * out;
  if (has_op_trait(kind, kSavesPoolIndices)) return 8 * out;  // int64 indices
  // Unfused attention (libtorch 1.13's composition, the ONNX mapping) keeps the softmax of the
  // scores, [..., L, S]; a fused kernel keeps less, so this errs on the safe side.
  if (is_attention(op)) {
    const auto* q = tensor_input(graph, op, 0);
    const auto* k = tensor_input(graph, op, 1);
    if (!q || !k || k->shape.size() < 2) return 0;
    double keys = static_cast<double>(k->shape[k->shape.size() - 2]);
    double scores = static_cast<double>(q->numel()) / std::max<double>(last_dim(q), 1) * keys;
    return scores * std::max(ir::dtype_size(q->dtype), 1);
  }
  if (is_recurrence(op)) {  // the gates of every step, plus its output (counted as the op's output)
    const auto* x = tensor_input(graph, op, 0);
    const auto* w = tensor_input(graph, op, 1);
    if (!x || !w || x->shape.size() != 3 || w->shape.size() != 3) return 0;
    return 4.0 * static_cast<double>(x->shape[0]) * static_cast<double>(x->shape[1]) * static_cast<double>(w->shape[0]) *
           static_cast<double>(w->shape[1]);
  }
  if (classify(graph, op) == OpClass::kNorm) {
    // Mean and inverse std per normalised group. Layer and RMS norm normalise at least the last
    // dim, so they have at most numel / last dim groups; batch, instance and group norm at most N x C.
    const auto& y = graph.value(op.outputs.front());
    if (!y.is_tensor() || !y.type.shape_known() || y.type.shape.size() < 2) return 2 * 4 * out;
    bool layer_norm = has_op_trait(kind, kNormalisesLastDims);
    double groups = layer_norm ? out / static_cast<double>(std::max<std::int64_t>(y.type.shape.back(), 1))
                               : static_cast<double>(y.type.shape[0]) * static_cast<double>(y.type.shape[1]);
    return 2 * 4 * groups;
  }
  return 0;
}

}  // namespace rannc::cost
