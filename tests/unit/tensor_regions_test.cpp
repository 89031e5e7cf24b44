// Tensor-parallel regions (partitioner/tensor_regions.h) found in models of each frontend: the
// shape-only GPT-3 ONNX of samples/make_shape_only.py, the committed GPT-3 .pt2 of torch.export,
// TorchScript traced from the samples' GPT and torch's own nn.TransformerEncoderLayer
// (tests/models/make_tensor_region_models.py), and small graphs built here.
#include "partitioner/tensor_regions.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <set>
#include <sstream>

#include "compiler/input_spec.h"
#include "compiler/model.h"
#include "cost_model/device.h"
#include "partitioner/block_costs.h"
#include "partitioner/context_parallel.h"
#include "partitioner/units.h"
#include "graph_builders.h"
#include "ir/batch_dims.h"

using namespace rannc;
using namespace rannc::partition;
using rannc::testing::add_literal;
using rannc::testing::add_tensor;

namespace {

Model load(const std::string& path, const std::vector<std::string>& inputs = {}) {
  LoadOptions options;
  for (const auto& spec : inputs) options.inputs.push_back(parse_input_spec(spec));
  return load_model(path, options);
}

// The whole model as one block: block_costs' sums are over every layer.
Blocking whole_model_block(const UnitGraph& units) {
  Blocking one_block;
  for (int unit = 0; unit < static_cast<int>(units.units.size()); ++unit) one_block.order.push_back(unit);
  one_block.starts = {0};
  return one_block;
}

ir::ValueId value_named(const ir::Graph& graph, const std::string& name) {
  for (const auto& value : graph.values())
    if (value.name == name) return value.id;
  FAIL("no value named " << name);
  return ir::kNoId;
}

// The op reading a weight: its matrix product, or the transpose feeding it.
ir::OpId reader_of(const ir::Graph& graph, const std::string& weight) {
  const auto& consumers = graph.value(value_named(graph, weight)).consumers;
  REQUIRE(consumers.size() == 1);
  return consumers[0];
}

// The product reading a weight, through a transpose of it.
ir::OpId product_of(const ir::Graph& graph, const std::string& weight) {
  ir::OpId op = reader_of(graph, weight);
  if (graph.op(op).kind == "aten::t" || graph.op(op).kind == "onnx::Transpose") {
    REQUIRE(graph.value(graph.op(op).outputs[0]).consumers.size() == 1);
    op = graph.value(graph.op(op).outputs[0]).consumers[0];
  }
  return op;
}

// "name:dim:groups" of each weight, in the region's order.
std::vector<std::string> weights_of(const ir::Graph& graph, const TensorRegion& region) {
  std::vector<std::string> out;
  for (const auto& w : region.weights)
    out.push_back(graph.value(w.weight).name + ":" + std::to_string(w.dim) + ":" + std::to_string(w.groups));
  return out;
}

std::vector<std::string> kinds_of(const ir::Graph& graph, const std::vector<ir::OpId>& ops) {
  std::vector<std::string> kinds;
  for (ir::OpId id : ops) kinds.push_back(graph.op(id).kind);
  return kinds;
}

std::set<std::string> as_set(const std::vector<std::string>& items) { return {items.begin(), items.end()}; }
std::set<ir::OpId> as_set(const std::vector<ir::OpId>& ops) { return {ops.begin(), ops.end()}; }

// The regions of one kind, in their order.
std::vector<TensorRegion> regions_of(const TensorRegions& found, plan::RegionKind kind) {
  std::vector<TensorRegion> out;
  for (const auto& r : found.regions)
    if (r.kind == kind) out.push_back(r);
  return out;
}

std::vector<TensorRegion> layer_regions(const TensorRegions& found) { return regions_of(found, plan::RegionKind::kLayer); }

// A tied vocabulary: the token embedding's lookup and the output layer making the first model
// output both split the table by rows (its vocabulary), at any degree up to its size.
void check_tied_vocabulary(const ir::Graph& graph, const TensorRegions& found, const std::string& table) {
  auto embeddings = regions_of(found, plan::RegionKind::kVocabularyEmbedding);
  auto heads = regions_of(found, plan::RegionKind::kVocabularyHead);
  REQUIRE(embeddings.size() == 1);
  REQUIRE(heads.size() == 1);
  const auto& embedding = embeddings[0];
  const auto& head = heads[0];
  const std::int64_t vocabulary = graph.value(value_named(graph, table)).type.shape[0];
  CHECK(embedding.column_ops == std::vector<ir::OpId>{embedding.row_op});
  CHECK(embedding.ops == embedding.column_ops);
  CHECK(embedding.input == ir::kNoId);  // token ids: no gradient to reduce
  CHECK(embedding.output == graph.op(embedding.row_op).outputs[0]);
  CHECK(weights_of(graph, embedding) == std::vector<std::string>{table + ":0:1"});
  CHECK(head.row_op == ir::kNoId);
  CHECK(head.output == graph.model_outputs().at(0));
  CHECK(head.anchor() == head.column_ops.at(0));
  CHECK(weights_of(graph, head) == std::vector<std::string>{table + ":0:1"});
  CHECK(head.input == graph.op(head.column_ops.at(0)).inputs[0]);
  for (const auto* region : {&embedding, &head}) {
    CHECK(region->divisor == vocabulary);
    CHECK(region->allows(8));  // a vocabulary 8 does not divide splits unevenly
    CHECK_FALSE(region->allows(static_cast<int>(vocabulary) + 1));
    CHECK(region->attention_core.empty());
  }
  // The first region, by anchor, is the embedding; the last the head.
  CHECK(found.regions.front().kind == plan::RegionKind::kVocabularyEmbedding);
  CHECK(found.regions.back().kind == plan::RegionKind::kVocabularyHead);
  CHECK(found.rejected.empty());
}

int ops_in_regions(const TensorRegions& found) {
  return static_cast<int>(
      std::count_if(found.region_of_op.begin(), found.region_of_op.end(), [](int r) { return r >= 0; }));
}

// Everything the analysis returns, as text, to compare two runs.
std::string text_of(const TensorRegions& found) {
  std::ostringstream out;
  auto ids = [&](const std::vector<ir::OpId>& ops) {
    for (auto id : ops) out << id << ",";
    out << ";";
  };
  for (const auto& r : found.regions) {
    ids(r.column_ops);
    out << r.row_op << ";";
    ids(r.ops);
    for (const auto& w : r.weights) out << w.weight << ":" << w.dim << ":" << w.groups << ",";
    out << r.input << ";" << r.output << ";" << r.divisor << ";";
    ids(r.attention_core);
    out << "\n";
  }
  for (const auto& r : found.rejected) {
    ids(r.column_ops);
    out << r.reason << "\n";
  }
  for (int r : found.region_of_op) out << r << ",";
  return out.str();
}

// Both regions of each pre-LN GPT-3 block, attention (fused QKV) then MLP, and what stays whole.
void check_gpt3_layers(const ir::Graph& graph, const TensorRegions& found, const std::string& qkv,
                       const std::string& out_proj, const std::string& fc1, const std::string& fc2, int column_dim) {
  const auto layers = layer_regions(found);
  REQUIRE(layers.size() == 192);
  REQUIRE(found.regions.size() == 194);  // and the vocabulary's embedding and head
  REQUIRE(found.region_of_op.size() == graph.ops().size());
  const std::string col = ":" + std::to_string(column_dim), row = ":" + std::to_string(1 - column_dim);
  for (int layer = 0; layer < 96; ++layer) {
    CAPTURE(layer);
    auto name = [&](const std::string& pattern) {
      auto at = pattern.find('#');
      return pattern.substr(0, at) + std::to_string(layer) + pattern.substr(at + 1);
    };
    const auto& attention = layers[static_cast<std::size_t>(2 * layer)];
    const auto& mlp = layers[static_cast<std::size_t>(2 * layer + 1)];
    CHECK(attention.column_ops == std::vector<ir::OpId>{product_of(graph, name(qkv) + ".weight")});
    CHECK(attention.row_op == product_of(graph, name(out_proj) + ".weight"));
    CHECK(as_set(weights_of(graph, attention)) == std::set<std::string>{name(qkv) + ".weight" + col + ":3",
                                                                        name(qkv) + ".bias:0:3",
                                                                        name(out_proj) + ".weight" + row + ":1"});
    CHECK(attention.divisor == 96);
    CHECK(attention.allows(8));
    CHECK(attention.allows(32));
    CHECK_FALSE(attention.allows(64));
    CHECK(attention.input == graph.op(attention.column_ops[0]).inputs[0]);
    CHECK(attention.output == graph.op(attention.row_op).outputs[0]);
    CHECK(attention.attention_core.size() == 5);  // scores, scale, mask, softmax, product with V
    CHECK(mlp.column_ops == std::vector<ir::OpId>{product_of(graph, name(fc1) + ".weight")});
    CHECK(mlp.row_op == product_of(graph, name(fc2) + ".weight"));
    CHECK(as_set(weights_of(graph, mlp)) == std::set<std::string>{name(fc1) + ".weight" + col + ":1",
                                                                  name(fc1) + ".bias:0:1",
                                                                  name(fc2) + ".weight" + row + ":1"});
    CHECK(mlp.divisor == 4 * 12288);
    CHECK(mlp.attention_core.empty());
  }
  // Layer norms, residual adds and the position embedding stay replicated.
  for (const auto& op : graph.ops()) {
    bool replicated = op.kind.find("ayer") != std::string::npos;  // LayerNormalization, aten::layer_norm
    if (replicated) CHECK(found.region_of_op[static_cast<std::size_t>(op.id)] == -1);
  }
}

// x -> linear(w1, b1) -> `middle` over the last dim -> linear(w2, b2) -> output.
ir::Graph two_linears(const std::string& middle) {
  ir::Graph graph;
  using ir::ValueRole;
  auto x = add_tensor(graph, "x", {4, 8, 16}, ValueRole::kModelInput);
  auto w1 = add_tensor(graph, "w1", {32, 16}, ValueRole::kParam);
  auto b1 = add_tensor(graph, "b1", {32}, ValueRole::kParam);
  auto w2 = add_tensor(graph, "w2", {16, 32}, ValueRole::kParam);
  auto b2 = add_tensor(graph, "b2", {16}, ValueRole::kParam);
  auto h = add_tensor(graph, "h", {4, 8, 32});
  graph.add_op("aten::linear", {x, w1, b1}, {h});
  auto m = add_tensor(graph, "m", {4, 8, 32});
  if (middle == "aten::layer_norm") {
    auto dims = add_literal(graph, "dims", std::vector<std::int64_t>{32}, ir::ValueKind::kIntList);
    auto gamma = add_tensor(graph, "gamma", {32}, ValueRole::kParam);
    auto beta = add_tensor(graph, "beta", {32}, ValueRole::kParam);
    graph.add_op(middle, {h, dims, gamma, beta}, {m});
  } else {
    graph.add_op(middle, {h}, {m});
  }
  auto y = add_tensor(graph, "y", {4, 8, 16});
  graph.add_op("aten::linear", {m, w2, b2}, {y});
  graph.add_model_output(y);
  graph.validate();
  return graph;
}

// tokens [2, 8] -> embedding of a [64, 16] table -> linear 16->32, `middle`, linear 32->16 ->
// residual add -> an output layer of `features` without a bias, then an add of its own bias ->
// the logits. Ops: 0 lookup, 1-3 the MLP, 4 residual, 5 head product, 6 its bias add.
ir::Graph small_language_model(std::int64_t features, const std::string& middle = "aten::gelu") {
  ir::Graph graph;
  using ir::ValueRole;
  auto tokens = add_tensor(graph, "tokens", {2, 8}, ValueRole::kModelInput, ir::DType::kInt64);
  auto table = add_tensor(graph, "table", {64, 16}, ValueRole::kParam);
  auto x = add_tensor(graph, "x", {2, 8, 16});
  graph.add_op("aten::embedding", {table, tokens}, {x});
  auto w1 = add_tensor(graph, "w1", {32, 16}, ValueRole::kParam);
  auto b1 = add_tensor(graph, "b1", {32}, ValueRole::kParam);
  auto w2 = add_tensor(graph, "w2", {16, 32}, ValueRole::kParam);
  auto b2 = add_tensor(graph, "b2", {16}, ValueRole::kParam);
  auto h = add_tensor(graph, "h", {2, 8, 32}), m = add_tensor(graph, "m", {2, 8, 32});
  auto y = add_tensor(graph, "y", {2, 8, 16}), r = add_tensor(graph, "r", {2, 8, 16});
  graph.add_op("aten::linear", {x, w1, b1}, {h});
  if (middle == "aten::layer_norm") {
    auto dims = add_literal(graph, "dims", std::vector<std::int64_t>{32}, ir::ValueKind::kIntList);
    graph.add_op(middle, {h, dims}, {m});
  } else {
    graph.add_op(middle, {h}, {m});
  }
  graph.add_op("aten::linear", {m, w2, b2}, {y});
  graph.add_op("aten::add", {x, y}, {r});
  auto head = add_tensor(graph, "head.weight", {features, 16}, ValueRole::kParam);
  auto bias = add_tensor(graph, "head.bias", {features}, ValueRole::kParam);
  auto z = add_tensor(graph, "z", {2, 8, features}), logits = add_tensor(graph, "logits", {2, 8, features});
  graph.add_op("aten::linear", {r, head}, {z});
  graph.add_op("aten::add", {z, bias}, {logits});
  graph.add_model_output(logits);
  ir::propagate_batch_dependence(graph);  // the token ids come with the batch
  graph.validate();
  return graph;
}

}  // namespace

