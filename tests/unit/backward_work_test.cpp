// Backward FLOPs and bytes against hand computation, and which values need gradients.
#include <catch2/catch.hpp>

#include "cost_model/op_work.h"
#include "graph_builders.h"
#include "ir/requires_grad.h"

using namespace rannc;
using namespace rannc::ir;
using rannc::testing::add_literal;
using rannc::testing::add_tensor;

namespace {

cost::OpWork training_work(const Graph& g, OpId op) { return cost::op_work(g, g.op(op), values_requiring_grad(g)); }

}  // namespace

TEST_CASE("gradients flow from parameters, not from data, and stop at integer values", "[backward]") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
  auto w = add_tensor(g, "w", {16, 8}, ValueRole::kParam);
  auto relu_x = add_tensor(g, "relu_x", {4, 8});
  auto y = add_tensor(g, "y", {4, 16});
  auto idx = add_tensor(g, "idx", {4}, ValueRole::kIntermediate, DType::kInt64);
  g.add_op("aten::relu", {x}, {relu_x});
  g.add_op("aten::linear", {relu_x, w}, {y});
  g.add_op("aten::argmax", {y}, {idx});
  auto grad = values_requiring_grad(g);
  CHECK_FALSE(grad[static_cast<std::size_t>(x)]);
  CHECK_FALSE(grad[static_cast<std::size_t>(relu_x)]);
  CHECK(grad[static_cast<std::size_t>(w)]);
  CHECK(grad[static_cast<std::size_t>(y)]);
  CHECK_FALSE(grad[static_cast<std::size_t>(idx)]);
}

TEST_CASE("linear backward: one product per operand that needs a gradient, plus the bias sum", "[backward]") {
  Graph g;
  auto x = add_tensor(g, "x", {32, 64}, ValueRole::kModelInput);
  auto w1 = add_tensor(g, "w1", {128, 64}, ValueRole::kParam);
  auto b1 = add_tensor(g, "b1", {128}, ValueRole::kParam);
  auto h = add_tensor(g, "h", {32, 128});
  auto w2 = add_tensor(g, "w2", {10, 128}, ValueRole::kParam);
  auto y = add_tensor(g, "y", {32, 10});
  auto first = g.add_op("aten::linear", {x, w1, b1}, {h});
  auto second = g.add_op("aten::linear", {h, w2, add_literal(g, "none", {}, ValueKind::kNone)}, {y});

  // First layer: the input is data, so only dW (2*M*N*K) and db (M*N adds).
  auto work1 = training_work(g, first);
  CHECK(work1.flops_bwd == 2.0 * 32 * 128 * 64 + 32 * 128);
  // Hidden layer: dX and dW, no bias.
  auto work2 = training_work(g, second);
  CHECK(work2.flops_bwd == 2 * (2.0 * 32 * 10 * 128));
  CHECK(work2.bytes_bwd == 2 * work2.bytes_fwd);
}

TEST_CASE("convolution backward doubles the forward for a hidden layer", "[backward]") {
  Graph g;
  auto x = add_tensor(g, "x", {2, 3, 32, 32}, ValueRole::kModelInput);
  auto w0 = add_tensor(g, "w0", {8, 3, 3, 3}, ValueRole::kParam);
  auto h = add_tensor(g, "h", {2, 8, 30, 30});
  auto w1 = add_tensor(g, "w1", {8, 8, 3, 3}, ValueRole::kParam);
  auto y = add_tensor(g, "y", {2, 8, 28, 28});
  auto conv0 = g.add_op("aten::conv2d", {x, w0}, {h});
  auto conv1 = g.add_op("aten::conv2d", {h, w1}, {y});
  CHECK(training_work(g, conv0).flops_bwd == training_work(g, conv0).flops_fwd);
  CHECK(training_work(g, conv1).flops_bwd == 2 * training_work(g, conv1).flops_fwd);
}

TEST_CASE("embedding backward writes a dense table gradient, and views are free", "[backward]") {
  Graph g;
  auto table = add_tensor(g, "table", {1000, 16}, ValueRole::kParam);
  auto ids = add_tensor(g, "ids", {4, 5}, ValueRole::kModelInput, DType::kInt64);
  auto rows = add_tensor(g, "rows", {4, 5, 16});
  auto lookup = g.add_op("aten::embedding", {table, ids}, {rows});
  auto work = training_work(g, lookup);
  CHECK(work.bytes_bwd == 2.0 * 1000 * 16 * 4 + 4 * 5 * 16 * 4);

  auto flat = add_tensor(g, "flat", {20, 16});
  auto view = g.add_op("aten::view", {rows, add_literal(g, "shape", std::vector<std::int64_t>{20, 16}, ValueKind::kIntList)}, {flat});
  auto view_work = training_work(g, view);
  CHECK(view_work.bytes_fwd == 0);
  CHECK(view_work.bytes_bwd == 0);
  CHECK(cost::is_view(g.op(view)));
}

TEST_CASE("ops without any input that needs a gradient have no backward", "[backward]") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 8}, ValueRole::kModelInput);
  auto y = add_tensor(g, "y", {4, 8});
  auto relu = g.add_op("aten::relu", {x}, {y});
  auto work = training_work(g, relu);
  CHECK(work.flops_bwd == 0);
  CHECK(work.bytes_bwd == 0);
  CHECK(work.flops_fwd == 32);
}

TEST_CASE("what autograd saves: inputs of a matmul, the output of relu, nothing for add", "[backward]") {
  Graph g;
  auto a = add_tensor(g, "a", {4, 8}, ValueRole::kModelInput);
  auto b = add_tensor(g, "b", {4, 8});
  auto c = add_tensor(g, "c", {4, 8});
  auto relu = g.add_op("aten::relu_", {a}, {b});
  auto add = g.add_op("aten::add", {a, b, add_literal(g, "alpha", std::int64_t{1}, ValueKind::kInt)}, {c});
  auto d = add_tensor(g, "d", {4, 8});
  auto scale = g.add_op("aten::mul", {c, add_literal(g, "k", 0.5, ValueKind::kFloat)}, {d});
  auto e = add_tensor(g, "e", {4, 8});
  auto mul = g.add_op("aten::mul", {c, d}, {e});
  CHECK(cost::saved_for_backward(g, g.op(relu)) == cost::SavedForBackward::kOutput);
  CHECK(cost::saved_for_backward(g, g.op(add)) == cost::SavedForBackward::kNothing);
  CHECK(cost::saved_for_backward(g, g.op(scale)) == cost::SavedForBackward::kNothing);
  CHECK(cost::saved_for_backward(g, g.op(mul)) == cost::SavedForBackward::kInputs);
  auto unknown = g.add_op("aten::einsum", {e}, {add_tensor(g, "f", {4, 8})});
  CHECK(cost::saved_for_backward(g, g.op(unknown)) == cost::SavedForBackward::kInputs);
  CHECK(cost::uncosted_kinds(g) == std::vector<std::string>{"aten::einsum"});
}
