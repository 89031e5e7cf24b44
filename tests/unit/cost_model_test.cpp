// Op signatures, the roofline, the profile DB, calibration and the per-op cost model.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

#include "cost_model/calibration.h"
#include "cost_model/cost_model.h"
#include "cost_model/device.h"
#include "cost_model/op_signature.h"
#include "cost_model/step_estimate.h"
#include "graph_builders.h"
#include "ir/batch_dims.h"
#include "ir/requires_grad.h"
#include "support/error.h"

using namespace rannc;
using namespace rannc::ir;
using Catch::Matchers::Contains;
using rannc::testing::add_literal;
using rannc::testing::add_tensor;

namespace {

// x[8,64] -> linear(w[32,64]) -> relu -> y
struct SmallModel {
  Graph g;
  OpId linear = kNoId, relu = kNoId;

  SmallModel() {
    auto x = add_tensor(g, "x", {8, 64}, ValueRole::kModelInput);
    auto w = add_tensor(g, "w", {32, 64}, ValueRole::kParam);
    auto h = add_tensor(g, "h", {8, 32});
    auto y = add_tensor(g, "y", {8, 32});
    linear = g.add_op("aten::linear", {x, w, add_literal(g, "none", {}, ValueKind::kNone)}, {h});
    relu = g.add_op("aten::relu", {h}, {y});
    g.add_model_output(y);
    assign_batch_dims(g, 8, {});
  }
};

cost::DeviceSpec test_device() {
  cost::DeviceSpec d;
  d.name = "test";
  d.peak_fp32_flops = 1e12;
  d.peak_half_flops = 8e12;
  d.mem_bandwidth = 1e11;
  d.op_overhead = 1e-5;
  return d;
}

std::string temp_path(const char* name) { return "/tmp/rannc_test_" + std::to_string(::getpid()) + "_" + name; }

// A DB whose device "test" has test_device()'s peaks and one measured signature.
cost::ProfileDb db_with(const std::string& signature, const std::string& op_class, double fwd_ms, double bwd_ms) {
  cost::ProfileDb db;
  auto& profile = db.device_for_update("test");
  profile.peak_fp32_flops = test_device().peak_fp32_flops;
  profile.mem_bandwidth = test_device().mem_bandwidth;
  cost::OpMeasurement measured;
  measured.op_class = op_class;
  measured.fwd_ms = fwd_ms;
  measured.bwd_ms = bwd_ms;
  measured.reps = 1;
  profile.ops[signature] = measured;
  return db;
}

}  // namespace

TEST_CASE("op signatures name kind, dtypes, shapes, grad flags and literal arguments", "[cost]") {
  SmallModel m;
  auto grad = values_requiring_grad(m.g);
  CHECK(cost::op_signature(m.g, m.g.op(m.linear), grad) == "aten::linear(float32[8,64],float32[32,64]*,None)");
  CHECK(cost::op_signature(m.g, m.g.op(m.relu), grad) == "aten::relu(float32[8,32]*)");
  Graph g;
  auto x = add_tensor(g, "x", {2, 3}, ValueRole::kModelInput);
  auto y = add_tensor(g, "y", {2, 3});
  auto op = g.add_op("onnx::LeakyRelu", {x}, {y});
  g.op(op).attrs["alpha"] = 0.25;
  CHECK(cost::op_signature(g, g.op(op), values_requiring_grad(g)) == "onnx::LeakyRelu(float32[2,3]){alpha=0.25}");
}

TEST_CASE("roofline: compute-bound on FLOPs, memory-bound on bytes, mixed precision on tensor cores", "[cost]") {
  auto device = test_device();
  cost::Efficiencies ideal = cost::default_efficiencies(device);
  ideal.compute.fill(1.0);
  ideal.memory.fill(1.0);
  ideal.op_overhead = 0;
  CHECK(cost::roofline_seconds(2e12, 1e9, cost::OpClass::kMatMul, device, plan::Precision::kFp32, ideal) == Approx(2.0));
  CHECK(cost::roofline_seconds(2e12, 1e9, cost::OpClass::kMatMul, device, plan::Precision::kBf16Mixed, ideal) ==
        Approx(0.25));
  // Elementwise ops never use tensor cores; their bytes halve under mixed precision.
  CHECK(cost::roofline_seconds(1e9, 1e11, cost::OpClass::kElementwise, device, plan::Precision::kFp32, ideal) ==
        Approx(1.0));
  CHECK(cost::roofline_seconds(1e9, 1e11, cost::OpClass::kElementwise, device, plan::Precision::kFp16Mixed, ideal) ==
        Approx(0.5));
  CHECK(cost::roofline_seconds(0, 0, cost::OpClass::kGlue, device, plan::Precision::kFp32, ideal) == 0);
  cost::DeviceSpec v100 = device;
  v100.has_bf16 = false;
  CHECK_THROWS_WITH(cost::check_precision_supported(v100, plan::Precision::kBf16Mixed), Contains("no bf16"));
  CHECK_THROWS_WITH(plan::parse_precision("fp8", "--precision"), Contains("--precision fp8"));
}

