// The op kinds' table (ir/op_kinds.def): one row per kind, and the traits the passes' own string
// sets held before it, for representative kinds of each.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "cost_model/op_work.h"
#include "ir/op_kinds.h"

using namespace rannc;
using namespace rannc::ir;
using namespace rannc::ir::op_trait;

namespace {

bool has(const char* kind, OpTraits trait) { return has_op_trait(kind, trait); }

}  // namespace

TEST_CASE("op kinds: every kind has one row, and in-place rows do not shadow a functional kind", "[op_kinds]") {
  std::set<std::string_view> names;
  for (const auto& row : op_kinds()) {
    INFO(row.name);
    CHECK(names.insert(row.name).second);
    CHECK(!row.name.empty());
    CHECK(row.flops_per_element >= 0);
    CHECK(find_op_kind(row.name) == &row);
    // A row named like an in-place form (aten::__getitem__) would hide its functional kind's row,
    // and the cost traits that in-place forms take from it.
    auto functional = functional_kind(row.name);
    if (functional != row.name) {
      CHECK(find_op_kind(functional) == nullptr);
      CHECK((row.traits & kOfFunctionalKind) == 0);
    }
  }
  CHECK(names.size() > 250);
  for (const auto& family : op_kind_families()) {
    CHECK(!family.text.empty());
    CHECK(family.traits != kNoTraits);
  }
}

TEST_CASE("op kinds: classes and FLOPs per element, in-place forms as their functional kinds", "[op_kinds]") {
  CHECK(op_class_of("aten::linear") == OpClass::kMatMul);
  CHECK(op_class_of("onnx::Attention") == OpClass::kMatMul);
  CHECK(op_class_of("onnx::ConvTranspose") == OpClass::kConv);
  CHECK(op_class_of("aten::embedding_bag") == OpClass::kEmbedding);
  CHECK(op_class_of("onnx::RMSNormalization") == OpClass::kNorm);
  CHECK(flops_per_element("aten::layer_norm") == 5);
  CHECK(flops_per_element("onnx::LogSoftmax") == 5);
  CHECK(flops_per_element("aten::add") == 1);
  CHECK(flops_per_element("aten::sigmoid") == 4);
  CHECK(flops_per_element("onnx::Gelu") == 8);
  CHECK(flops_per_element("onnx::RotaryEmbedding") == 3);
  CHECK(flops_per_element("onnx::Resize") == 4);
  CHECK(op_class_of("onnx::ReduceSumSquare") == OpClass::kReduction);
  CHECK(op_class_of("aten::adaptive_avg_pool2d") == OpClass::kPool);
  CHECK(op_class_of("onnx::ScatterElements") == OpClass::kDataMovement);
  CHECK(op_class_of("prim::Constant") == OpClass::kGlue);
  CHECK(op_class_of("aten::__getitem__") == OpClass::kGlue);
  CHECK(op_class_of("onnx::Shape") == OpClass::kGlue);
  // In-place variants cost what their functional forms cost; only aten kinds have them.
  CHECK(op_class_of("aten::relu_") == OpClass::kElementwise);
  CHECK(flops_per_element("aten::gelu_") == 8);
  CHECK(op_class_of("onnx::Relu_") == OpClass::kUnknown);
  // Rows without a cost formula, and kinds without a row.
  CHECK(op_class_of("aten::alias") == OpClass::kUnknown);
  CHECK(op_class_of("aten::no_such_op") == OpClass::kUnknown);
  CHECK(find_op_kind("aten::no_such_op") == nullptr);
  // cost:: keeps its names for the classes.
  CHECK(cost::op_class_name(cost::OpClass::kDataMovement) == "data_movement");
  CHECK(cost::op_class_name(OpClass::kUnknown) == "unknown");
}