TEST_CASE("tensor regions: a language model's vocabulary, embedding and output layer with its own bias add",
          "[tensor_regions]") {
  auto graph = small_language_model(64);
  auto found = find_tensor_regions(graph);
  REQUIRE(found.regions.size() == 3);
  CHECK(found.rejected.empty());
  const auto& embedding = found.regions[0];
  const auto& mlp = found.regions[1];
  const auto& head = found.regions[2];
  CHECK(embedding.kind == plan::RegionKind::kVocabularyEmbedding);
  CHECK(embedding.ops == std::vector<ir::OpId>{0});
  CHECK(weights_of(graph, embedding) == std::vector<std::string>{"table:0:1"});
  CHECK(embedding.input == ir::kNoId);
  CHECK(embedding.output == value_named(graph, "x"));
  CHECK(mlp.kind == plan::RegionKind::kLayer);
  CHECK(head.kind == plan::RegionKind::kVocabularyHead);
  CHECK(head.column_ops == std::vector<ir::OpId>{5});
  CHECK(head.ops == std::vector<ir::OpId>{5, 6});
  CHECK(weights_of(graph, head) == std::vector<std::string>{"head.weight:0:1", "head.bias:0:1"});
  CHECK(head.input == value_named(graph, "r"));
  CHECK(head.output == value_named(graph, "logits"));
  CHECK(found.region_of_op == std::vector<int>{0, 1, 1, 1, -1, 2, 2});
  // A vocabulary splits unevenly, but only a layer region makes a degree a choice.
  CHECK(head.allows(3));
  CHECK_FALSE(found.allows_degree(3));
  CHECK(found.allows_degree(2));

  // Costs at degree 2, the model one block: the forward all-reduces the MLP's output, the looked-up
  // rows and the cross entropy's three fp32 values per position; the backward the MLP's and the
  // head's input gradients, none for the token ids.
  auto precision = plan::Precision::kFp32;
  cost::CostModel costs(graph, *cost::find_device_preset("a100-80g"), precision, nullptr);
  UnitGraph units = build_units(graph);
  const Blocking one_block = whole_model_block(units);
  auto activations = cost::activation_memory(graph, costs.requires_grad(), precision);
  BlockCosts blocks = block_costs(graph, units, one_block, costs, activations, 2, {2}, found, {2});
  const auto* split = blocks.split(2);
  REQUIRE(split);
  const double rows_bytes = 2 * 8 * 16 * 4;
  CHECK(split->fwd_reduced_bytes[0] == rows_bytes + rows_bytes + 3 * 4 * (2 * 8));
  CHECK(split->fwd_collectives[0] == 1 + 1 + 3);
  CHECK(split->bwd_reduced_bytes[0] == rows_bytes + rows_bytes);
  CHECK(split->bwd_collectives[0] == 2);
  // Every weight but the MLP's second bias (added after the all-reduce) splits in two.
  RangeTable ranges(blocks);
  const double whole = 64 * 16 + 32 * 16 + 32 + 16 * 32 + 16 + 64 * 16 + 64;
  CHECK(ranges.param_elements(0, 1) == whole);
  CHECK(ranges.param_elements(0, 1, 2) == Approx(16 + (whole - 16) / 2));
  // Adam's temporaries are as large as the largest weight a device steps: a slice of the table.
  CHECK(ranges.largest_param_elements(0, 1) == 64 * 16);
  CHECK(ranges.largest_param_elements(0, 1, 2) == 64 * 16 / 2);
}

