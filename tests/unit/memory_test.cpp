// The memory model: model state per parameter, activations kept for backward, microbatches in
// flight per schedule, recomputation.
#include <catch2/catch.hpp>

#include "cost_model/memory.h"
#include "cost_model/op_work.h"
#include "graph_builders.h"
#include "ir/batch_dims.h"
#include "ir/requires_grad.h"

using namespace rannc;
using namespace rannc::ir;
using rannc::testing::add_literal;
using rannc::testing::add_tensor;

TEST_CASE("bytes per parameter by optimizer and precision", "[memory]") {
  CHECK(cost::param_state_bytes(plan::Optimizer::kSgd, plan::Precision::kFp32).total() == 8);
  CHECK(cost::param_state_bytes(plan::Optimizer::kMomentum, plan::Precision::kFp32).total() == 12);
  CHECK(cost::param_state_bytes(plan::Optimizer::kAdam, plan::Precision::kFp32).total() == 16);
  // A 16-bit copy beside the fp32 master, fp32 gradients, two fp32 Adam moments.
  CHECK(cost::param_state_bytes(plan::Optimizer::kAdam, plan::Precision::kBf16Mixed).total() == 2 + 4 + 4 + 8);
}

TEST_CASE("activations: saved inputs and outputs, views keep their base, data-only ops keep nothing", "[memory]") {
  Graph g;
  auto x = add_tensor(g, "x", {8, 64}, ValueRole::kModelInput);
  auto w1 = add_tensor(g, "w1", {128, 64}, ValueRole::kParam);
  auto w2 = add_tensor(g, "w2", {10, 128}, ValueRole::kParam);
  auto scaled = add_tensor(g, "scaled", {8, 64});
  auto h = add_tensor(g, "h", {8, 128});
  auto r = add_tensor(g, "r", {8, 128});
  auto t = add_tensor(g, "t", {128, 8});
  auto tt = add_tensor(g, "tt", {8, 128});
  auto y = add_tensor(g, "y", {8, 10});
  auto none = add_literal(g, "none", {}, ValueKind::kNone);
  auto half = add_literal(g, "half", 0.5, ValueKind::kFloat);
  auto dim0 = add_literal(g, "d0", std::int64_t{0}, ValueKind::kInt);
  auto dim1 = add_literal(g, "d1", std::int64_t{1}, ValueKind::kInt);
  auto scale = g.add_op("aten::mul", {x, half}, {scaled});        // no grad needed: keeps nothing
  auto linear1 = g.add_op("aten::linear", {scaled, w1, none}, {h});  // saves `scaled` (an activation)
  auto relu = g.add_op("aten::relu", {h}, {r});                      // saves its output r
  auto transpose = g.add_op("aten::transpose", {r, dim0, dim1}, {t});
  auto back = g.add_op("aten::transpose", {t, dim0, dim1}, {tt});
  auto linear2 = g.add_op("aten::linear", {tt, w2, none}, {y});      // saves tt, a view of r
  g.add_model_output(y);
  assign_batch_dims(g, 8, {});
  auto memory = cost::activation_memory(g, values_requiring_grad(g), plan::Precision::kFp32);
  auto kept = [&](OpId op) { return memory.kept_bytes[static_cast<std::size_t>(op)]; };
  CHECK(kept(scale) == 8 * 64 * 4);   // charged to the op that allocated `scaled`
  CHECK(kept(linear1) == 0);          // h: relu saves its output, not its input
  CHECK(kept(relu) == 8 * 128 * 4);   // r, once, though linear2 saves it through two views
  CHECK(kept(transpose) == 0);
  CHECK(kept(back) == 0);
  CHECK(kept(linear2) == 0);
  auto bf16 = cost::activation_memory(g, values_requiring_grad(g), plan::Precision::kBf16Mixed);
  CHECK(bf16.kept_bytes[static_cast<std::size_t>(relu)] == 8 * 128 * 2);
  // linear2's backward holds dY, dX and the temporary dW.
  CHECK(memory.workspace_bytes[static_cast<std::size_t>(linear2)] == (8 * 10 + 8 * 128 + 10 * 128) * 4);
}

