// FLOP counts of the main op kinds against hand computation.
#include <catch2/catch.hpp>

#include "cost_model/op_work.h"
#include "graph_builders.h"

using namespace rannc;
using namespace rannc::ir;
using rannc::testing::add_literal;
using rannc::testing::add_tensor;

namespace {

cost::OpWork work_of(const Graph& g, OpId op) { return cost::op_work(g, g.op(op)); }

}  // namespace

TEST_CASE("linear: 2*M*N*K plus the bias") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 32, 64}, ValueRole::kModelInput);
  auto w = add_tensor(g, "w", {128, 64}, ValueRole::kParam);
  auto b = add_tensor(g, "b", {128}, ValueRole::kParam);
  auto y = add_tensor(g, "y", {4, 32, 128});
  auto op = g.add_op("aten::linear", {x, w, b}, {y});
  auto work = work_of(g, op);
  CHECK(work.op_class == cost::OpClass::kMatMul);
  CHECK(work.flops_fwd == 2.0 * 4 * 32 * 128 * 64 + 4 * 32 * 128);
  CHECK(work.bytes_fwd == 4.0 * (4 * 32 * 64 + 128 * 64 + 128 + 4 * 32 * 128));
}

TEST_CASE("batched matmul and Gemm with transA") {
  Graph g;
  auto a = add_tensor(g, "a", {8, 16, 32}, ValueRole::kModelInput);
  auto b = add_tensor(g, "b", {8, 32, 24});
  auto c = add_tensor(g, "c", {8, 16, 24});
  auto bmm = g.add_op("aten::bmm", {a, b}, {c});
  CHECK(work_of(g, bmm).flops_fwd == 2.0 * 8 * 16 * 24 * 32);

  auto at = add_tensor(g, "at", {32, 16});  // A stored transposed: K=32, M=16
  auto w = add_tensor(g, "w", {32, 10}, ValueRole::kParam);
  auto y = add_tensor(g, "y", {16, 10});
  auto gemm = g.add_op("onnx::Gemm", {at, w}, {y});
  g.op(gemm).attrs["transA"] = std::int64_t{1};
  CHECK(work_of(g, gemm).flops_fwd == 2.0 * 16 * 10 * 32);
}

TEST_CASE("convolution: 2 * output elements * Cin/groups * kernel area") {
  Graph g;
  auto x = add_tensor(g, "x", {2, 64, 56, 56}, ValueRole::kModelInput);
  auto w = add_tensor(g, "w", {128, 64, 3, 3}, ValueRole::kParam);
  auto y = add_tensor(g, "y", {2, 128, 28, 28});
  auto conv = g.add_op("onnx::Conv", {x, w}, {y});
  CHECK(work_of(g, conv).flops_fwd == 2.0 * (2 * 128 * 28 * 28) * (64 * 3 * 3));

  // Depthwise: groups = channels, so the weight is [C, 1, k, k].
  auto dw = add_tensor(g, "dw", {64, 1, 3, 3}, ValueRole::kParam);
  auto z = add_tensor(g, "z", {2, 64, 56, 56});
  auto depthwise = g.add_op("aten::conv2d", {x, dw}, {z});
  CHECK(work_of(g, depthwise).flops_fwd == 2.0 * (2 * 64 * 56 * 56) * 9);
}

TEST_CASE("transposed convolution scatters each input element") {
  Graph g;
  auto x = add_tensor(g, "x", {1, 16, 8, 8}, ValueRole::kModelInput);
  auto w = add_tensor(g, "w", {16, 8, 2, 2}, ValueRole::kParam);  // [Cin, Cout/groups, k, k]
  auto y = add_tensor(g, "y", {1, 8, 16, 16});
  std::vector<ValueId> args{x, w};
  for (int i = 2; i < 6; ++i) args.push_back(add_literal(g, "arg", std::int64_t{0}, ValueKind::kInt));
  args.push_back(add_literal(g, "transposed", true, ValueKind::kBool));
  auto conv = g.add_op("aten::_convolution", args, {y});
  CHECK(work_of(g, conv).flops_fwd == 2.0 * (16 * 8 * 8) * (8 * 2 * 2));
}

