#include "plan/options.h"

#include "support/named_choice.h"

namespace rannc::plan {

std::string_view optimizer_name(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kSgd: return "sgd";
    case Optimizer::kMomentum: return "momentum";
    case Optimizer::kAdam: return "adam";
  }
  return "adam";
}

Optimizer parse_optimizer(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "optimizer", {Optimizer::kSgd, Optimizer::kMomentum, Optimizer::kAdam},
                            optimizer_name);
}

std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16Mixed: return "bf16-mixed";
    case Precision::kFp16Mixed: return "fp16-mixed";
  }
  return "fp32";
}

Precision parse_precision(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "precision", {Precision::kFp32, Precision::kBf16Mixed, Precision::kFp16Mixed},
                            precision_name);
}

std::string_view state_sharding_name(StateSharding sharding) {
  switch (sharding) {
    case StateSharding::kNone: return "none";
    case StateSharding::kOptimizer: return "optimizer";
  }
  return "none";
}

StateSharding parse_state_sharding(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "state sharding", {StateSharding::kNone, StateSharding::kOptimizer},
                            state_sharding_name);
}

std::string_view recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "none";
}

Recompute parse_recompute(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "recompute", {Recompute::kNone, Recompute::kSelective, Recompute::kFull},
                            recompute_name);
}

std::string_view fusion_name(Fusion fusion) {
  switch (fusion) {
    case Fusion::kUnfused: return "unfused";
    case Fusion::kFused: return "fused";
  }
  return "unfused";
}

Fusion parse_fusion(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "kernel fusion", {Fusion::kUnfused, Fusion::kFused}, fusion_name);
}

std::string fused_kernels_label(Fusion attention, Fusion elementwise) {
  return std::string(attention == Fusion::kFused ? ", fused attention" : "") +
         (elementwise == Fusion::kFused ? ", fused elementwise" : "");
}

std::string_view region_kind_name(RegionKind kind) {
  switch (kind) {
    case RegionKind::kLayer: return "layer";
    case RegionKind::kVocabularyEmbedding: return "vocabulary_embedding";
    case RegionKind::kVocabularyHead: return "vocabulary_head";
  }
  return "layer";
}

RegionKind parse_region_kind(std::string_view name, std::string_view what) {
  return parse_named_choice(name, what, "region kind",
                            {RegionKind::kLayer, RegionKind::kVocabularyEmbedding, RegionKind::kVocabularyHead},
                            region_kind_name);
}

}  // namespace rannc::plan
