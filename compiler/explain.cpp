#include "compiler/explain.h"

#include <algorithm>
#include <cstdio>

#include "support/format.h"
#include "support/stable_number.h"

namespace rannc {
namespace {

using partition::PlacedPipeline;

// How much longer `step` is than the plan's, as "+2.4%".
std::string slower_text(double step_ms, double best_ms) {
  char text[64];
  std::snprintf(text, sizeof text, "%+.1f%%", best_ms > 0 ? 100 * (step_ms / best_ms - 1) : 0.0);
  return text;
}

std::string percent(double fraction) {
  char text[32];
  std::snprintf(text, sizeof text, "%.0f%%", 100 * fraction);
  return text;
}

nlohmann::json layout_json(const PlacedPipeline& p, double best_ms) {
  return {{"layout", layout_name(p)},
          {"stages", p.stages.size()},
          {"pipelines", p.config.pipelines},
          {"microbatches", p.config.microbatches},
          {"microbatch_size", p.config.microbatch_size},
          {"iteration_ms", stable_number(p.predicted.iteration_ms)},
          {"bubble_fraction", stable_number(p.predicted.bubble_fraction)},
          {"peak_mem_bytes", stable_number(p.predicted.peak_mem_bytes)},
          {"slower_fraction", stable_number(best_ms > 0 ? p.predicted.iteration_ms / best_ms - 1 : 0)}};
}

// A table of layouts: label, layout, step, bubble, peak memory, against the plan; the layout
// column as wide as its longest name.
struct LayoutRow {
  std::string label;
  const PlacedPipeline* pipeline;
  std::string versus;
};

std::string layout_table(const std::vector<LayoutRow>& rows) {
  int width = 6;
  for (const auto& row : rows) width = std::max(width, static_cast<int>(layout_name(*row.pipeline).size()));
  auto line = [&](const std::string& label, const std::string& layout, const std::string& step, const std::string& bubble,
                  const std::string& memory, const std::string& versus) {
    char text[1024];
    std::snprintf(text, sizeof text, "  %-8s %-*s %11s %7s %11s  %s", label.c_str(), width, layout.c_str(), step.c_str(),
                  bubble.c_str(), memory.c_str(), versus.c_str());
    std::string trimmed = text;
    return trimmed.erase(trimmed.find_last_not_of(' ') + 1) + "\n";
  };
  std::string table = line("", "layout", "step", "bubble", "peak mem", "vs plan");
  for (const auto& row : rows) {
    const auto& p = row.pipeline->predicted;
    table += line(row.label, layout_name(*row.pipeline), human_ms(p.iteration_ms), percent(p.bubble_fraction),
                  human_bytes(p.peak_mem_bytes), row.versus);
  }
  return table;
}

// What ruled out the layouts that were never simulated, one clause each, the counts from the census.
std::vector<std::string> ruled_out(const partition::SearchCensus& c, std::int64_t mem_bytes) {
  std::vector<std::string> reasons;
  const std::string slack = percent(c.slack - 1);
  if (c.bounded_out > 0)
    reasons.push_back(std::to_string(c.bounded_out) + " could not come within " + slack +
                      " of the best even perfectly balanced (microbatches x a microbatch's share of the work)");
  if (c.no_fit > 0)
    reasons.push_back(std::to_string(c.no_fit) + " have no pipeline that fits in " + human_bytes(static_cast<double>(mem_bytes)) +
                      " per device, even with recomputation, sharded state and offload");
  const int slower = c.failed - c.no_fit + c.slower;
  if (slower > 0)
    reasons.push_back(std::to_string(slower) + " fit, but the search's formula puts their best pipeline over " + slack +
                      " behind the best (the table simulates the fastest of them too)");
  if (c.near > 0)
    reasons.push_back(plural(c.near, "layout") + " came within " + slack +
                      " of the best by the formula: simulated, the shortest step is the plan");
  return reasons;
}

}  // namespace

namespace {

// A value per stage, runs of three or more written once: "1*4,4".
std::string per_stage_runs(const std::vector<int>& values) {
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < values.size();) {
    std::size_t end = i;
    while (end < values.size() && values[end] == values[i]) ++end;
    if (end - i >= 3) runs.push_back(std::to_string(values[i]) + "*" + std::to_string(end - i));
    else
      for (std::size_t j = i; j < end; ++j) runs.push_back(std::to_string(values[i]));
    i = end;
  }
  return join(runs, ",");
}

}  // namespace

