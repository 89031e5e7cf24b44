// Every op kind the passes know, from every frontend, in one table: ir/op_kinds.def.
//
// A row gives a kind ("aten::linear", "onnx::Gemm", "prim::Constant") its cost class, its FLOPs
// per output element (elementwise, norm and softmax classes) and its traits: the facts passes
// ask about (a view, a shape query, an op whose outputs need no gradient, a random op). The
// passes ask here instead of keeping string sets of their own, so a frontend that brings new
// kinds adds rows to op_kinds.def and edits no pass. Besides the rows, a few families give a
// trait to every kind that starts with or contains a text ("aten::rand", "batch_norm").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rannc::ir {

// The class of an op for the cost model: which formula counts its work, which roofline
// efficiency applies (cost_model/op_work.h, roofline.h).
enum class OpClass : std::uint8_t {
  kMatMul,        // linear, matmul, bmm, addmm, Gemm, MatMul
  kConv,          // convolutions, transposed too
  kEmbedding,     // table lookups: embedding, embedding_bag, Gather of a weight
  kNorm,          // batch, layer, group and instance norm
  kSoftmax,       // softmax and log-softmax
  kElementwise,   // activations, arithmetic, dropout, masking
  kReduction,     // sum, mean, max over dims
  kPool,          // max and average pooling
  kDataMovement,  // view, reshape, transpose, cat, slice, index: no FLOPs, moves bytes
  kGlue,          // non-tensor bookkeeping: constants, sizes, list and tuple packing
  kUnknown,       // a kind without a formula: costed as memory-bound, and reported
};

std::string_view op_class_name(OpClass op_class);

using OpTraits = std::uint32_t;

namespace op_trait {
inline constexpr OpTraits kNoTraits = 0;
// What autograd and the allocator see (cost_model/op_work, memory). An in-place form
// (aten::relu_) has these of its functional kind.
inline constexpr OpTraits kView = 1u << 0;                // outputs alias the first input's storage
inline constexpr OpTraits kSlicingView = 1u << 1;         // a view whose backward fills an input-sized gradient
inline constexpr OpTraits kSavesOutput = 1u << 2;         // backward needs only the output (relu, sigmoid, softmax)
inline constexpr OpTraits kSavesNothing = 1u << 3;        // backward needs nothing batch-sized (add, cat, sum, casts)
// A product or quotient: keeps each operand only for the other's gradient, so x * 2 and x / c
// (c a scalar or a tensor without gradient) keep nothing batch-sized.
inline constexpr OpTraits kSavesForOtherOperand = 1u << 4;
inline constexpr OpTraits kSavesCondition = 1u << 5;      // keeps its bool condition for backward (where, masked_fill)
inline constexpr OpTraits kDropout = 1u << 6;             // dropout: random in training unless p = 0, keeps its mask
inline constexpr OpTraits kSavesPoolIndices = 1u << 7;    // max pooling: keeps int64 indices for backward
inline constexpr OpTraits kNormalisesLastDims = 1u << 8;  // layer and RMS norm: one group per row of the last dims
// Matched on the kind as written (aten::detach_ is not aten::detach here), as their passes
// always matched them.
inline constexpr OpTraits kRecurrence = 1u << 9;         // ONNX LSTM, GRU, RNN: X, W, R inputs
inline constexpr OpTraits kFusedAttention = 1u << 10;    // softmax(Q K^T) V in one op: Q, K, V inputs
inline constexpr OpTraits kTransposedConv = 1u << 11;    // a transposed convolution by its kind alone
inline constexpr OpTraits kSumsBags = 1u << 12;          // an embedding bag: sums its looked-up rows
inline constexpr OpTraits kLookupWhenWeight = 1u << 13;  // an embedding when input 0 is a floating weight (Gather)
inline constexpr OpTraits kEmbeddingLookup = 1u << 14;   // input 0 a table, input 1 row indices (emit/index_bound)
inline constexpr OpTraits kIndexPreserving = 1u << 15;   // input 0's integer values pass through unchanged
inline constexpr OpTraits kReadsOnlyMetadata = 1u << 16;  // reads sizes, rank, dtype or device, never contents
inline constexpr OpTraits kNoGradOutput = 1u << 17;       // floating outputs never carry a gradient
inline constexpr OpTraits kUnpacksList = 1u << 18;        // outputs are the elements of its list or tuple input
inline constexpr OpTraits kPacksList = 1u << 19;          // its output is a list of its inputs
inline constexpr OpTraits kRandom = 1u << 20;             // draws random numbers on every run
inline constexpr OpTraits kBatchStatistics = 1u << 21;    // mixes the samples of a batch (batch norm)

// The traits an in-place form (aten::relu_) takes from its functional kind (aten::relu).
inline constexpr OpTraits kOfFunctionalKind = kView | kSlicingView | kSavesOutput | kSavesNothing |
                                              kSavesForOtherOperand | kSavesCondition | kDropout | kSavesPoolIndices |
                                              kNormalisesLastDims;
}  // namespace op_trait

// One row of op_kinds.def.
struct OpKind {
  std::string_view name;
  OpClass op_class = OpClass::kUnknown;
  double flops_per_element = 0;  // for the elementwise, norm and softmax classes
  OpTraits traits = op_trait::kNoTraits;
};

// A trait given to every kind that starts with (kPrefix) or contains (kContaining) a text.
struct OpKindFamily {
  enum class Match : std::uint8_t { kPrefix, kContaining };
  Match match;
  std::string_view text;
  OpTraits traits;
};

// The rows and families of op_kinds.def, in its order.
const std::vector<OpKind>& op_kinds();
const std::vector<OpKindFamily>& op_kind_families();

// The functional form of an in-place aten kind (aten::relu_ -> aten::relu); other kinds as they are.
std::string_view functional_kind(std::string_view kind);

// The row of a kind: its own, else that of its functional kind (in-place variants cost what
// their functional forms cost); nullptr when the table has neither.
const OpKind* find_op_kind(std::string_view kind);

// OpClass::kUnknown and 0 for a kind without a row.
OpClass op_class_of(std::string_view kind);
double flops_per_element(std::string_view kind);

// The traits of a kind: its row's (an in-place form without a row of its own: the
// op_trait::kOfFunctionalKind ones of its functional kind's row), with those of the families
// that match it.
OpTraits op_traits(std::string_view kind);

// Whether the kind has any of `traits`.
bool has_op_trait(std::string_view kind, OpTraits traits);

}  // namespace rannc::ir