TEST_CASE("tensor regions: a classifier narrower than its input stays whole, and no layer region means no vocabulary",
          "[tensor_regions]") {
  auto classifier = small_language_model(4);
  auto found = find_tensor_regions(classifier);
  REQUIRE(found.regions.size() == 2);  // the token embedding and the MLP
  CHECK(found.regions[0].kind == plan::RegionKind::kVocabularyEmbedding);
  REQUIRE(found.rejected.size() == 1);
  CHECK(found.rejected[0].column_ops == std::vector<ir::OpId>{5});
  CHECK(found.rejected[0].reason == "a classifier of 4 classes, narrower than its 16 input features, stays whole "
                                    "(only an output layer wider than its input, a vocabulary, splits)");

  auto no_layers = small_language_model(64, "aten::layer_norm");
  auto none = find_tensor_regions(no_layers);
  CHECK(none.regions.empty());
  CHECK(none.sequence_ops.empty());
  CHECK(std::all_of(none.region_of_op.begin(), none.region_of_op.end(), [](int r) { return r < 0; }));
}

TEST_CASE("tensor regions: shape-only GPT-3 175B from ONNX, two per layer", "[tensor_regions]") {
  auto model = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b.onnx");
  const auto& graph = model.graph;
  auto found = find_tensor_regions(graph);
  // MatMul weights are [in, out]: column ops split dim 1, row ops dim 0.
  check_gpt3_layers(graph, found, "layers.#.attn.qkv", "layers.#.attn.out", "layers.#.ffn.fc1", "layers.#.ffn.fc2", 1);
  check_tied_vocabulary(graph, found, "embeddings.word.weight");
  CHECK(graph.value(value_named(graph, "embeddings.word.weight")).type.shape[0] == 50257);  // no degree divides it
  // The head's product and the transpose of the tied table.
  CHECK(kinds_of(graph, found.regions.back().ops) == std::vector<std::string>{"onnx::Transpose", "onnx::MatMul"});
  // The position table's lookup by constant positions stays whole.
  CHECK(found.region_of_op[static_cast<std::size_t>(reader_of(graph, "embeddings.position.weight"))] == -1);

  const auto layers = layer_regions(found);
  const auto& attention = layers[0];
  CHECK(kinds_of(graph, attention.attention_core) ==
        std::vector<std::string>{"onnx::MatMul", "onnx::Div", "onnx::Where", "onnx::Softmax", "onnx::MatMul"});
  // QKV product, bias add, split, 3 x (reshape, transpose), scores, scale, mask, softmax, product
  // with V, transpose and reshape back, output projection.
  CHECK(attention.ops.size() == 17);
  CHECK(layers[1].ops.size() == 8);  // fc1, bias add, GELU's 5 ops, fc2
  CHECK(ops_in_regions(found) == 96 * (17 + 8) + 1 + 2);  // and the lookup, the head's transpose and product
  // The row ops' biases are added after the all-reduce: their adds stay outside, unsplit.
  for (const std::string bias : {"layers.0.attn.out.bias", "layers.0.ffn.fc2.bias", "layers.95.ffn.fc2.bias"})
    CHECK(found.region_of_op[static_cast<std::size_t>(reader_of(graph, bias))] == -1);

  // Sequence parallelism: the embeddings' sum, then per layer two layer norms, the row ops' two
  // bias adds and the two residual adds, and the final layer norm; none inside a region, and
  // neither the lookups nor the LM head.
  CHECK(found.sequence_ops.size() == 1 + 96 * 6 + 1);
  std::vector<std::string> kinds = kinds_of(graph, found.sequence_ops);
  CHECK(std::count(kinds.begin(), kinds.end(), "onnx::LayerNormalization") == 96 * 2 + 1);
  CHECK(std::count(kinds.begin(), kinds.end(), "onnx::Add") == 1 + 96 * 4);
  for (auto op : found.sequence_ops) CHECK(found.region_of_op[static_cast<std::size_t>(op)] == -1);
  CHECK(std::is_sorted(found.sequence_ops.begin(), found.sequence_ops.end()));
  for (const std::string bias : {"layers.0.attn.out.bias", "layers.95.ffn.fc2.bias"}) {
    auto op = reader_of(graph, bias);
    CHECK(std::binary_search(found.sequence_ops.begin(), found.sequence_ops.end(), op));
  }
}