TEST_CASE("activations: a product or quotient by a constant tensor keeps nothing batch-sized", "[memory]") {
  // ONNX's scores / sqrt(d) divides by a literal tensor: autograd keeps the divisor only (x saved
  // only to give the divisor a gradient, measured with saved_tensors_hooks on torch 1.13).
  for (auto role : {ValueRole::kIntermediate, ValueRole::kBuffer, ValueRole::kParam}) {
    Graph g;
    auto x = add_tensor(g, "x", {8, 64}, ValueRole::kModelInput);
    auto w = add_tensor(g, "w", {64, 64}, ValueRole::kParam);
    auto divisor = add_tensor(g, "divisor", {}, role);  // no producer: a literal when intermediate
    auto a = add_tensor(g, "a", {8, 64});
    auto y = add_tensor(g, "y", {8, 64});
    auto product = g.add_op("onnx::MatMul", {x, w}, {a});
    g.add_op("onnx::Div", {a, divisor}, {y});
    g.add_model_output(y);
    assign_batch_dims(g, 8, {});
    auto memory = cost::activation_memory(g, values_requiring_grad(g), plan::Precision::kFp32);
    INFO("divisor role " << static_cast<int>(role));
    CHECK(memory.kept_bytes[static_cast<std::size_t>(product)] == (role == ValueRole::kParam ? 8 * 64 * 4 : 0));
  }
}

TEST_CASE("activations: a mask without a batch dim is kept at its size, a mean over dims as the libtorch keeps it",
          "[memory]") {
  // The causal mask cut to the input's sequence (batch-dependent, but without a batch dim) that
  // masked_fill keeps, and an RMSNorm's mean of squares, whose input libtorch 1.x keeps.
  Graph g;
  auto x = add_tensor(g, "x", {8, 16, 32}, ValueRole::kModelInput);
  auto w = add_tensor(g, "w", {16, 32}, ValueRole::kParam);
  auto causal = add_tensor(g, "causal", {64, 64}, ValueRole::kBuffer, DType::kBool);
  auto none = add_literal(g, "none", {}, ValueKind::kNone);
  auto zero = add_literal(g, "zero", std::int64_t{0}, ValueKind::kInt);
  auto one = add_literal(g, "one", std::int64_t{1}, ValueKind::kInt);
  auto two = add_literal(g, "two", std::int64_t{2}, ValueKind::kInt);
  auto last = add_literal(g, "last", std::vector<std::int64_t>{-1}, ValueKind::kIntList);
  auto keep = add_literal(g, "keep", true, ValueKind::kBool);
  auto low = add_literal(g, "low", -1e9, ValueKind::kFloat);
  auto seq = add_literal(g, "seq", std::int64_t{16}, ValueKind::kInt);
  auto rows = add_tensor(g, "rows", {16, 64}, ValueRole::kIntermediate, DType::kBool);
  auto cut = add_tensor(g, "cut", {16, 16}, ValueRole::kIntermediate, DType::kBool);
  auto mask = add_tensor(g, "mask", {16, 16}, ValueRole::kIntermediate, DType::kBool);
  auto h = add_tensor(g, "h", {8, 16, 16});
  auto filled = add_tensor(g, "filled", {8, 16, 16});
  auto squares = add_tensor(g, "squares", {8, 16, 16});
  auto variance = add_tensor(g, "variance", {8, 16, 1});
  auto y = add_tensor(g, "y", {8, 16, 16});
  g.add_op("aten::size", {x, one}, {seq});
  g.add_op("aten::slice", {causal, zero, zero, seq, one}, {rows});
  g.add_op("aten::slice", {rows, one, zero, seq, one}, {cut});
  auto invert = g.add_op("aten::bitwise_not", {cut}, {mask});
  auto linear = g.add_op("aten::linear", {x, w, none}, {h});
  g.add_op("aten::masked_fill", {h, mask, low}, {filled});
  auto square = g.add_op("aten::pow", {filled, two}, {squares});
  g.add_op("aten::mean", {squares, last, keep, none}, {variance});
  g.add_op("aten::add", {filled, variance, one}, {y});
  g.add_model_output(y);
  assign_batch_dims(g, 8, {});
  REQUIRE(g.value(mask).batch_dependent);
  REQUIRE(g.value(mask).type.batch_dim == -1);
  auto memory = cost::activation_memory(g, values_requiring_grad(g), plan::Precision::kFp32);
  auto at = [](const std::vector<double>& bytes, OpId op) { return bytes[static_cast<std::size_t>(op)]; };
  // Each microbatch makes the mask again, at 16 x 16 whatever its size: not scaled with the batch.
  CHECK(at(memory.kept_bytes, invert) == 0);
  CHECK(at(memory.fixed_kept_bytes, invert) == 16 * 16);
  CHECK(at(memory.kept_bytes, linear) == 0);  // h: masked_fill keeps its mask only
  // pow keeps `filled` (charged to masked_fill); the mean keeps `squares` where the libtorch does.
  CHECK(at(memory.kept_bytes, square) == (cost::mean_over_dims_keeps_input() ? 8 * 16 * 16 * 4 : 0));
  auto footprint = cost::whole_model_footprint(g, memory, plan::Precision::kFp32);
  CHECK(footprint.kept_bytes == at(memory.kept_bytes, square) + 8 * 16 * 16 * 4 + 16 * 16);
}

