// The training options a plan is made for: the optimizer (how much state each weight carries)
// and the numeric precision. The schedule has its own module (plan/schedule.h). Names are the
// spellings of the CLI and of plan.json.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rannc::plan {

enum class Optimizer : std::uint8_t { kSgd, kMomentum, kAdam };
std::string_view optimizer_name(Optimizer optimizer);
// Throws InputError "WHAT NAME: unknown optimizer (known: sgd, momentum, adam)".
Optimizer parse_optimizer(std::string_view name, std::string_view what);

// Mixed precision: 16-bit weights and activations beside fp32 master weights.
enum class Precision : std::uint8_t { kFp32, kBf16Mixed, kFp16Mixed };
std::string_view precision_name(Precision precision);
Precision parse_precision(std::string_view name, std::string_view what);

// How a stage's data-parallel replicas hold the training state. kOptimizer splits the optimizer
// state and the fp32 master weights among them (ZeRO stage 1, Megatron's distributed optimizer):
// gradients are reduce-scattered, each replica steps its shard, and the updated weights are
// all-gathered, instead of every replica allreducing and stepping everything.
enum class StateSharding : std::uint8_t { kNone, kOptimizer };
// The gradient bytes of each bucket sharded state is reduce-scattered and all-gathered in (PyTorch
// DDP's default bucket): what rannc-run uses unless --bucket-kib says otherwise, and what the
// memory model assumes.
inline constexpr std::int64_t kGradientBucketBytes = std::int64_t{25} << 20;
std::string_view state_sharding_name(StateSharding sharding);
StateSharding parse_state_sharding(std::string_view name, std::string_view what);

// What a stage runs again in backward instead of keeping from forward. kSelective recomputes
// only the attention cores (scores, masking, softmax, dropout: Korthikanti et al., 2022), whose
// activations grow with the square of the sequence, and keeps the rest; kFull runs the stage's
// whole forward again and keeps only its inputs. Names: "none", "selective", "full".
enum class Recompute : std::uint8_t { kNone, kSelective, kFull };
std::string_view recompute_name(Recompute recompute);
Recompute parse_recompute(std::string_view name, std::string_view what);

// How the training stack the plan is for runs a kind of ops (cost_model/op_work.h's FusedKernel):
// kUnfused, op by op, as the model's graph and rannc-run's stage files run them, every tensor
// written to memory and kept where backward needs it; kFused, as one kernel that keeps what its
// ops pass each other on chip and computes it again in backward. Two kinds are chosen apart:
// attention cores (FlashAttention, cuDNN's fused attention in Megatron-LM and NeMo: a log-sum-exp
// per query row kept instead of the scores) and connected elementwise ops (Megatron-LM's fused
// bias-GELU, SwiGLU and bias-dropout-add, torch.compile's pointwise fusion). rannc-run runs
// kUnfused only. Names: "unfused", "fused".
enum class Fusion : std::uint8_t { kUnfused, kFused };
std::string_view fusion_name(Fusion fusion);
// Throws InputError "WHAT NAME: unknown kernel fusion (known: unfused, fused)".
Fusion parse_fusion(std::string_view name, std::string_view what);
// What reports append to a stack's options: ", fused attention, fused elementwise", or less.
std::string fused_kernels_label(Fusion attention, Fusion elementwise);

// What a tensor-parallel region splits: a layer's matrix products, a vocabulary's embedding
// table, or the output layer by vocabulary. Names: "layer", "vocabulary_embedding",
// "vocabulary_head".
enum class RegionKind : std::uint8_t { kLayer, kVocabularyEmbedding, kVocabularyHead };
std::string_view region_kind_name(RegionKind kind);
RegionKind parse_region_kind(std::string_view name, std::string_view what);

}  // namespace rannc::plan