TEST_CASE("selective recomputation: GPT-3's attention cores drop a*s^2*b softmax bytes per layer", "[tensor_regions]") {
  auto model = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b.onnx");
  const auto& graph = model.graph;
  auto regions = find_tensor_regions(graph);
  auto precision = plan::Precision::kBf16Mixed;
  cost::CostModel costs(graph, *cost::find_device_preset("a100-80g"), precision, nullptr);
  UnitGraph units = build_units(graph);
  const Blocking one_block = whole_model_block(units);
  auto activations = cost::activation_memory(graph, costs.requires_grad(), precision);
  BlockCosts blocks = block_costs(graph, units, one_block, costs, activations, model.batch, {1}, regions, {8});
  // Per layer the softmax's output (96 heads x 2048 x 2048 at batch 1, bf16) is what the core
  // keeps of its own: the scores' Q and K and the product's V belong to the QKV split, and the
  // product with V's output to the output projection, all kept as before.
  const double softmax_bytes = 96.0 * 2048 * 2048 * 2;
  CHECK(blocks.cores.kept_bytes[0] == Approx(96 * softmax_bytes).epsilon(1e-9));
  CHECK(blocks.cores.largest_bytes[0] == Approx(softmax_bytes).epsilon(1e-9));
  CHECK(blocks.cores.kept_bytes[0] < 0.5 * blocks.kept_bytes[0]);
  // Recomputing them runs scores, scale, mask and softmax again: no weight product.
  CHECK(blocks.cores.fwd_ms[0][0] > 0);
  CHECK(blocks.cores.fwd_ms[0][0] < 0.2 * blocks.fwd_ms[0][0]);
  // Split 8 ways, each device keeps and recomputes 1/8 of every core (heads split).
  const auto* split = blocks.split(8);
  REQUIRE(split);
  CHECK(split->cores.kept_bytes[0] == Approx(blocks.cores.kept_bytes[0] / 8).epsilon(1e-9));
  CHECK(split->cores.largest_bytes[0] == Approx(softmax_bytes / 8).epsilon(1e-9));
  RangeTable ranges(blocks);
  CHECK(ranges.core_kept_bytes(0, 1, 8) == split->cores.kept_bytes[0]);
  CHECK(ranges.largest_core_bytes(0, 1, 1) == blocks.cores.largest_bytes[0]);
}

TEST_CASE("fused attention: GPT-3's cores keep a log-sum-exp per query row and cost their products' FLOPs",
          "[tensor_regions]") {
  auto model = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b.onnx");
  const auto& graph = model.graph;
  auto regions = find_tensor_regions(graph);
  auto kernels = attention_kernels(graph, regions);
  REQUIRE(kernels.size() == 96);
  // The core, and the reshapes and transposes that make its keys and values from the fused QKV
  // projection's split (the kernel reads them as the split writes them).
  const auto layers = layer_regions(regions);
  const auto& core = layers[0].attention_core;
  cost::FusedKernel expected = core;
  for (auto operand : key_value_operands(graph, core)) {
    auto movement = movement_before(graph, operand).ops;
    CHECK(movement.size() == 2);
    for (auto op : movement) CHECK(ir::op_class_of(graph.op(op).kind) == ir::OpClass::kDataMovement);
    expected.insert(expected.end(), movement.begin(), movement.end());
  }
  std::sort(expected.begin(), expected.end());
  CHECK(kernels[0] == expected);
  auto precision = plan::Precision::kBf16Mixed;
  const auto& device = *cost::find_device_preset("a100-80g");
  cost::CostModel unfused(graph, device, precision, nullptr);
  cost::CostModel fused = unfused;
  fused.fuse(graph, kernels);
  CHECK_THROWS_AS(fused.fuse(graph, kernels), std::logic_error);

  // Memory: per layer the softmax's output (96 heads x 2048 x 2048 at batch 1, bf16) is no longer
  // kept; the kernel keeps one fp32 log-sum-exp per head and query row instead.
  auto before = cost::activation_memory(graph, unfused.requires_grad(), precision);
  auto after = cost::activation_memory(graph, fused.requires_grad(), precision, fused.fused_kernels());
  auto sum = [](const std::vector<double>& bytes) { return std::accumulate(bytes.begin(), bytes.end(), 0.0); };
  const double softmax_bytes = 96.0 * 2048 * 2048 * 2, lse_bytes = 96.0 * 2048 * 4;
  CHECK(sum(after.kept_bytes) == Approx(sum(before.kept_bytes) - 96 * (softmax_bytes - lse_bytes)).epsilon(1e-12));
  const auto& kernel = core;
  const ir::Op& scores = graph.op(kernel.front());
  const ir::Op& softmax = graph.op(kernel[3]);
  REQUIRE(softmax.kind == "onnx::Softmax");
  CHECK_FALSE(after.saved[static_cast<std::size_t>(softmax.outputs[0])]);
  CHECK(before.saved[static_cast<std::size_t>(softmax.outputs[0])]);
  // No gradient of the scores is ever held: the scores' product holds those of Q and K only.
  CHECK(after.workspace_bytes[static_cast<std::size_t>(scores.id)] <
        before.workspace_bytes[static_cast<std::size_t>(scores.id)] - softmax_bytes / 2);

  // Time: the products keep their FLOPs, move no bytes, and backward computes the scores again.
  const auto& plain = unfused.work(scores.id);
  const auto& in_kernel = fused.work(scores.id);
  CHECK(in_kernel.flops_fwd == plain.flops_fwd);
  CHECK(in_kernel.flops_bwd == Approx(plain.flops_bwd + plain.flops_fwd));
  CHECK(in_kernel.bytes_fwd == 0);
  const double peak = cost::peak_flops(device, precision, cost::OpClass::kMatMul);
  const double expected_ms = (in_kernel.flops_fwd / (peak * fused.efficiencies().compute_of(cost::OpClass::kMatMul)) +
                              fused.efficiencies().op_overhead) * 1e3;
  CHECK(fused.op_cost(scores.id).fwd_ms == Approx(expected_ms).epsilon(1e-9));
  double core_before = 0, core_after = 0;
  for (auto op : kernel) core_before += unfused.op_cost(op).fwd_ms, core_after += fused.op_cost(op).fwd_ms;
  CHECK(core_after < 0.7 * core_before);  // at sequence 2048 the unfused softmax is memory-bound
  // Ops outside the kernels cost what they cost.
  const auto qkv = layer_regions(regions)[0].column_ops.front();
  CHECK(fused.op_cost(qkv).fwd_ms == unfused.op_cost(qkv).fwd_ms);
  CHECK(after.kept_bytes[static_cast<std::size_t>(qkv)] == before.kept_bytes[static_cast<std::size_t>(qkv)]);

  // Selective recomputation has nothing left to drop.
  UnitGraph units = build_units(graph);
  const Blocking one_block = whole_model_block(units);
  BlockCosts blocks = block_costs(graph, units, one_block, fused, after, model.batch, {1}, regions, {8});
  CHECK(blocks.cores.kept_bytes[0] == 0);
}