std::string layout_name(const PlacedPipeline& p) {
  std::vector<int> replicas, degrees;
  for (const auto& stage : p.stages) {
    replicas.push_back(stage.option.replicas);
    degrees.push_back(stage.option.tensor_degree);
  }
  auto uniform = [](const std::vector<int>& values) {
    return std::all_of(values.begin(), values.end(), [&](int v) { return v == values.front(); });
  };
  const int first = replicas.empty() ? 1 : replicas.front();
  // Interleaved: pp counts the device groups, vp their chunks (Megatron-LM's names).
  const int chunks = p.config.chunks;
  std::string name = "pp=" + std::to_string(p.stages.size() / static_cast<std::size_t>(chunks)) +
                     (chunks > 1 ? " vp=" + std::to_string(chunks) : "") + " dp=" + std::to_string(p.config.pipelines) +
                     (uniform(replicas) && first > 1 ? "x" + std::to_string(first) : "");
  // Tensor parallelism, where a stage has it: "tp=8", or per stage "tp=(8*12,4)".
  if (!degrees.empty() && !uniform(degrees)) name += " tp=(" + per_stage_runs(degrees) + ")";
  else if (!degrees.empty() && degrees.front() > 1) name += " tp=" + std::to_string(degrees.front());
  if (p.config.context_degree > 1) name += " cp=" + std::to_string(p.config.context_degree);
  name += " m=" + std::to_string(p.config.microbatches) + " b=" + std::to_string(p.config.microbatch_size);
  if (uniform(replicas)) return name;
  return name + " (replicas " + per_stage_runs(replicas) + ")";
}

nlohmann::json explain_json(const partition::PlanResult& result, std::int64_t mem_bytes) {
  const double best = result.pipeline.predicted.iteration_ms;
  nlohmann::json runners_up = nlohmann::json::array();
  for (const auto& p : result.runners_up) runners_up.push_back(layout_json(p, best));
  const auto& c = result.census;
  return {{"plan", layout_json(result.pipeline, best)},
          {"runners_up", runners_up},
          {"candidates",
           {{"total", c.candidates},
            {"bounded_out", c.bounded_out},
            {"no_fit", c.no_fit},
            {"slower", c.failed - c.no_fit + c.slower},
            {"simulated", c.near}}},
          {"ruled_out", ruled_out(c, mem_bytes)}};
}

std::string explain_text(const partition::PlanResult& result, std::int64_t mem_bytes) {
  const double best = result.pipeline.predicted.iteration_ms;
  std::vector<LayoutRow> rows{{"plan", &result.pipeline, ""}};
  for (std::size_t i = 0; i < result.runners_up.size(); ++i)
    rows.push_back({"lost #" + std::to_string(i + 1), &result.runners_up[i], slower_text(result.runners_up[i].predicted.iteration_ms, best)});
  std::string text = "\nwhy this plan (pp stages, dp pipelines [x replicas of each stage], m microbatches of b samples)\n" + layout_table(rows);
  if (result.runners_up.empty()) text += "  no other layout fits\n";
  text += "of " + plural(result.census.candidates, "candidate layout") + " (pipelines x microbatches):\n";
  for (const auto& reason : ruled_out(result.census, mem_bytes)) text += "  " + reason + "\n";
  return text;
}

nlohmann::json layout_comparison_json(const std::string& asked, const PlacedPipeline& forced, const PlacedPipeline& free) {
  return {{"asked", asked},
          {"forced", layout_json(forced, free.predicted.iteration_ms)},
          {"free", layout_json(free, free.predicted.iteration_ms)}};
}

std::string layout_comparison_text(const std::string& asked, const PlacedPipeline& forced, const PlacedPipeline& free) {
  const double asked_ms = forced.predicted.iteration_ms, free_ms = free.predicted.iteration_ms;
  char verdict[160];
  if (asked_ms > free_ms * 1.0005)
    std::snprintf(verdict, sizeof verdict, "the free plan's step is %.1f%% shorter", 100 * (1 - free_ms / asked_ms));
  else if (asked_ms < free_ms * 0.9995)
    std::snprintf(verdict, sizeof verdict, "the layout asked for is %.1f%% faster than the free plan: the search missed it",
                  100 * (1 - asked_ms / free_ms));
  else
    std::snprintf(verdict, sizeof verdict, "the free plan's step is the same");
  return "\nlayout " + asked + " against the free plan\n" +
         layout_table({{"asked", &forced, ""}, {"free", &free, slower_text(free_ms, asked_ms)}}) + verdict + "\n";
}

}  // namespace rannc