TEST_CASE("microbatches in flight: 1F1B keeps stages - s, GPipe keeps all", "[memory]") {
  cost::StagePlacement p;
  p.stages = 4;
  p.microbatches = 8;
  p.stage_index = 0;
  CHECK(cost::microbatches_in_flight(p) == 4);
  p.stage_index = 3;
  CHECK(cost::microbatches_in_flight(p) == 1);
  p.microbatches = 2;
  p.stage_index = 0;
  CHECK(cost::microbatches_in_flight(p) == 2);
  p.schedule = plan::Schedule::kGPipe;
  p.microbatches = 8;
  CHECK(cost::microbatches_in_flight(p) == 8);
}

TEST_CASE("stage memory: state, in-flight activations, recomputation, buffers", "[memory]") {
  cost::StageFootprint f;
  f.param_elements = 1000;
  f.buffer_bytes = 100;
  f.kept_bytes = 5000;
  f.input_bytes = 200;
  f.output_bytes = 300;
  f.held_output_bytes = 250;
  f.pass_receive_bytes = 250;
  f.workspace_bytes = 700;
  cost::StagePlacement p;
  p.stages = 4;
  p.stage_index = 1;
  p.microbatches = 8;
  auto m = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  CHECK(m.weights == 4000 + 100);
  CHECK(m.grads == 4000);
  CHECK(m.optimizer == 8000);
  CHECK(m.activations == 3 * (200 + 5000 + 250));  // inputs, saved tensors and outputs held for backward
  CHECK(m.workspace == 700);
  CHECK(m.comm_buffers == 2 * (200 + 300) + 250);  // and the next pass's receive, started early
  CHECK(m.step_buffers == 200);  // the inputs, which stay while it steps (Adam's temporaries: no weight given)
  CHECK(m.total() == 4100 + 4000 + 8000 + m.activations + 700 + m.comm_buffers);
  p.recompute = plan::Recompute::kFull;
  auto recomputed = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  // One microbatch's activations and outputs, computed again in its backward; the others keep their inputs.
  CHECK(recomputed.activations == 3 * 200 + 5000 + 250);
  // Selective: the attention cores (1200 of the 5000 kept, 400 the largest) are not kept; one
  // core is alive again while it is recomputed.
  f.core_kept_bytes = 1200;
  f.largest_core_bytes = 400;
  p.recompute = plan::Recompute::kSelective;
  auto selective = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  CHECK(selective.activations == 3 * (200 + 5000 - 1200 + 250) + 400);
  p.recompute = plan::Recompute::kFull;
  p.state.replicas = 2;
  auto replicated = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  CHECK(replicated.comm_buffers == 2 * (200 + 300) + 250);
  CHECK(replicated.step_buffers == 4000 + 200);  // the flat copy the allreduce sums, after the passes
  // The passes' memory is freed before the step's: the peak is the state plus the larger.
  CHECK(replicated.passes() == replicated.activations + 700 + replicated.comm_buffers);
  CHECK(replicated.total() == 4100 + 4000 + 8000 + std::max(replicated.passes(), 4200.0));
  f.kept_bytes = 0;
  f.input_bytes = 0;
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32).total() == 4100 + 4000 + 8000 + 4000);
}