TEST_CASE("fused elementwise kernels: GPT-3's bias and GELU keep the MLP's input and output, as Korthikanti et al. count",
          "[tensor_regions]") {
  auto model = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b.onnx");
  const auto& graph = model.graph;
  auto regions = find_tensor_regions(graph);
  auto attention = attention_kernels(graph, regions);
  auto kernels = cost::elementwise_kernels(graph, attention);
  const auto layers = layer_regions(regions);
  const auto& mlp = layers[1];
  // fc1, then its bias add and GELU's Div, Erf, Add, Mul, Mul as one kernel, then fc2.
  const cost::FusedKernel gelu(mlp.ops.begin() + 1, mlp.ops.end() - 1);
  REQUIRE(gelu.size() == 6);
  CHECK(std::count(kernels.begin(), kernels.end(), gelu) == 1);
  for (const auto& kernel : kernels) {  // none overlaps an attention core, none is a lone op
    CHECK(kernel.size() >= 2);
    CHECK(std::is_sorted(kernel.begin(), kernel.end()));
    for (const auto& core : attention)
      for (auto op : kernel) CHECK_FALSE(std::binary_search(core.begin(), core.end(), op));
  }

  auto precision = plan::Precision::kBf16Mixed;
  cost::CostModel unfused(graph, *cost::find_device_preset("a100-80g"), precision, nullptr);
  cost::CostModel fused = unfused;
  fused.fuse(graph, kernels);
  auto before = cost::activation_memory(graph, unfused.requires_grad(), precision);
  auto after = cost::activation_memory(graph, fused.requires_grad(), precision, fused.fused_kernels());
  auto mlp_kept = [&](const cost::ActivationMemory& memory) {
    double bytes = 0;
    for (auto op : mlp.ops) bytes += memory.kept_bytes[static_cast<std::size_t>(op)];
    return bytes;
  };
  // [batch 1, 2048, 4 x 12288] in bf16: op by op the bias add's output, its quotient by sqrt(2),
  // erf + 1 and the GELU's output; fused, fc1's output (to compute the GELU again) and the GELU's.
  const double wide = 2048.0 * 4 * 12288 * 2;
  CHECK(mlp_kept(before) == Approx(4 * wide).epsilon(1e-12));
  CHECK(mlp_kept(after) == Approx(2 * wide).epsilon(1e-12));
  // The kernel reads fc1's output, the bias and GELU's three fp32 constants (sqrt(2), 1, 0.5) and
  // writes the GELU's output once, each on the op that reads or writes it; backward computes the
  // inside again.
  const auto first = static_cast<std::size_t>(gelu.front());
  const double fc1_bytes = 2048.0 * 4 * 12288 * 4, bias_bytes = 4 * 12288 * 4, constant_bytes = 4;
  CHECK(fused.work(gelu.front()).bytes_fwd == Approx(fc1_bytes + bias_bytes).epsilon(1e-15));
  CHECK(fused.work(gelu[1]).bytes_fwd == constant_bytes);
  CHECK(fused.work(gelu.back()).bytes_fwd == Approx(fc1_bytes + constant_bytes).epsilon(1e-15));
  CHECK(fused.work(gelu[1]).flops_bwd == Approx(unfused.work(gelu[1]).flops_bwd + unfused.work(gelu[1]).flops_fwd));
  CHECK(after.workspace_bytes[first] <= before.workspace_bytes[first]);
  double gelu_before = 0, gelu_after = 0;
  for (auto op : gelu) gelu_before += unfused.op_cost(op).fwd_ms, gelu_after += fused.op_cost(op).fwd_ms;
  CHECK(gelu_after < 0.5 * gelu_before);
}

TEST_CASE("fused attention: a scaled_dot_product_attention op keeps no scores and does 2.5x its forward in backward",
          "[tensor_regions]") {
  auto model = load(RANNC_PT2_MODELS "/tiny_attention.pt2");
  const auto& graph = model.graph;
  auto kernels = attention_kernels(graph, find_tensor_regions(graph));
  REQUIRE(kernels.size() == 1);
  REQUIRE(kernels[0].size() == 1);
  const ir::Op& op = graph.op(kernels[0][0]);
  REQUIRE(op.kind == "aten::scaled_dot_product_attention");
  auto precision = plan::Precision::kFp32;
  cost::CostModel unfused(graph, *cost::find_device_preset("a100-80g"), precision, nullptr);
  cost::CostModel fused = unfused;
  fused.fuse(graph, kernels);
  CHECK(fused.work(op.id).flops_bwd == Approx(2.5 * unfused.work(op.id).flops_fwd));
  auto before = cost::activation_memory(graph, unfused.requires_grad(), precision);
  auto after = cost::activation_memory(graph, fused.requires_grad(), precision, fused.fused_kernels());
  // Unfused: the scores [batch, heads, L, S]; fused: one fp32 per [batch, heads, L] row.
  const auto& q = graph.value(op.inputs[0]).type;
  const auto& k = graph.value(op.inputs[1]).type;
  const double rows = static_cast<double>(q.numel()) / static_cast<double>(q.shape.back());
  const double scores = rows * static_cast<double>(k.shape[k.shape.size() - 2]);
  const auto id = static_cast<std::size_t>(op.id);
  CHECK(after.kept_bytes[id] == Approx(before.kept_bytes[id] - scores * 4 + rows * 4).epsilon(1e-12));
}

TEST_CASE("tensor regions: shape-only GPT-3 175B from torch.export (.pt2)", "[tensor_regions]") {
  auto model = load(RANNC_PT2_MODELS "/gpt3-175b.pt2");
  const auto& graph = model.graph;
  auto found = find_tensor_regions(graph);
  // aten::linear's weights are [out, in]: column ops split dim 0, row ops dim 1.
  check_gpt3_layers(graph, found, "layers.#.qkv", "layers.#.out", "layers.#.fc1", "layers.#.fc2", 0);
  const auto layers = layer_regions(found);
  CHECK(kinds_of(graph, layers[0].attention_core) ==
        std::vector<std::string>{"aten::matmul", "aten::div", "aten::masked_fill", "aten::softmax", "aten::matmul"});
  CHECK(kinds_of(graph, layers[1].ops) ==
        std::vector<std::string>{"aten::linear", "aten::gelu", "aten::linear"});
  // The head multiplies by the embedding table transposed.
  CHECK(kinds_of(graph, found.regions.back().ops) == std::vector<std::string>{"aten::t", "aten::matmul"});
  check_tied_vocabulary(graph, found, "word.weight");
}