TEST_CASE("profile DB: round trip, missing file is empty, corrupt files are errors", "[cost]") {
  std::string path = temp_path("db.json");
  cost::ProfileDb db;
  auto& device = db.device_for_update("cpu");
  device.description = "test cpu";
  device.peak_fp32_flops = 1e11;
  device.mem_bandwidth = 2e10;
  device.op_overhead = 1e-5;
  cost::OpMeasurement m;
  m.kind = "aten::relu";
  m.op_class = "elementwise";
  m.fwd_ms = 0.5;
  m.bwd_ms = 0.75;
  m.retained_bytes = 1024;
  m.reps = 5;
  device.ops["aten::relu(float32[8]*)"] = m;
  m.fwd_host_ms = 0.125;  // a GPU's op: the host's time to issue each pass too
  m.bwd_host_ms = 0.25;
  device.ops["aten::gelu(float32[8]*)"] = m;
  db.save(path);
  auto loaded = cost::ProfileDb::load(path);
  REQUIRE(loaded.device("cpu"));
  CHECK(loaded.device("cpu")->ops.at("aten::relu(float32[8]*)").bwd_ms == 0.75);
  CHECK(loaded.device("cpu")->ops.at("aten::relu(float32[8]*)").retained_bytes == 1024);
  CHECK(loaded.device("cpu")->ops.at("aten::relu(float32[8]*)").bwd_host_ms == 0);
  CHECK(loaded.device("cpu")->ops.at("aten::gelu(float32[8]*)").fwd_host_ms == 0.125);
  CHECK(loaded.device("cpu")->ops.at("aten::gelu(float32[8]*)").bwd_host_ms == 0.25);
  {
    std::ifstream saved(path);
    std::string text((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
    CHECK(text.find("\"fwd_host_ms\": 0.125") != std::string::npos);
    CHECK(text.find("\"fwd_host_ms\": 0,") == std::string::npos);  // absent where not measured apart
  }
  CHECK(cost::ProfileDb::load(temp_path("absent.json")).devices().empty());

  auto write = [&](const std::string& text) {
    std::ofstream(path) << text;
  };
  write("{\"format\": \"rannc-profile-db\", \"version\": 1, \"devic");
  CHECK_THROWS_WITH(cost::ProfileDb::load(path), Contains("not valid JSON"));
  write("{\"format\": \"other\"}");
  CHECK_THROWS_WITH(cost::ProfileDb::load(path), Contains("corrupt profile DB"));
  write("{\"format\": \"rannc-profile-db\", \"version\": 7, \"devices\": {}, \"models\": {}}");
  CHECK_THROWS_WITH(cost::ProfileDb::load(path), Contains("version 7"));
  write("{\"format\": \"rannc-profile-db\", \"version\": 1, \"devices\": {\"cpu\": {\"description\": \"x\", "
        "\"peak_fp32_flops\": 1, \"mem_bandwidth\": 1, \"op_overhead\": 0, \"ops\": {\"a\": {\"kind\": 3}}}}, \"models\": {}}");
  CHECK_THROWS_AS(cost::ProfileDb::load(path), InputError);
  write("{\"format\": \"rannc-profile-db\", \"version\": 1, \"devices\": {\"cpu\": {\"description\": \"x\", "
        "\"peak_fp32_flops\": 1, \"mem_bandwidth\": 1, \"op_overhead\": 0, \"ops\": {\"a\": {\"kind\": \"k\", "
        "\"class\": \"c\", \"flops_fwd\": 0, \"bytes_fwd\": 0, \"flops_bwd\": 0, \"bytes_bwd\": 0, \"fwd_ms\": 1, "
        "\"bwd_ms\": 1, \"fwd_peak_bytes\": 0, \"retained_bytes\": 0, \"bwd_peak_bytes\": 0, \"reps\": 1, "
        "\"fwd_host_ms\": -2, \"bwd_host_ms\": 0}}}}, \"models\": {}}");
  CHECK_THROWS_WITH(cost::ProfileDb::load(path), Contains("fwd_host_ms: -2: must not be negative"));
  std::remove(path.c_str());
}

TEST_CASE("calibration recovers the efficiencies behind measured times", "[cost]") {
  cost::DeviceProfile profile;
  profile.peak_fp32_flops = 1e11;
  profile.mem_bandwidth = 1e10;
  profile.op_overhead = 0;
  // Matmuls at 40% of peak, elementwise ops at 25% of bandwidth, no overhead.
  for (int i = 1; i <= 3; ++i) {
    cost::OpMeasurement mm;
    mm.op_class = "matmul";
    mm.flops_fwd = 1e9 * i;
    mm.bytes_fwd = 1e6;
    mm.fwd_ms = mm.flops_fwd / (0.4 * profile.peak_fp32_flops) * 1e3;
    mm.reps = 1;
    profile.ops["mm" + std::to_string(i)] = mm;
    cost::OpMeasurement add;
    add.op_class = "elementwise";
    add.flops_fwd = 1e6 * i;
    add.bytes_fwd = 1e8 * i;
    add.fwd_ms = add.bytes_fwd / (0.25 * profile.mem_bandwidth) * 1e3;
    add.reps = 1;
    profile.ops["add" + std::to_string(i)] = add;
  }
  auto eff = cost::calibrate(profile, cost::default_efficiencies(test_device()));
  CHECK(eff.compute_of(cost::OpClass::kMatMul) == Approx(0.4));
  CHECK(eff.memory_of(cost::OpClass::kElementwise) == Approx(0.25));
  // Classes without measurements keep their defaults.
  CHECK(eff.compute_of(cost::OpClass::kConv) == cost::default_efficiencies(test_device()).compute_of(cost::OpClass::kConv));
}

TEST_CASE("cost model: measured times for the profiled device, scaled by the roofline for microbatches", "[cost]") {
  SmallModel m;
  auto device = test_device();
  auto db = db_with(cost::op_signature(m.g, m.g.op(m.linear), values_requiring_grad(m.g)), "matmul", 3.0, 5.0);

  cost::CostModel with_db(m.g, device, plan::Precision::kFp32, &db);
  CHECK(with_db.calibration() == "measured");
  auto full = with_db.op_cost(m.linear);
  CHECK(full.source == cost::CostSource::kMeasured);
  CHECK(full.fwd_ms == 3.0);
  CHECK(full.bwd_ms == 5.0);
  auto half = with_db.op_cost(m.linear, 0.5);
  CHECK(half.fwd_ms < 3.0);
  CHECK(half.fwd_ms > 1.0);  // the weight read does not halve
  CHECK(with_db.op_cost(m.relu).source == cost::CostSource::kRoofline);

  cost::CostModel analytic(m.g, device, plan::Precision::kFp32, nullptr);
  CHECK(analytic.calibration() == "defaults");
  auto roofline = analytic.op_cost(m.linear);
  // So small that it is memory-bound: x, w and h move at 70% of the bandwidth.
  double bytes = 4.0 * (8 * 64 + 32 * 64 + 8 * 32);
  CHECK(2.0 * 8 * 32 * 64 / (1e12 * 0.7) < bytes / (1e11 * 0.7));
  CHECK(roofline.fwd_ms == Approx((bytes / (1e11 * 0.7) + 1e-5) * 1e3));
}

TEST_CASE("a GPU profiled under libtorch's name calibrates its preset", "[cost]") {
  using rannc::cost::preset_for_device;
  CHECK(preset_for_device("cpu") == "cpu");
  CHECK(preset_for_device("h200") == "h200");
  CHECK(preset_for_device("NVIDIA H100 80GB HBM3") == "h100-80g");
  CHECK(preset_for_device("NVIDIA H200") == "h200");
  CHECK(preset_for_device("NVIDIA A100-SXM4-40GB") == "a100-40g");
  CHECK(preset_for_device("NVIDIA A100-SXM4-80GB") == "a100-80g");
  CHECK(preset_for_device("Tesla V100-SXM2-32GB") == "v100-32g");
  CHECK(preset_for_device("NVIDIA GeForce RTX 4090") == "a100-80g");
  rannc::cost::ProfileDb db;
  db.device_for_update("NVIDIA H100 80GB HBM3").peak_fp32_flops = 5e13;
  db.device_for_update("cpu").peak_fp32_flops = 1e11;
  REQUIRE(db.device_for_preset("h100-80g") != nullptr);
  CHECK(db.device_for_preset("h100-80g")->peak_fp32_flops == 5e13);
  CHECK(db.device_for_preset("cpu")->peak_fp32_flops == 1e11);
  CHECK(db.device_for_preset("a100-80g") == nullptr);
}

TEST_CASE("rannc-run's training loss is costed after the op that computes the model's first output", "[cost]") {
  SmallModel m;
  const auto requires_grad = values_requiring_grad(m.g);
  const ir::ValueId y = m.g.model_outputs().front();
  CHECK(cost::loss_input(m.g, requires_grad) == y);
  CHECK(cost::loss_signature(m.g.value(y)) == "rannc::training_loss(float32[8,32]*)");
  auto work = cost::loss_work(m.g.value(y));
  CHECK(work.bytes_fwd == 2 * 8 * 32 * 4);  // reads the logits, writes the log-probabilities
  CHECK(work.bytes_bwd == 4 * 8 * 32 * 4);

  auto device = test_device();
  cost::CostModel analytic(m.g, device, plan::Precision::kFp32, nullptr);
  CHECK(analytic.loss_producer() == m.relu);
  auto roofline = analytic.loss_cost();
  CHECK(roofline.source == cost::CostSource::kRoofline);
  CHECK(roofline.fwd_ms > 0);
  CHECK(analytic.loss_cost(0.5).bwd_ms < roofline.bwd_ms);
  CHECK(analytic.op_cost(m.relu).fwd_ms > roofline.fwd_ms);  // the producer carries the loss

  auto db = db_with(cost::loss_signature(m.g.value(y)), "softmax", 2.0, 4.0);
  cost::CostModel with_db(m.g, device, plan::Precision::kFp32, &db);
  CHECK(with_db.loss_cost().fwd_ms == 2.0);
  CHECK(with_db.loss_cost().bwd_ms == 4.0);
  CHECK(with_db.loss_cost().source == cost::CostSource::kMeasured);

  // A scalar output is the loss already: rannc-run adds none.
  Graph scalar;
  auto x = add_tensor(scalar, "x", {8, 4}, ValueRole::kModelInput);
  auto w = add_tensor(scalar, "w", {4}, ValueRole::kParam);
  auto s = add_tensor(scalar, "s", {});
  scalar.add_op("aten::matmul", {x, w}, {s});
  scalar.add_model_output(s);
  CHECK(cost::loss_input(scalar, values_requiring_grad(scalar)) == kNoId);
  CHECK(cost::CostModel(scalar, device, plan::Precision::kFp32, nullptr).loss_cost().fwd_ms == 0);
}

TEST_CASE("a GPU's pass takes the longer of its kernels' and its host's sums", "[cost]") {
  // linear: large kernels issued quickly; relu: a small kernel the host issues slowly.
  SmallModel m;
  auto requires_grad = values_requiring_grad(m.g);
  auto db = db_with(cost::op_signature(m.g, m.g.op(m.linear), requires_grad), "matmul", 3.0, 5.0);
  auto& ops = db.device_for_update("test").ops;
  auto& linear = ops.begin()->second;
  linear.fwd_host_ms = 0.5, linear.bwd_host_ms = 1.0;
  cost::OpMeasurement relu;
  relu.op_class = "elementwise";
  relu.fwd_ms = 0.25, relu.bwd_ms = 0.25, relu.fwd_host_ms = 2.0, relu.bwd_host_ms = 6.0;
  relu.reps = 1;
  ops[cost::op_signature(m.g, m.g.op(m.relu), requires_grad)] = relu;

  cost::CostModel costs(m.g, test_device(), plan::Precision::kFp32, &db);
  auto linear_cost = costs.op_cost(m.linear), relu_cost = costs.op_cost(m.relu);
  CHECK(linear_cost.fwd_host_ms == 0.5);
  CHECK(relu_cost.bwd_host_ms == 6.0);
  // The host's time does not scale with the microbatch; the kernels' does.
  CHECK(costs.op_cost(m.linear, 0.5).fwd_host_ms == 0.5);
  CHECK(costs.op_cost(m.linear, 0.5).fwd_ms < 3.0);

  // Forward: kernels 3.25 ms against 2.5 ms issuing; backward: kernels 5.25 against 7 issuing
  // (rannc-run's loss on y is costed by the roofline, device time only).
  auto estimate = cost::estimate_step(m.g, test_device(), plan::Precision::kFp32, plan::Optimizer::kSgd, &db);
  double loss_fwd = costs.loss_cost().fwd_ms, loss_bwd = costs.loss_cost().bwd_ms;
  CHECK(estimate.fwd_ms == Approx(3.25 + loss_fwd));
  CHECK(estimate.bwd_ms == Approx(std::max(5.25 + loss_bwd, 7.0)));
  // Summing each op's longer time would charge 3 + 2 and 5 + 6.
  CHECK(estimate.fwd_ms + estimate.bwd_ms < 5.0 + 11.0);

  cost::StepTime step;
  step.add(linear_cost);
  step.add(relu_cost);
  CHECK(step.fwd.device_ms == Approx(3.25 + loss_fwd));
  CHECK(step.fwd.host_ms == 2.5);
  CHECK(step.ms() == Approx(estimate.fwd_ms + estimate.bwd_ms));
}