TEST_CASE("sharded state: each of R replicas keeps 1/R of the optimizer state and master weights", "[memory]") {
  cost::StateLayout four{4, plan::StateSharding::kOptimizer};
  // Mixed precision: the 16-bit working copy whole, the fp32 master and Adam's moments split.
  auto mixed = cost::param_state_bytes(plan::Optimizer::kAdam, plan::Precision::kBf16Mixed, four);
  CHECK(mixed.weights == 2 + 1);
  CHECK(mixed.grads == 4 + 1);  // and the gradient of its shard of the master, which the reduce-scatter fills
  CHECK(mixed.optimizer == 2);
  // fp32: the working weights are the master, so the shard of the master is a copy beside them.
  auto fp32 = cost::param_state_bytes(plan::Optimizer::kAdam, plan::Precision::kFp32, four);
  CHECK(fp32.weights == 4 + 1);
  CHECK(fp32.optimizer == 2);
  CHECK(fp32.total() < cost::param_state_bytes(plan::Optimizer::kAdam, plan::Precision::kFp32).total());
  // One replica has nothing to share with.
  cost::StateLayout alone{1, plan::StateSharding::kOptimizer};
  CHECK(cost::param_state_bytes(plan::Optimizer::kAdam, plan::Precision::kFp32, alone).total() == 16);

  cost::StageFootprint f;
  f.param_elements = 1e9;
  cost::StagePlacement p;
  p.state = four;
  auto m = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  CHECK(m.grads == Approx(4e9 + 4e9 / 4));  // the gradients and this replica's quarter of their sum
  // The reduce-scatter's bucket and the all-gather's, larger than Adam's two temporaries of the
  // chunk of a bucket it steps.
  const double bucket = static_cast<double>(plan::kGradientBucketBytes);
  CHECK(m.step_buffers == Approx(2 * bucket));
  CHECK(m.comm_buffers == 0);
  CHECK(m.total() == Approx(5e9 + 5e9 + 2e9 + 2 * bucket));

  // A tied table of 1e8 elements that another stage's 4 copies hold too: its state splits 8 ways.
  f.shared_param_elements = 1e8;
  p.state.shared_replicas = 8;
  auto tied = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  CHECK(tied.weights == Approx(9e8 * 5 + 1e8 * (4 + 0.5)));
  CHECK(tied.grads == Approx(9e8 * 5 + 1e8 * (4 + 0.5)));
  CHECK(tied.optimizer == Approx(9e8 * 2 + 1e8 * 1));
  p.state.sharding = plan::StateSharding::kNone;  // unsharded, the holders change nothing
  auto whole = cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32);
  CHECK(whole.optimizer == Approx(8e9));
}

TEST_CASE("Adam's step needs two temporaries of the largest weight, SGD steps in place", "[memory]") {
  cost::StageFootprint f;
  f.param_elements = 1000;
  f.largest_param_elements = 600;
  f.workspace_bytes = 100;
  cost::StagePlacement p;
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32).step_buffers == 2 * 4 * 600);
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kSgd, plan::Precision::kFp32).step_buffers == 0);
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32).workspace == 100);
  f.workspace_bytes = 10000;  // the backward's workspace is the larger: the step comes after it
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32).total() == 1000 * 16 + 10000);
  // Replicated, the allreduce's flat copy is freed before Adam steps: the larger of the two counts.
  f.workspace_bytes = 0;
  p.state.replicas = 2;
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32).step_buffers == 2 * 4 * 600);
  f.largest_param_elements = 100;
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kAdam, plan::Precision::kFp32).step_buffers == 4 * 1000);
}

TEST_CASE("a weight several ops of a stage read waits with one gradient while the next is made", "[memory]") {
  // A tied embedding: the lookup and the output projection read one table (8 x 4 floats).
  Graph g;
  auto tokens = add_tensor(g, "tokens", {2, 3}, ValueRole::kModelInput, DType::kInt64);
  auto table = add_tensor(g, "table", {8, 4}, ValueRole::kParam);
  auto small = add_tensor(g, "small", {4, 4}, ValueRole::kParam);
  auto h = add_tensor(g, "h", {2, 3, 4});
  auto h2 = add_tensor(g, "h2", {2, 3, 4});
  auto logits = add_tensor(g, "logits", {2, 3, 8});
  auto none = add_literal(g, "none", {}, ValueKind::kNone);
  auto lookup = g.add_op("aten::embedding", {table, tokens}, {h});
  auto mix = g.add_op("aten::linear", {h, small, none}, {h2});
  auto project = g.add_op("aten::linear", {h2, table, none}, {logits});
  g.add_model_output(logits);
  CHECK(cost::largest_tied_grad_bytes(g, {lookup, mix, project}) == 8 * 4 * 4);
  // Split over two stages, each holds its own copy with one gradient.
  CHECK(cost::largest_tied_grad_bytes(g, {lookup, mix}) == 0);
  CHECK(cost::largest_tied_grad_bytes(g, {project}) == 0);

  cost::StageFootprint f;
  f.workspace_bytes = 1000;
  f.tied_grad_bytes = 128;
  cost::StagePlacement p;
  CHECK(cost::stage_memory(f, p, plan::Optimizer::kSgd, plan::Precision::kFp32).workspace == 1000 + 128);
}