TEST_CASE("tensor regions: q and a fused kv projection around scaled_dot_product_attention (.pt2)",
          "[tensor_regions]") {
  auto model = load(RANNC_PT2_MODELS "/tiny_attention.pt2");
  const auto& graph = model.graph;
  auto found = find_tensor_regions(graph);
  REQUIRE(layer_regions(found).size() == 1);
  const auto region = layer_regions(found)[0];
  check_tied_vocabulary(graph, found, "head.weight");  // the tied table's name in the .pt2
  // Both projections read the same input: one region of two column ops.
  CHECK(region.column_ops == std::vector<ir::OpId>{reader_of(graph, "q.weight"), reader_of(graph, "kv.weight")});
  CHECK(region.row_op == reader_of(graph, "out.weight"));
  CHECK(weights_of(graph, region) ==
        std::vector<std::string>{"q.weight:0:1", "q.bias:0:1", "kv.weight:0:2", "kv.bias:0:2", "out.weight:1:1"});
  CHECK(region.divisor == 2);
  CHECK(kinds_of(graph, region.attention_core) == std::vector<std::string>{"aten::scaled_dot_product_attention"});
}

TEST_CASE("tensor regions: the samples' GPT traced to TorchScript", "[tensor_regions]") {
  auto model = load(RANNC_TENSOR_REGION_MODELS "/gpt.trace.pt", {"tokens:2x32:int64"});
  const auto& graph = model.graph;
  auto found = find_tensor_regions(graph);
  const auto layers = layer_regions(found);
  REQUIRE(layers.size() == 4);
  for (int block = 0; block < 2; ++block) {
    CAPTURE(block);
    std::string prefix = "blocks." + std::to_string(block) + ".";
    const auto& attention = layers[static_cast<std::size_t>(2 * block)];
    const auto& mlp = layers[static_cast<std::size_t>(2 * block + 1)];
    CHECK(attention.column_ops == std::vector<ir::OpId>{reader_of(graph, prefix + "attn.qkv.weight")});
    CHECK(attention.row_op == reader_of(graph, prefix + "attn.proj.weight"));
    CHECK(as_set(weights_of(graph, attention)) == std::set<std::string>{prefix + "attn.qkv.weight:0:3",
                                                                        prefix + "attn.qkv.bias:0:3",
                                                                        prefix + "attn.proj.weight:1:1"});
    CHECK(attention.divisor == 4);  // 4 heads
    CHECK(kinds_of(graph, attention.attention_core) ==
          std::vector<std::string>{"aten::matmul", "aten::mul", "aten::masked_fill", "aten::softmax", "aten::matmul"});
    CHECK(mlp.column_ops == std::vector<ir::OpId>{reader_of(graph, prefix + "mlp.0.weight")});
    CHECK(kinds_of(graph, mlp.ops) == std::vector<std::string>{"aten::linear", "aten::gelu", "aten::linear"});
    CHECK(mlp.divisor == 512);
  }
  // The LM head is tied to the token embedding and makes the logits: both split the vocabulary.
  check_tied_vocabulary(graph, found, "tok_emb.weight");
  CHECK(found.regions.back().column_ops == std::vector<ir::OpId>{graph.value(graph.model_outputs().at(0)).producer});
  // Size queries of the input and constants the regions read are glue, outside every region.
  for (const auto& op : graph.ops())
    if (op.kind == "aten::size" || op.kind == "prim::Constant" || op.kind == "prim::ListConstruct")
      CHECK(found.region_of_op[static_cast<std::size_t>(op.id)] == -1);
}

TEST_CASE("tensor regions: a Llama-style decoder traced to TorchScript, repeat_kv reading its key/value heads",
          "[tensor_regions]") {
  auto model = load(RANNC_TENSOR_REGION_MODELS "/llama.trace.pt", {"tokens:2x64:int64"});
  const auto& graph = model.graph;
  auto found = find_tensor_regions(graph);
  const auto layers = layer_regions(found);
  REQUIRE(layers.size() == 8);
  for (int layer = 0; layer < 4; ++layer) {
    CAPTURE(layer);
    std::string prefix = "layers." + std::to_string(layer) + ".";
    const auto& attention = layers[static_cast<std::size_t>(2 * layer)];
    const auto& mlp = layers[static_cast<std::size_t>(2 * layer + 1)];
    CHECK(as_set(attention.column_ops) == std::set<ir::OpId>{reader_of(graph, prefix + "self_attn.q_proj.weight"),
                                                             reader_of(graph, prefix + "self_attn.k_proj.weight"),
                                                             reader_of(graph, prefix + "self_attn.v_proj.weight")});
    CHECK(attention.row_op == reader_of(graph, prefix + "self_attn.o_proj.weight"));
    // 4 query heads over 2 key/value heads: degrees 1 and 2.
    CHECK(attention.divisor == 2);
    CHECK_FALSE(attention.attention_core.empty());
    CHECK(as_set(mlp.column_ops) == std::set<ir::OpId>{reader_of(graph, prefix + "gate_proj.weight"),
                                                       reader_of(graph, prefix + "up_proj.weight")});
    CHECK(mlp.row_op == reader_of(graph, prefix + "down_proj.weight"));
  }
  // repeat_kv's size queries of the heads dim stay glue: the ranks' cut reads the whole model's.
  int size_queries = 0;
  for (const auto& op : graph.ops())
    if (op.kind == "aten::size") {
      ++size_queries;
      CHECK(found.region_of_op[static_cast<std::size_t>(op.id)] == -1);
    }
  CHECK(size_queries > 0);
}

TEST_CASE("tensor regions: nn.TransformerEncoderLayer keeps its MLP, not its attention (heads inside batch x heads)",
          "[tensor_regions]") {
  auto model = load(RANNC_TENSOR_REGION_MODELS "/encoder_layer.trace.pt", {"x:4x6x64"});
  const auto& graph = model.graph;
  auto found = find_tensor_regions(graph);
  REQUIRE(found.regions.size() == 1);
  const auto& mlp = found.regions[0];
  CHECK(mlp.column_ops == std::vector<ir::OpId>{reader_of(graph, "layer.linear1.weight")});
  CHECK(mlp.row_op == reader_of(graph, "layer.linear2.weight"));
  CHECK(kinds_of(graph, mlp.ops) ==
        std::vector<std::string>{"aten::linear", "aten::relu", "aten::dropout", "aten::linear"});
  CHECK(as_set(weights_of(graph, mlp)) ==
        std::set<std::string>{"layer.linear1.weight:0:1", "layer.linear1.bias:0:1", "layer.linear2.weight:1:1"});
  CHECK(mlp.divisor == 256);

  // MultiheadAttention views q, k and v as [seq, batch * heads, head_dim]: a device's heads would
  // not be one block of that dim.
  ir::OpId in_proj = reader_of(graph, "layer.self_attn.in_proj_weight");
  auto rejected = std::find_if(found.rejected.begin(), found.rejected.end(),
                               [&](const RejectedRegion& r) { return r.column_ops == std::vector<ir::OpId>{in_proj}; });
  REQUIRE(rejected != found.rejected.end());
  CHECK_THAT(rejected->reason, Catch::StartsWith("aten::view (op "));
  CHECK_THAT(rejected->reason, Catch::Contains("inner factor"));
  CHECK_THAT(rejected->reason, Catch::Contains("heads"));
  CHECK(found.region_of_op[static_cast<std::size_t>(in_proj)] == -1);
  CHECK(found.region_of_op[static_cast<std::size_t>(reader_of(graph, "layer.self_attn.out_proj.weight"))] == -1);
  CHECK(ops_in_regions(found) == 4);
}

