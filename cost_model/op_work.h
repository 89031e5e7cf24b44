// The work an op does: floating-point operations and bytes moved, from its kind and shapes.
//
// This is the analytic half of the cost model. Each op kind, TorchScript (aten::) or ONNX
// (onnx::), maps to a class with a FLOP formula (its row in ir/op_kinds.def); the roofline turns
// work into time per device.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/op_kinds.h"

namespace rannc::cost {

// The classes and their names live with the op kinds' table (ir/op_kinds.h).
using OpClass = ir::OpClass;
using ir::op_class_name;

// The class of an op kind; Gather is an embedding when it reads a float weight.
OpClass classify(const ir::Graph& graph, const ir::Op& op);

struct OpWork {
  OpClass op_class = OpClass::kUnknown;
  double flops_fwd = 0;  // floating-point operations of the forward pass (a multiply-add is 2)
  double bytes_fwd = 0;  // bytes of tensors read and written by the forward pass
  double flops_bwd = 0;  // the same for the backward pass: gradients of the inputs that need one
  double bytes_bwd = 0;
};

// Forward work only.
OpWork op_work(const ir::Graph& graph, const ir::Op& op);

// Kinds of the graph without a formula (OpClass::kUnknown), sorted: they get a memory-bound
// estimate, and the commands warn about them.
std::vector<std::string> uncosted_kinds(const ir::Graph& graph);

// Forward and backward work; `requires_grad` is ir::values_requiring_grad(graph). A matrix
// product computes one gradient product per operand that requires grad (2x forward for a
// hidden layer, 1x for the first layer, whose input is data); memory-bound ops read the output
// gradient and write the input gradients.
OpWork op_work(const ir::Graph& graph, const ir::Op& op, const std::vector<bool>& requires_grad);

// The training loss rannc-run adds after the model (runtime/loss.cpp), which is no op of the
// graph: a cross entropy over the last dim of the model's first output (an MSE for a vector).
// loss_input is that output, or ir::kNoId when rannc-run computes no loss of its own (the output
// is a scalar loss already, needs no gradient, or its shape is unknown).
ir::ValueId loss_input(const ir::Graph& graph, const std::vector<bool>& requires_grad);
// In fp32, as rannc-run computes it: log-softmax reads the logits and writes the
// log-probabilities; backward writes the loss's gradient (zero but at the targets), then reads
// it with the log-probabilities and writes the logits' gradient.
OpWork loss_work(const ir::Value& input);

// Ops a training stack runs as one kernel, ascending op ids (plan::Fusion):
// - an attention kernel (FlashAttention): an attention core, from the product of the queries
//   with the keys through the scaling, masking, softmax and dropout of the scores to the product
//   with the values, or one fused attention op (aten::scaled_dot_product_attention);
// - an elementwise kernel (Megatron-LM's fused bias-GELU, SwiGLU and bias-dropout-add,
//   Transformer Engine's RMS and layer norms, torch.compile's pointwise fusion): connected
//   elementwise ops and the means over each row's last dim between them (a norm written op by op).
// What the ops inside a kernel pass each other stays on chip: it is neither written to device
// memory nor kept for backward, which computes it again from the tensors at the kernel's
// boundary it is made of.
using FusedKernel = std::vector<ir::OpId>;
// Whether a kernel is an attention kernel: it holds a matrix product.
bool is_attention_kernel(const ir::Graph& graph, const FusedKernel& kernel);
// [value]: whether it lives only inside one of the kernels (produced and read there, no model
// output).
std::vector<bool> kernel_internal_values(const ir::Graph& graph, const std::vector<FusedKernel>& kernels);
// The elementwise kernels of a graph: its elementwise ops outside the kernels `taken`, joined
// along the values they pass where no other op lies on a path between them (two or more ops, no
// path leaving a kernel and coming back). Ascending by first op.
std::vector<FusedKernel> elementwise_kernels(const ir::Graph& graph, const std::vector<FusedKernel>& taken);
// The work of each op of a kernel (`works`, indexed by op id), from its work run alone. The same
// arithmetic, and backward first computes again what it needs of the kernel's inside. Memory
// traffic: an attention kernel moves none beside its arithmetic (its Q, K, V and output are a
// small fraction of its FLOPs at long sequences); an elementwise kernel reads its inputs and
// writes its outputs once (each charged to the op of the kernel that reads or writes it first),
// and backward twice that. A fused attention
// op's backward is FlashAttention's five products to the forward's two: 2.5x its forward.
void fuse_kernel_work(const ir::Graph& graph, const std::vector<bool>& internal, const FusedKernel& kernel,
                      std::vector<OpWork>& works);
// What an attention kernel keeps for backward beside its inputs and output: each query row's
// log-sum-exp of the scores, in fp32. 0 for an elementwise kernel.
double kernel_saved_bytes(const ir::Graph& graph, const std::vector<bool>& internal, const FusedKernel& kernel);

// An op whose outputs alias its first input's storage (view, transpose, slice, ...): it moves
// no bytes forward, and what it outputs is kept alive by whoever keeps its input.
bool is_view(const ir::Op& op);

// What autograd keeps of an op for its backward pass, beyond what the memory model counts
// per op (dropout masks, pooling indices: see the profile DB's retained bytes).
enum class SavedForBackward : std::uint8_t {
  kInputs,   // the tensor inputs (matmul, conv, norm, mul, unknown kinds: the safe default)
  kOutput,   // only the output (relu, sigmoid, tanh, softmax, exp)
  kNothing,  // nothing batch-sized (add, sub, views, concatenation, sum, mean)
};
SavedForBackward saved_for_backward(const ir::Graph& graph, const ir::Op& op);
// Whether a mean over dims keeps its input for backward in the libtorch this build's rannc-run
// runs: 1.x's MeanBackward1 saves it (to count its elements), 2.x only its sizes. An RMSNorm's
// mean of squares keeps a whole activation so on 1.13.
bool mean_over_dims_keeps_input();

// Bytes autograd saves that are not tensors of the graph: dropout masks, max-pooling indices.
// (masked_fill's and where's conditions are tensors of the graph: the memory model keeps them.)
double extra_saved_bytes(const ir::Graph& graph, const ir::Op& op);

}  // namespace rannc::cost
