// Tensor-parallel regions (partitioner/tensor_regions.h) of a Llama decoder layer built here op by
// op, with ONNX's kinds and with TorchScript's: grouped-query attention with rotary embeddings and
// repeat_kv, a SwiGLU MLP, RMSNorm exported as its arithmetic.
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "graph_builders.h"
#include "ir/batch_dims.h"
#include "partitioner/tensor_regions.h"

using namespace rannc;
using namespace rannc::partition;
using rannc::testing::add_literal;
using rannc::testing::add_tensor;

namespace {

// The matrix product reading a weight (the only op that does here).
ir::OpId product_of(const ir::Graph& graph, const std::string& weight) {
  for (const auto& value : graph.values())
    if (value.name == weight) {
      REQUIRE(value.consumers.size() == 1);
      return value.consumers[0];
    }
  FAIL("no value named " << weight);
  return ir::kNoId;
}

// The split dim of each weight of a region by name; every weight ungrouped.
std::map<std::string, int> split_dims(const ir::Graph& graph, const TensorRegion& region) {
  std::map<std::string, int> dims;
  for (const auto& w : region.weights) {
    CHECK(w.groups == 1);
    dims[graph.value(w.weight).name] = w.dim;
  }
  return dims;
}

// How many of `ops` are of `kind`.
long count_kind(const ir::Graph& graph, const std::vector<ir::OpId>& ops, const std::string& kind) {
  return std::count_if(ops.begin(), ops.end(), [&](ir::OpId id) { return graph.op(id).kind == kind; });
}

// A Llama decoder layer, op by op as an export writes it: RMSNorm (mean of squares, 1 / sqrt),
// grouped-query attention (4 query heads, 2 key/value heads of 8 dims) with rotary embeddings
// (rotate_half: the halves of head_dim sliced, negated and concatenated) on q and k, k and v
// repeated to the query heads (repeat_kv: unsqueeze, expand, reshape), and a SwiGLU MLP of 48, no
// biases. `aten`: TorchScript's kinds (linear weights [out, in], cat of a list, masked_fill);
// otherwise ONNX's (MatMul weights [in, out], Slice, Concat, Expand, Where). Batch 3, sequence 8,
// hidden 32.
ir::Graph llama_layer(bool aten) {
  using ir::ValueKind;
  using ir::ValueRole;
  using Ints = std::vector<std::int64_t>;
  ir::Graph graph;
  const std::int64_t batch = 3, seq = 8, hidden = 32, heads = 4, kv_heads = 2, head_dim = 8, ffn = 48;
  int count = 0;
  auto fresh = [&](const std::string& hint) { return hint + "_" + std::to_string(++count); };
  auto tensor = [&](const std::string& hint, Ints shape) { return add_tensor(graph, fresh(hint), std::move(shape)); };
  auto ints = [&](Ints values) { return add_literal(graph, fresh("ints"), values, ValueKind::kIntList); };
  auto integer = [&](std::int64_t v) { return add_literal(graph, fresh("int"), v, ValueKind::kInt); };
  auto number = [&](double v) { return add_literal(graph, fresh("float"), v, ValueKind::kFloat); };
  auto op = [&](const std::string& kind, std::vector<ir::ValueId> inputs, Ints shape) {
    auto out = tensor(kind, shape);
    graph.add_op(aten ? "aten::" + kind : "onnx::" + kind, std::move(inputs), {out});
    return out;
  };
  auto attr = [&](ir::ValueId out, const std::string& name, ir::Literal value) {
    graph.op(graph.value(out).producer).attrs[name] = std::move(value);
    return out;
  };
  auto shape_of = [&](ir::ValueId id) { return graph.value(id).type.shape; };
  auto linear = [&](ir::ValueId x, const std::string& name, std::int64_t in, std::int64_t out) {
    Ints dims = shape_of(x);
    dims.back() = out;
    auto w = add_tensor(graph, name, aten ? Ints{out, in} : Ints{in, out}, ValueRole::kParam);
    return op(aten ? "linear" : "MatMul", {x, w}, dims);
  };
  auto binary = [&](const std::string& onnx_kind, ir::ValueId a, ir::ValueId b, Ints shape) {
    std::string kind = onnx_kind;
    if (aten) std::transform(kind.begin(), kind.end(), kind.begin(), ::tolower);
    auto out = tensor(kind, shape);
    graph.add_op((aten ? "aten::" : "onnx::") + kind, {a, b}, {out});
    return out;
  };
  auto transpose = [&](ir::ValueId x, Ints perm, std::int64_t i, std::int64_t j) {
    Ints dims = shape_of(x);
    std::swap(dims[static_cast<std::size_t>(i)], dims[static_cast<std::size_t>(j)]);
    if (aten) return op("transpose", {x, integer(i), integer(j)}, dims);
    return attr(op("Transpose", {x}, dims), "perm", perm);
  };
  auto reshape = [&](ir::ValueId x, Ints dims) { return op(aten ? "reshape" : "Reshape", {x, ints(dims)}, dims); };
  auto rms_norm = [&](ir::ValueId x, const std::string& name) {
    Ints per_position{batch, seq, 1};
    auto squares = binary("Pow", x, number(2.0), shape_of(x));
    auto mean = aten ? op("mean", {squares, ints({-1}), add_literal(graph, fresh("keep"), true, ValueKind::kBool)},
                          per_position)
                     : attr(op("ReduceMean", {squares}, per_position), "axes", Ints{-1});
    auto shifted = binary("Add", mean, number(1e-5), per_position);
    auto inverse = aten ? op("rsqrt", {shifted}, per_position)
                        : binary("Div", number(1.0), op("Sqrt", {shifted}, per_position), per_position);
    auto w = add_tensor(graph, name, {hidden}, ValueRole::kParam);
    return binary("Mul", w, binary("Mul", x, inverse, shape_of(x)), shape_of(x));
  };
  auto cos = add_tensor(graph, "cos", {seq, head_dim}, ValueRole::kBuffer);
  auto sin = add_tensor(graph, "sin", {seq, head_dim}, ValueRole::kBuffer);
  auto rotate = [&](ir::ValueId x) {
    Ints half = shape_of(x), whole = shape_of(x);
    half.back() = head_dim / 2;
    auto slice = [&](std::int64_t start, std::int64_t end) {
      if (aten) return op("slice", {x, integer(-1), integer(start), integer(end), integer(1)}, half);
      return op("Slice", {x, ints({start}), ints({end}), ints({-1})}, half);
    };
    auto x1 = slice(0, head_dim / 2), x2 = slice(head_dim / 2, head_dim);
    auto minus = op(aten ? "neg" : "Neg", {x2}, half);
    ir::ValueId rotated;
    if (aten) {
      auto list = add_literal(graph, fresh("list"), ir::Literal(), ValueKind::kOther);
      graph.add_op("prim::ListConstruct", {minus, x1}, {list});
      rotated = op("cat", {list, integer(-1)}, whole);
    } else {
      rotated = attr(op("Concat", {minus, x1}, whole), "axis", std::int64_t{-1});
    }
    return binary("Add", binary("Mul", x, cos, whole), binary("Mul", rotated, sin, whole), whole);
  };
  auto heads_of = [&](ir::ValueId h, const std::string& name, std::int64_t n) {
    auto projected = linear(h, name, hidden, n * head_dim);
    return transpose(reshape(projected, {batch, seq, n, head_dim}), {0, 2, 1, 3}, 1, 2);
  };
  auto repeat_kv = [&](ir::ValueId x) {
    Ints wide{batch, kv_heads, heads / kv_heads, seq, head_dim};
    auto unsqueezed = aten ? op("unsqueeze", {x, integer(2)}, {batch, kv_heads, 1, seq, head_dim})
                           : op("Unsqueeze", {x, ints({2})}, {batch, kv_heads, 1, seq, head_dim});
    auto expanded = aten ? op("expand", {unsqueezed, ints(wide), add_literal(graph, fresh("implicit"), false,
                                                                             ValueKind::kBool)}, wide)
                         : op("Expand", {unsqueezed, ints({1, 1, heads / kv_heads, 1, 1})}, wide);
    return reshape(expanded, {batch, heads, seq, head_dim});
  };

  auto x = add_tensor(graph, "x", {batch, seq, hidden}, ValueRole::kModelInput);
  auto h = rms_norm(x, "input_norm.weight");
  auto q = rotate(heads_of(h, "q_proj.weight", heads));
  auto k = repeat_kv(rotate(heads_of(h, "k_proj.weight", kv_heads)));
  auto v = repeat_kv(heads_of(h, "v_proj.weight", kv_heads));
  Ints square{batch, heads, seq, seq};
  auto scores = binary("Div", binary("MatMul", q, transpose(k, {0, 1, 3, 2}, 2, 3), square), number(8.0), square);
  auto mask = add_tensor(graph, "causal_mask", {seq, seq}, ValueRole::kBuffer, ir::DType::kBool);
  auto masked = aten ? op("masked_fill", {scores, mask, number(-1e9)}, square)
                     : op("Where", {mask, scores, number(-1e9)}, square);
  auto probs = aten ? op("softmax", {masked, integer(-1), add_literal(graph, fresh("none"), ir::Literal(),
                                                                     ValueKind::kNone)}, square)
                    : attr(op("Softmax", {masked}, square), "axis", std::int64_t{-1});
  auto context = binary("MatMul", probs, v, {batch, heads, seq, head_dim});
  context = reshape(transpose(context, {0, 2, 1, 3}, 1, 2), {batch, seq, hidden});
  auto residual = binary("Add", x, linear(context, "o_proj.weight", hidden, hidden), {batch, seq, hidden});
  auto h2 = rms_norm(residual, "post_norm.weight");
  auto gate = linear(h2, "gate_proj.weight", hidden, ffn);
  auto up = linear(h2, "up_proj.weight", hidden, ffn);
  auto act = aten ? op("silu", {gate}, {batch, seq, ffn})
                  : binary("Mul", gate, op("Sigmoid", {gate}, {batch, seq, ffn}), {batch, seq, ffn});
  auto down = linear(binary("Mul", act, up, {batch, seq, ffn}), "down_proj.weight", ffn, hidden);
  auto out = binary("Add", residual, down, {batch, seq, hidden});
  graph.add_model_output(out);
  ir::assign_batch_dims(graph, batch, {});
  graph.validate();
  return graph;
}

}  // namespace

