// Why a plan won: --explain lists the simulated layouts that lost (step, bubble, memory, and how
// much slower) and what ruled out the others; --layout's report compares the layout asked for
// with the plan the free search finds.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "partitioner/planner.h"

namespace rannc {

// "pp=8 dp=8 m=16 b=12": stages, pipeline replicas, microbatches and microbatch size, the way
// Megatron-LM and DeepSpeed users write a layout. Stages with R replicas each within a pipeline
// read "dp=4x8"; unequal replicas add "(replicas 1*4,4)", runs of three or more written once.
std::string layout_name(const partition::PlacedPipeline& pipeline);

nlohmann::json explain_json(const partition::PlanResult& result, std::int64_t mem_bytes);
std::string explain_text(const partition::PlanResult& result, std::int64_t mem_bytes);

// `forced` is the plan of the layout asked for (--layout), `free` the search's own.
nlohmann::json layout_comparison_json(const std::string& asked, const partition::PlacedPipeline& forced,
                                      const partition::PlacedPipeline& free);
std::string layout_comparison_text(const std::string& asked, const partition::PlacedPipeline& forced,
                                   const partition::PlacedPipeline& free);

}  // namespace rannc