TEST_CASE("op kinds: the traits of the cost model's sets", "[op_kinds]") {
  // Views (op_work's view_kinds): reshape copies when its input is not contiguous.
  for (const char* kind : {"aten::view", "aten::alias", "aten::detach", "aten::unbind", "onnx::Transpose",
                           "onnx::Identity", "aten::transpose_", "aten::unsqueeze_"})
    CHECK(has(kind, kView));
  for (const char* kind : {"aten::reshape", "onnx::Reshape", "aten::flatten", "aten::clone", "onnx::Slice", "aten::size"})
    CHECK_FALSE(has(kind, kView));
  // Slicing views (is_slicing_view).
  for (const char* kind : {"aten::slice", "aten::select", "aten::expand_as", "aten::split_with_sizes", "aten::narrow"})
    CHECK(has(kind, kSlicingView));
  for (const char* kind : {"aten::view", "aten::transpose", "onnx::Squeeze"}) CHECK_FALSE(has(kind, kSlicingView));
  // What backward keeps (saves_output_kinds, saves_nothing_kinds, mul and div by a scalar).
  for (const char* kind : {"aten::relu", "aten::rsqrt", "aten::_log_softmax", "onnx::Sqrt", "aten::relu_"})
    CHECK(has(kind, kSavesOutput));
  for (const char* kind : {"aten::gelu", "aten::silu", "onnx::Log", "aten::add"}) CHECK_FALSE(has(kind, kSavesOutput));
  for (const char* kind : {"aten::add", "aten::masked_fill", "aten::zeros_like", "aten::adaptive_avg_pool3d",
                           "onnx::ConstantOfShape", "onnx::Sum", "aten::add_"})
    CHECK(has(kind, kSavesNothing));
  for (const char* kind : {"aten::mul", "onnx::Mul", "aten::max_pool2d", "onnx::MaxPool", "aten::view"})
    CHECK_FALSE(has(kind, kSavesNothing));
  CHECK(has("aten::mul", kSavesForOtherOperand));
  CHECK(has("aten::div_", kSavesForOtherOperand));
  CHECK(has("onnx::Div", kSavesForOtherOperand));
  // Extra saved bytes: masks, conditions, pooling indices, normalised groups.
  for (const char* kind : {"aten::dropout", "aten::feature_alpha_dropout", "onnx::Dropout"}) CHECK(has(kind, kDropout));
  for (const char* kind : {"aten::where", "aten::masked_fill_", "onnx::Where"}) CHECK(has(kind, kSavesCondition));
  for (const char* kind : {"aten::max_pool2d", "aten::max_pool1d_with_indices", "onnx::MaxPool"})
    CHECK(has(kind, kSavesPoolIndices));
  CHECK_FALSE(has("onnx::GlobalMaxPool", kSavesPoolIndices));
  for (const char* kind : {"aten::layer_norm", "aten::native_layer_norm", "aten::rms_norm", "onnx::LayerNormalization",
                           "onnx::RMSNormalization"})
    CHECK(has(kind, kNormalisesLastDims));
  for (const char* kind : {"aten::group_norm", "onnx::BatchNormalization"}) CHECK_FALSE(has(kind, kNormalisesLastDims));
  // Formulas of their own.
  for (const char* kind : {"onnx::LSTM", "onnx::GRU", "onnx::RNN"}) CHECK(has(kind, kRecurrence));
  CHECK(has("aten::scaled_dot_product_attention", kFusedAttention));
  CHECK(has("onnx::Attention", kFusedAttention));
  for (const char* kind : {"onnx::ConvTranspose", "aten::conv_transpose2d"}) CHECK(has(kind, kTransposedConv));
  CHECK_FALSE(has("aten::_convolution", kTransposedConv));  // by its transposed argument
  CHECK(has("aten::embedding_bag", kSumsBags));
  CHECK_FALSE(has("aten::embedding", kSumsBags));
  CHECK(has("onnx::Gather", kLookupWhenWeight));
  for (const char* kind : {"prim::ListUnpack", "prim::TupleUnpack"}) CHECK(has(kind, kUnpacksList));
  CHECK(has("prim::ListConstruct", kPacksList));
  CHECK_FALSE(has("prim::TupleConstruct", kPacksList));
}

TEST_CASE("op kinds: the traits of the IR, emit and frontend sets, matched as written", "[op_kinds]") {
  // ir/batch_dims: reads only metadata. Random constructors are not among them.
  for (const char* kind : {"aten::size", "aten::sym_size", "prim::layout", "aten::new_full", "aten::empty_like",
                           "onnx::Shape", "Shape", "Size"})
    CHECK(has(kind, kReadsOnlyMetadata));
  for (const char* kind : {"aten::rand_like", "aten::randn_like", "aten::zeros_like_", "aten::view", "prim::Constant"})
    CHECK_FALSE(has(kind, kReadsOnlyMetadata));
  // ir/requires_grad: outputs that never carry a gradient. In-place forms are not matched.
  for (const char* kind : {"aten::detach", "aten::rand_like", "aten::empty_like", "onnx::Size"})
    CHECK(has(kind, kNoGradOutput));
  for (const char* kind : {"aten::detach_", "aten::full_like", "aten::size", "aten::new_zeros"})
    CHECK_FALSE(has(kind, kNoGradOutput));
  // emit/index_bound: lookups and the ops that pass indices through.
  for (const char* kind : {"aten::embedding", "aten::embedding_bag", "aten::_embedding_bag", "onnx::Gather"})
    CHECK(has(kind, kEmbeddingLookup));
  CHECK_FALSE(has("onnx::GatherElements", kEmbeddingLookup));
  for (const char* kind : {"aten::view", "aten::to", "aten::t", "onnx::Cast", "onnx::Identity", "onnx::Slice"})
    CHECK(has(kind, kIndexPreserving));
  for (const char* kind : {"aten::expand", "aten::t_", "onnx::CastLike", "aten::index_select"})
    CHECK_FALSE(has(kind, kIndexPreserving));
  // The TorchScript frontend and verify: random ops and batch statistics.
  for (const char* kind : {"aten::rand", "aten::randn", "aten::randint", "aten::randperm", "aten::rand_like",
                           "aten::bernoulli", "aten::bernoulli_", "aten::normal", "aten::multinomial"})
    CHECK(has(kind, kRandom));
  for (const char* kind : {"aten::normal_", "aten::dropout", "aten::zeros", "onnx::RandomNormal"})
    CHECK_FALSE(has(kind, kRandom));
  for (const char* kind : {"aten::batch_norm", "aten::native_batch_norm", "aten::cudnn_batch_norm"})
    CHECK(has(kind, kBatchStatistics));
  for (const char* kind : {"aten::layer_norm", "onnx::BatchNormalization"}) CHECK_FALSE(has(kind, kBatchStatistics));
  // op_traits gives the union has_op_trait asks about.
  CHECK(op_traits("aten::zeros_like") == (kSavesNothing | kReadsOnlyMetadata | kNoGradOutput));
  CHECK(op_traits("aten::slice_") == (kView | kSlicingView));
  CHECK(op_traits("aten::native_dropout") == (kSavesNothing | kDropout));
  CHECK(op_traits("aten::no_such_op") == kNoTraits);
}