TEST_CASE("tensor regions: a Llama layer, grouped-query attention with rotary embeddings and a SwiGLU MLP",
          "[tensor_regions]") {
  for (bool aten : {false, true}) {
    CAPTURE(aten);
    auto graph = llama_layer(aten);
    auto found = find_tensor_regions(graph);
    for (const auto& r : found.rejected) CHECK(r.reason == "");  // prints each reason
    CHECK(found.rejected.empty());
    REQUIRE(found.regions.size() == 2);
    const auto& attention = found.regions[0];
    const auto& mlp = found.regions[1];
    // Column weights split by output features, row weights by input features.
    const int col = aten ? 0 : 1, row = 1 - col;
    CHECK(attention.column_ops == std::vector<ir::OpId>{product_of(graph, "q_proj.weight"),
                                                        product_of(graph, "k_proj.weight"),
                                                        product_of(graph, "v_proj.weight")});
    CHECK(attention.row_op == product_of(graph, "o_proj.weight"));
    CHECK(split_dims(graph, attention) == std::map<std::string, int>{{"q_proj.weight", col}, {"k_proj.weight", col},
                                                                     {"v_proj.weight", col}, {"o_proj.weight", row}});
    // The 2 key/value heads bound the degree: each device holds whole k/v heads and the query
    // heads that share them.
    CHECK(attention.divisor == 2);
    CHECK(attention.allows(2));
    CHECK_FALSE(attention.allows(4));
    CHECK(attention.attention_core.size() == 5);  // scores, scale, mask, softmax, product with V
    CHECK(mlp.column_ops ==
          std::vector<ir::OpId>{product_of(graph, "gate_proj.weight"), product_of(graph, "up_proj.weight")});
    CHECK(mlp.row_op == product_of(graph, "down_proj.weight"));
    CHECK(split_dims(graph, mlp) ==
          std::map<std::string, int>{{"gate_proj.weight", col}, {"up_proj.weight", col}, {"down_proj.weight", row}});
    CHECK(mlp.divisor == 48);
    CHECK(mlp.attention_core.empty());
    // The rotary embeddings of q and k (two slices, a negation and a concatenation each) and
    // repeat_kv of k and v run inside the attention region.
    const std::string prefix = aten ? "aten::" : "onnx::";
    CHECK(count_kind(graph, attention.ops, prefix + (aten ? "slice" : "Slice")) == 4);
    CHECK(count_kind(graph, attention.ops, prefix + (aten ? "neg" : "Neg")) == 2);
    CHECK(count_kind(graph, attention.ops, prefix + (aten ? "cat" : "Concat")) == 2);
    CHECK(count_kind(graph, attention.ops, "prim::ListConstruct") == (aten ? 2 : 0));
    CHECK(count_kind(graph, attention.ops, prefix + (aten ? "unsqueeze" : "Unsqueeze")) == 2);
    CHECK(count_kind(graph, attention.ops, prefix + (aten ? "expand" : "Expand")) == 2);
    // Every other op works per position and runs sequence-parallel: both RMSNorms, op by op (the
    // mean over the features and the [batch, sequence, 1] scale included), and the first residual
    // add; the second makes the model output.
    const int norm_ops = aten ? 6 : 7;
    CHECK(found.sequence_ops.size() == static_cast<std::size_t>(2 * norm_ops + 1));
    auto in_regions = std::count_if(found.region_of_op.begin(), found.region_of_op.end(), [](int r) { return r >= 0; });
    CHECK(in_regions + static_cast<std::ptrdiff_t>(found.sequence_ops.size()) + 1 ==
          static_cast<std::ptrdiff_t>(graph.ops().size()));
    CHECK(count_kind(graph, found.sequence_ops, prefix + (aten ? "mean" : "ReduceMean")) == 2);
  }
}
