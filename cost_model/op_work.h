// The work an op does: floating-point operations and bytes moved, from its kind and shapes.
//
// This is the analytic half of the cost model. Each op kind, TorchScript (aten::) or ONNX
// (onnx::), maps to a class with a FLOP formula; the roofline turns work into time per device.
#pragma once

#include <cstdint>
#include <string_view>

#include "ir/graph.h"

namespace rannc::cost {

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

// The class of an op kind; Gather is an embedding when it reads a float weight.
OpClass classify(const ir::Graph& graph, const ir::Op& op);

struct OpWork {
  OpClass op_class = OpClass::kUnknown;
  double flops_fwd = 0;  // floating-point operations of the forward pass (a multiply-add is 2)
  double bytes_fwd = 0;  // bytes of tensors read and written by the forward pass
};

OpWork op_work(const ir::Graph& graph, const ir::Op& op);

}  // namespace rannc::cost