TEST_CASE("tensor regions: a layer norm over the split dim between two linears rejects the pair", "[tensor_regions]") {
  auto graph = two_linears("aten::layer_norm");
  auto found = find_tensor_regions(graph);
  CHECK(found.regions.empty());
  REQUIRE(found.rejected.size() == 2);
  CHECK(found.rejected[0].column_ops == std::vector<ir::OpId>{0});
  CHECK(found.rejected[0].reason == "the split reaches aten::layer_norm (op 1), a normalisation over the split dim");
  // The second linear, a column op of its own, makes the model output.
  CHECK(found.rejected[1].column_ops == std::vector<ir::OpId>{2});
  CHECK(found.rejected[1].reason == "the split reaches the model output %y");
  CHECK(found.region_of_op == std::vector<int>{-1, -1, -1});
  // Without a region there is no tensor parallelism, so no sequence parallelism either.
  CHECK(found.sequence_ops.empty());

  // The same pair around GELU is one region; the second bias is added after the all-reduce.
  auto control = two_linears("aten::gelu");
  auto split = find_tensor_regions(control);
  REQUIRE(split.regions.size() == 1);
  CHECK(split.rejected.empty());
  CHECK(split.regions[0].ops == std::vector<ir::OpId>{0, 1, 2});
  CHECK(weights_of(control, split.regions[0]) == std::vector<std::string>{"w1:0:1", "b1:0:1", "w2:1:1"});
  CHECK(split.regions[0].divisor == 32);
  CHECK(split.regions[0].input == value_named(control, "x"));
  CHECK(split.regions[0].output == value_named(control, "y"));
  CHECK(split.region_of_op == std::vector<int>{0, 0, 0});
}

TEST_CASE("tensor regions: a shape taken from another tensor, or the split dim unflattened, rejects the pair",
          "[tensor_regions]") {
  // linear, then view_as(h, shaped) or unflatten(h, 2, [4, 8]) and flatten back, then linear: the
  // ranks' cuts would not make those sizes the rank's share.
  for (std::string middle : {"aten::view_as", "aten::unflatten"}) {
    CAPTURE(middle);
    ir::Graph graph;
    using ir::ValueRole;
    auto x = add_tensor(graph, "x", {4, 8, 16}, ValueRole::kModelInput);
    auto shaped = add_tensor(graph, "shaped", {4, 8, 32}, ValueRole::kModelInput);
    auto w1 = add_tensor(graph, "w1", {32, 16}, ValueRole::kParam);
    auto w2 = add_tensor(graph, "w2", {16, 32}, ValueRole::kParam);
    auto none = add_literal(graph, "none", {}, ir::ValueKind::kNone);
    auto h = add_tensor(graph, "h", {4, 8, 32});
    auto m = add_tensor(graph, "m", {4, 8, 32});
    graph.add_op("aten::linear", {x, w1, none}, {h});
    if (middle == "aten::view_as") {
      graph.add_op(middle, {h, shaped}, {m});
    } else {
      auto two = add_literal(graph, "two", std::int64_t{2}, ir::ValueKind::kInt);
      auto three = add_literal(graph, "three", std::int64_t{3}, ir::ValueKind::kInt);
      auto sizes = add_literal(graph, "sizes", std::vector<std::int64_t>{4, 8}, ir::ValueKind::kIntList);
      auto heads = add_tensor(graph, "heads", {4, 8, 4, 8});
      graph.add_op(middle, {h, two, sizes}, {heads});
      graph.add_op("aten::flatten", {heads, two, three}, {m});
    }
    auto y = add_tensor(graph, "y", {4, 8, 16});
    graph.add_op("aten::linear", {m, w2, none}, {y});
    graph.add_model_output(y);
    graph.validate();
    auto found = find_tensor_regions(graph);
    CHECK(found.regions.empty());
    REQUIRE_FALSE(found.rejected.empty());
    CHECK_THAT(found.rejected[0].reason, Catch::StartsWith(middle + " (op 1)"));
    CHECK_THAT(found.rejected[0].reason, Catch::Contains("a tensor rank's cut does not divide"));
  }
}

TEST_CASE("tensor regions: a SwiGLU MLP, its gate and up projections reading the same input", "[tensor_regions]") {
  ir::Graph graph;
  using ir::ValueRole;
  auto x = add_tensor(graph, "x", {2, 8, 16}, ValueRole::kModelInput);
  auto w_gate = add_tensor(graph, "w_gate", {48, 16}, ValueRole::kParam);
  auto w_up = add_tensor(graph, "w_up", {48, 16}, ValueRole::kParam);
  auto w_down = add_tensor(graph, "w_down", {16, 48}, ValueRole::kParam);
  auto gate = add_tensor(graph, "gate", {2, 8, 48}), act = add_tensor(graph, "act", {2, 8, 48});
  auto up = add_tensor(graph, "up", {2, 8, 48}), product = add_tensor(graph, "product", {2, 8, 48});
  auto y = add_tensor(graph, "y", {2, 8, 16}), out = add_tensor(graph, "out", {2, 8, 16});
  graph.add_op("aten::linear", {x, w_gate}, {gate});
  graph.add_op("aten::silu", {gate}, {act});
  graph.add_op("aten::linear", {x, w_up}, {up});
  graph.add_op("aten::mul", {act, up}, {product});
  graph.add_op("aten::linear", {product, w_down}, {y});
  graph.add_op("aten::add", {x, y}, {out});  // the residual, after the all-reduce
  graph.add_model_output(out);
  auto found = find_tensor_regions(graph);
  REQUIRE(found.regions.size() == 1);
  CHECK(found.rejected.empty());
  CHECK(found.regions[0].column_ops == std::vector<ir::OpId>{0, 2});
  CHECK(found.regions[0].row_op == 4);
  CHECK(weights_of(graph, found.regions[0]) == std::vector<std::string>{"w_gate:0:1", "w_up:0:1", "w_down:1:1"});
  CHECK(found.regions[0].divisor == 48);
  CHECK(found.region_of_op == std::vector<int>{0, 0, 0, 0, 0, -1});
}