TEST_CASE("embeddings: a lookup has no FLOPs, a bag adds its rows, and Gather of a weight is an embedding") {
  Graph g;
  auto table = add_tensor(g, "table", {1000, 16}, ValueRole::kParam);
  auto ids = add_tensor(g, "ids", {4, 5}, ValueRole::kModelInput, DType::kInt64);
  auto rows = add_tensor(g, "rows", {4, 5, 16});
  auto bag = add_tensor(g, "bag", {4, 16});
  auto lookup = g.add_op("aten::embedding", {table, ids}, {rows});
  auto bag_op = g.add_op("aten::embedding_bag", {table, ids}, {bag});
  CHECK(work_of(g, lookup).op_class == cost::OpClass::kEmbedding);
  CHECK(work_of(g, lookup).flops_fwd == 0);
  CHECK(work_of(g, bag_op).flops_fwd == 4.0 * 5 * 16);

  auto gathered = add_tensor(g, "gathered", {4, 5, 16});
  auto gather = g.add_op("onnx::Gather", {table, ids}, {gathered});
  CHECK(work_of(g, gather).op_class == cost::OpClass::kEmbedding);
  auto shape = add_tensor(g, "shape", {3}, ValueRole::kIntermediate, DType::kInt64);
  auto dim = add_tensor(g, "dim", {}, ValueRole::kIntermediate, DType::kInt64);
  auto index = add_tensor(g, "index", {}, ValueRole::kBuffer, DType::kInt64);
  auto glue = g.add_op("onnx::Gather", {shape, index}, {dim});
  CHECK(work_of(g, glue).op_class == cost::OpClass::kGlue);  // shape arithmetic, like aten::size
  auto token_ids = add_tensor(g, "rows", {4}, ValueRole::kIntermediate, DType::kInt64);
  g.value(token_ids).type.batch_dim = 0;  // four token ids at batch 4: data, not a shape
  auto picked = add_tensor(g, "picked", {4}, ValueRole::kIntermediate, DType::kInt64);
  g.value(picked).type.batch_dim = 0;
  auto data_gather = g.add_op("onnx::Gather", {token_ids, index}, {picked});
  CHECK(work_of(g, data_gather).op_class == cost::OpClass::kDataMovement);
}

TEST_CASE("elementwise, norm, softmax and in-place variants") {
  Graph g;
  auto x = add_tensor(g, "x", {2, 8, 128}, ValueRole::kModelInput);
  auto y1 = add_tensor(g, "y1", {2, 8, 128});
  auto y2 = add_tensor(g, "y2", {2, 8, 128});
  auto y3 = add_tensor(g, "y3", {2, 8, 128});
  auto y4 = add_tensor(g, "y4", {2, 8, 128});
  double n = 2 * 8 * 128;
  CHECK(work_of(g, g.add_op("aten::relu_", {x}, {y1})).flops_fwd == n);
  CHECK(work_of(g, g.add_op("aten::gelu", {x}, {y2})).flops_fwd == 8 * n);
  CHECK(work_of(g, g.add_op("onnx::LayerNormalization", {x}, {y3})).flops_fwd == 5 * n);
  CHECK(work_of(g, g.add_op("aten::softmax", {x}, {y4})).flops_fwd == 5 * n);
}

TEST_CASE("glue is free and unknown kinds are flagged as memory-bound") {
  Graph g;
  auto x = add_tensor(g, "x", {4, 4}, ValueRole::kModelInput);
  auto size = add_literal(g, "n", std::int64_t{4}, ValueKind::kInt);
  auto glue = g.add_op("aten::size", {x}, {size});
  CHECK(work_of(g, glue).op_class == cost::OpClass::kGlue);
  CHECK(work_of(g, glue).bytes_fwd == 0);

  auto y = add_tensor(g, "y", {4, 4});
  auto odd = g.add_op("aten::fancy_new_op", {x}, {y});
  auto work = work_of(g, odd);
  CHECK(work.op_class == cost::OpClass::kUnknown);
  CHECK(work.flops_fwd == 0);
  CHECK(work.bytes_fwd == 2.0 * 16 * 4);
}
