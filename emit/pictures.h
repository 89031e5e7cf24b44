// Pictures of a plan for people: schedule.svg, the simulated training step as a timeline with
// one row per rank (one per stage once the ranks are many), and stages.dot, the stage graph for Graphviz. Both are deterministic text
// (the same plan gives the same bytes) and are written beside plan.json.
#pragma once

#include <string>

#include "plan/plan.h"
#include "partitioner/planner.h"

namespace rannc::emit {

// "gpt.onnx: 5 stages x 1 pipeline, 8 microbatches of 8, 1f1b, step 2.382 ms", heading both.
std::string plan_title(const plan::Plan& plan);

// The step as the simulator modelled it: per rank (in rank order) its stage's forwards,
// backwards, transfers received and gradient allreduce, on a time axis in ms. Each row is
// `<g class="rank" data-rank="R" data-stage="S">`; each stage's timeline is drawn once and
// shown on its ranks' rows. Above 16 ranks, replicas and pipelines fold: one row per stage,
// `<g class="stage" data-stage="S" data-ranks="N" data-replicas="R" data-pipelines="P">`,
// labelled with those counts (R replicas per pipeline). Above 2000 tasks, each stage's boxes
// of one kind are one `<path class="tasks" data-kind="K">`, boxes that overlap joined, so the
// file stays small at any size. `title` heads the picture.
std::string schedule_svg(const partition::PlacedPipeline& plan, const std::string& title);

// One node per stage (id, op range, replicas, predicted times and memory), one per model input
// and output, and edges for the tensors passed, labelled with their names and bytes per
// microbatch.
std::string stages_dot(const plan::Plan& plan);

}  // namespace rannc::emit