TEST_CASE("tensor regions: the same graph gives the same regions", "[tensor_regions]") {
  auto first = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b-2layer.onnx");
  auto second = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b-2layer.onnx");
  auto found = find_tensor_regions(first.graph);
  CHECK(found.regions.size() == 6);  // two per layer, the vocabulary's embedding and head
  CHECK(text_of(found) == text_of(find_tensor_regions(first.graph)));
  CHECK(text_of(found) == text_of(find_tensor_regions(second.graph)));
  ir::Graph copy = first.graph;
  CHECK(text_of(found) == text_of(find_tensor_regions(copy)));
  // Weights ascending by id, regions by anchor, as the header promises.
  for (std::size_t i = 0; i < found.regions.size(); ++i) {
    const auto& weights = found.regions[i].weights;
    for (std::size_t w = 1; w < weights.size(); ++w) CHECK(weights[w - 1].weight < weights[w].weight);
    if (i > 0) CHECK(found.regions[i - 1].anchor() < found.regions[i].anchor());
  }
}

TEST_CASE("fused kernels: a Llama-3 layer keeps what Megatron-LM keeps, its keys and values at 8 heads",
          "[tensor_regions]") {
  auto model = load(RANNC_SHAPE_ONLY_DIR "/llama3-70b.onnx");
  const auto& graph = model.graph;
  auto regions = find_tensor_regions(graph);
  auto kernels = fused_kernels(graph, regions, plan::Fusion::kFused, plan::Fusion::kFused);
  auto precision = plan::Precision::kBf16Mixed;
  cost::CostModel unfused(graph, *cost::find_device_preset("h100-80g"), precision, nullptr);
  cost::CostModel fused = unfused;
  fused.fuse(graph, kernels);
  auto memory = cost::activation_memory(graph, fused.requires_grad(), precision, fused.fused_kernels());
  const auto layers = layer_regions(regions);
  REQUIRE(layers.size() == 160);
  // Layer 1: from the op after layer 0's down projection to layer 1's. At batch 1, sequence 8192,
  // hidden 8192 in bf16 (h = 134 MB): each RMS norm's input and output (the kernel computes its
  // statistics again from its input), Q, K and V at 8 of 64 heads (a fused kernel reads grouped
  // keys and values without repeating them), the attention's output and its fp32 log-sum-exp per
  // head and position, the SwiGLU's gate, up and product (3.5 h each): 16.75 h in all, as
  // Korthikanti et al. count a layer without dropout.
  double kept = 0;
  for (auto op = layers[1].row_op + 1; op <= layers[3].row_op; ++op) kept += memory.kept_bytes[static_cast<std::size_t>(op)];
  const double h = 8192.0 * 8192 * 2, lse = 64.0 * 8192 * 4;
  CHECK(kept == Approx(16.75 * h + lse).epsilon(1e-12));
  // The RMS norm, op by op (Pow, ReduceMean, Add, Sqrt, Div, Mul, Mul), is one kernel with the
  // residual add before it.
  const auto& attention = layers[2];
  const ir::ValueId norm_out = graph.op(attention.column_ops.front()).inputs[0];
  const auto norm_kernel = std::find_if(kernels.begin(), kernels.end(), [&](const cost::FusedKernel& k) {
    return std::binary_search(k.begin(), k.end(), graph.value(norm_out).producer);
  });
  REQUIRE(norm_kernel != kernels.end());
  CHECK(kinds_of(graph, *norm_kernel) == std::vector<std::string>{"onnx::Add", "onnx::Pow", "onnx::ReduceMean", "onnx::Add",
                                                                   "onnx::Sqrt", "onnx::Div", "onnx::Mul", "onnx::Mul"});
  // The attention kernel reads K and V as the rotary embedding and the value projection write
  // them: 8 heads of 128 at each position.
  for (auto operand : key_value_operands(graph, attention.attention_core)) {
    auto movement = movement_before(graph, operand);
    REQUIRE_FALSE(movement.ops.empty());
    CHECK(movement.source == graph.op(movement.ops.back()).inputs[0]);
    CHECK(graph.value(operand).type.numel() == 64 * 8192 * 128);
    CHECK(graph.value(movement.source).type.numel() == 8 * 8192 * 128);
  }
}

TEST_CASE("context parallelism: Llama-3 and GPT-3 split their sequences, passing keys and values before their repeat",
          "[tensor_regions][context]") {
  auto llama = load(RANNC_SHAPE_ONLY_DIR "/llama3-70b.onnx");
  auto split = find_context_split(llama.graph, find_tensor_regions(llama.graph));
  CHECK(split.allowed);
  CHECK(split.reason.empty());
  REQUIRE(split.exchanged.size() == 80);
  for (const auto& core : split.exchanged) {
    REQUIRE(core.values.size() == 2);
    for (auto value : core.values) CHECK(llama.graph.value(value).type.numel() == 8 * 8192 * 128);
  }
  CHECK(std::is_sorted(split.exchanged.begin(), split.exchanged.end(),
                       [](const ExchangedValues& a, const ExchangedValues& b) { return a.core_op < b.core_op; }));
  auto gpt3 = load(RANNC_SHAPE_ONLY_DIR "/gpt3-175b.onnx");
  auto gpt3_split = find_context_split(gpt3.graph, find_tensor_regions(gpt3.graph));
  CHECK(gpt3_split.allowed);
  CHECK(gpt3_split.exchanged.size() == 96);
  auto traced = load(RANNC_TENSOR_REGION_MODELS "/llama.trace.pt", {"tokens:2x64:int64"});
  auto traced_split = find_context_split(traced.graph, find_tensor_regions(traced.graph));
  CHECK(traced_split.allowed);
  CHECK(traced_split.exchanged.size() == 4);
}

TEST_CASE("context parallelism: a model without split attention, or working across positions, keeps its sequences",
          "[tensor_regions][context]") {
  // nn.TransformerEncoderLayer's attention is no region (heads inside batch x heads).
  auto encoder = load(RANNC_TENSOR_REGION_MODELS "/encoder_layer.trace.pt", {"x:4x6x64"});
  auto split = find_context_split(encoder.graph, find_tensor_regions(encoder.graph));
  CHECK_FALSE(split.allowed);
  CHECK(split.exchanged.empty());
  CHECK_THAT(split.reason, Catch::Contains("no attention layer"));
  // BERT's pooler takes each sequence's first token: only the device holding it could.
  auto bert = load(RANNC_SHAPE_ONLY_DIR "/bert-large.onnx");
  auto pooled = find_context_split(bert.graph, find_tensor_regions(bert.graph));
  CHECK_FALSE(pooled.allowed);
  CHECK_THAT(pooled.reason, Catch::StartsWith("onnx::Gather (op "));
  CHECK_THAT(pooled.reason, Catch::EndsWith("moves data across positions of the sequence"));
  // Two linears with a layer norm over the features between them: no attention either.
  auto graph = two_linears("aten::layer_norm");
  auto plain = find_context_split(graph, find_tensor_regions(graph));
  CHECK_FALSE(plain.allowed);
}
