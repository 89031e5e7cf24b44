// The training loss: which model output it is taken of and how (docs/contract.md: a scalar output is
// the loss; otherwise --loss cross_entropy or mse against target.npy). Each microbatch slice
// adds its share, summed and divided by the elements of the whole global batch, so the step's
// loss and gradients are those of one process taking the mean over the global batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "plan/plan_json.h"
#include "runtime/rank_layout.h"
#include "runtime/stage_runner.h"
#include "runtime/training_data.h"

namespace rannc::runtime {

struct LossPlan {
  int stage = 0, output = 0;  // the model output the loss is taken of
  std::string kind;           // "scalar", "cross_entropy" or "mse"
  std::optional<SampleSpec> target;
  std::int64_t elements_per_sample = 1;  // loss terms per sample (cross_entropy: one per class vector)
  // The output is a vocabulary head's logits split over a tensor-parallel group
  // (plan::RegionKind::kVocabularyHead): each rank holds its slice of the classes, and the cross
  // entropy is taken in parallel (torch_side/tensor_parallel_ops.h).
  bool split_classes = false;
};

// Throws InputError when the loss option does not fit the model's output.
LossPlan plan_loss(const plan::Plan& plan, const std::string& loss_option);

// The loss of a microbatch slice on the rank at `placement` (whose stage is loss.stage), as its
// share of the mean over the `accumulate_steps` global batches of an optimizer step.
LossFunction loss_function(const LossPlan& loss, const plan::Plan& plan, const RankLayout& layout,
                           Placement placement, const TrainingData& data, int accumulate_steps);

}  // namespace rannc::runtime
