// The files written beside plan.json for people and schedulers: launch.sh, job.sbatch,
// schedule.svg and stages.dot.
#include <catch2/catch.hpp>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "emit/launch_files.h"
#include "emit/pictures.h"
#include "plan/plan_json.h"
#include "plan_fixture.h"
#include "support/format.h"

using namespace rannc;
using namespace rannc::emit;

namespace {

int count_of(const std::string& text, const std::string& part) {
  int count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

// Every element closed in order: enough of XML well-formedness to catch a writer's slip
// (the CLI test parses the real file with a real XML parser).
bool tags_balance(const std::string& xml) {
  std::vector<std::string> open;
  std::regex tag(R"(<(/?)([A-Za-z][\w-]*)[^>]*?(/?)>)");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    if (!m[3].str().empty()) continue;  // <tag/>
    if (m[1].str().empty()) open.push_back(m[2].str());
    else if (open.empty() || open.back() != m[2].str()) return false;
    else open.pop_back();
  }
  return open.empty();
}

// A pipeline of two stages, the second with two replicas in each of two pipelines, simulated.
partition::PlacedPipeline simulated_pipeline() {
  partition::PlacedPipeline plan;
  plan.config.pipelines = 2;
  plan.config.microbatches = 4;
  plan.stages.resize(2);
  std::vector<partition::SimulatedStage> stages{{1.0, 2.0, 0.0, 0.5}, {1.0, 2.0, 0.25, 0.5}};
  plan.simulation = partition::simulate(stages, {1, 2}, 4, plan::Schedule::k1F1B);
  plan.ranks = {{0, 0, 0, 0, 0}, {1, 0, 1, 1, 0}, {2, 0, 2, 1, 1}, {3, 0, 3, 0, 1}, {4, 0, 4, 1, 2}, {5, 0, 5, 1, 3}};
  plan.unused_ranks = {6, 7};
  plan.unused_reason = "replicas <do not> help";
  return plan;
}

// Stages with these replicas per pipeline in `pipelines` pipelines, placed as the planner
// places them (pipelines on consecutive ranks, each stage's ranks listed ascending) and simulated.
partition::PlacedPipeline folded_pipeline(const std::vector<int>& replicas, int pipelines, int microbatches) {
  partition::PlacedPipeline plan;
  plan.config.pipelines = pipelines;
  plan.config.microbatches = microbatches;
  plan.stages.resize(replicas.size());
  std::vector<partition::SimulatedStage> stages(replicas.size(), {1.0, 2.0, 0.25, 0.5});
  plan.simulation = partition::simulate(stages, replicas, microbatches, plan::Schedule::k1F1B);
  int used = 0;
  for (int r : replicas) used += r;
  for (int p = 0, offset = 0; p < pipelines; ++p, offset = 0)
    for (int s = 0; s < static_cast<int>(replicas.size()); offset += replicas[s++])
      for (int i = 0; i < replicas[s]; ++i) {
        int rank = p * used + offset + i;
        plan.ranks.push_back({rank, 0, rank, s, p * replicas[s] + i});
        plan.stages[s].ranks.push_back(rank);
      }
  for (std::size_t s = 0; s < replicas.size(); ++s) plan.stages[s].option.replicas = replicas[s];
  std::sort(plan.ranks.begin(), plan.ranks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return plan;
}

}  // namespace

TEST_CASE("launch.sh runs mpirun on the plan's ranks from any folder", "[launch]") {
  auto plan = plan::from_json(test::small_plan(), "out/plan.json");
  std::string script = launch_script(plan, "/opt/rannc/bin");
  CHECK_THAT(script, Catch::StartsWith("#!/usr/bin/env bash\n"));
  CHECK_THAT(script, Catch::Contains("\nset -euo pipefail\n"));
  CHECK_THAT(script, Catch::Contains("here=\"$(cd \"$(dirname \"${BASH_SOURCE[0]}\")\" && pwd)\""));
  CHECK_THAT(script, Catch::Contains("mpirun} -np 3 \"$rannc_run\" \"$here/plan.json\" \"$@\"\n"));
  CHECK_THAT(script, Catch::Contains("# 1 device of the cluster (3) carries no stage and gets no rank.\n"));
  CHECK(launched_ranks(plan) == 3);
}

TEST_CASE("launch.sh and job.sbatch take rannc-run from RANNC_RUN, beside rannc-partition, or PATH", "[launch]") {
  auto plan = plan::from_json(test::small_plan(), "out/plan.json");
  for (const auto& [script, name] : {std::pair{launch_script(plan, "/opt/rannc/bin"), "launch.sh"},
                                     std::pair{sbatch_script(plan, "/opt/rannc/bin"), "job.sbatch"}}) {
    CHECK_THAT(script, Catch::Contains("rannc_run=\"${RANNC_RUN:-}\"\n"
                                       "if [[ -z \"$rannc_run\" && -x '/opt/rannc/bin/rannc-run' ]]; then "
                                       "rannc_run='/opt/rannc/bin/rannc-run'; fi\n"
                                       "if [[ -z \"$rannc_run\" ]]; then rannc_run=\"$(command -v rannc-run || true)\"; fi\n"
                                       "if [[ -z \"$rannc_run\" ]]; then\n"
                                       "  echo \"" + std::string(name) +
                                       ": cannot find rannc-run (set RANNC_RUN, or put it on PATH)\" >&2\n  exit 2\nfi\n"));
  }
  // A folder of any name stays one shell word; without one, only RANNC_RUN and PATH are tried.
  CHECK_THAT(launch_script(plan, "/it's here"), Catch::Contains("-x '/it'\\''s here/rannc-run' ]]"));
  CHECK_THAT(launch_script(plan, ""), !Catch::Contains("-x '"));
  CHECK_THAT(launch_script(plan, ""), Catch::Contains("command -v rannc-run"));
}

TEST_CASE("job.sbatch asks SLURM for the nodes and GPUs the ranks use", "[launch]") {
  auto plan = plan::from_json(test::small_plan(), "out/plan.json");
  std::string job = sbatch_script(plan, "/opt/rannc/bin");
  CHECK_THAT(job, Catch::StartsWith("#!/usr/bin/env bash\n#SBATCH --job-name=rannc-tiny\n"));
  CHECK_THAT(job, Catch::Contains("#SBATCH --nodes=2\n#SBATCH --ntasks=3\n#SBATCH --ntasks-per-node=2\n"
                                  "#SBATCH --gpus-per-node=2\n"));
  // The cluster's own limits as placeholders sbatch skips until one '#' goes.
  CHECK_THAT(job, Catch::Contains("#SBATCH --gpus-per-node=2\n# Your cluster's limits: fill these in and remove one '#'"));
  CHECK_THAT(job, Catch::Contains("\n##SBATCH --time=HH:MM:SS\n##SBATCH --partition=PARTITION\n##SBATCH --account=ACCOUNT\n"));
  // srun with PMIx by default, mpirun on request, anything else refused before the plan is looked for.
  CHECK_THAT(job, Catch::Contains("\nlauncher=\"${RANNC_LAUNCHER:-srun}\"\n"));
  CHECK(job.find("RANNC_LAUNCHER=$launcher: must be srun (the default) or mpirun") < job.find("plan=\""));
  CHECK_THAT(job, Catch::Contains("\n  exec mpirun -np 3 \"$rannc_run\" \"$plan\" \"$@\"\n"));
  CHECK_THAT(job, Catch::EndsWith("\nexec srun --mpi=pmix --ntasks=3 \"$rannc_run\" \"$plan\" \"$@\"\n"));
  // Names from the plan cannot break the script: a new line in a model path stays in its comment.
  auto tricky = test::small_plan();
  tricky["model"]["path"] = "dir/my model\n$(rm -rf x).onnx";
  auto script = sbatch_script(plan::from_json(tricky, "plan.json"), "");
  CHECK_THAT(script, Catch::Contains("#SBATCH --job-name=rannc-my_model___rm_-rf_x_\n"));
  CHECK(count_of(launch_script(plan::from_json(tricky, "plan.json"), ""), "\n") == count_of(launch_script(plan, ""), "\n"));
}

TEST_CASE("schedule.svg has one row per rank with its stage's simulated tasks", "[pictures]") {
  auto plan = simulated_pipeline();
  std::string svg = schedule_svg(plan, "tiny <model> & co");
  CHECK_THAT(svg, Catch::StartsWith("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(tags_balance(svg));
  CHECK(count_of(svg, "<g class=\"rank\"") == 6);
  for (int rank = 0; rank < 6; ++rank) CHECK(count_of(svg, "data-rank=\"" + std::to_string(rank) + "\"") == 1);
  CHECK_THAT(svg, Catch::Contains("rank 4 &#183; stage 1"));
  // Each stage's timeline is drawn once and shown on its ranks' rows.
  CHECK(count_of(svg, "<use href=\"#stage-1\"/>") == 4);
  CHECK(count_of(svg, "data-kind=\"forward\"") == 2 * 4);
  CHECK(count_of(svg, "data-kind=\"backward\"") == 2 * 4);
  CHECK(count_of(svg, "data-kind=\"activation transfer\"") == 4);
  CHECK(count_of(svg, "data-kind=\"gradient transfer\"") == 4);
  CHECK(count_of(svg, "data-kind=\"gradient allreduce\"") == 2);
  CHECK_THAT(svg, Catch::Contains("tiny &lt;model&gt; &amp; co"));
  CHECK_THAT(svg, Catch::Contains("unused devices 6-7: replicas &lt;do not&gt; help"));
  CHECK_THAT(svg, Catch::Contains("time in the step (ms)"));
  CHECK(svg == schedule_svg(plan, "tiny <model> & co"));
}

TEST_CASE("schedule.svg folds replicas and pipelines into one row per stage above 16 ranks", "[pictures]") {
  auto plan = folded_pipeline({1, 2, 3}, 4, 4);  // 24 ranks
  std::string svg = schedule_svg(plan, "folded");
  CHECK(tags_balance(svg));
  CHECK(count_of(svg, "<g class=\"rank\"") == 0);
  CHECK(count_of(svg, "<use ") == 0);
  CHECK(count_of(svg, "<g class=\"stage\"") == 3);
  CHECK_THAT(svg, Catch::Contains("<g class=\"stage\" data-stage=\"0\" data-ranks=\"4\" data-replicas=\"1\" data-pipelines=\"4\""));
  CHECK_THAT(svg, Catch::Contains("<g class=\"stage\" data-stage=\"1\" data-ranks=\"8\" data-replicas=\"2\" data-pipelines=\"4\""));
  CHECK_THAT(svg, Catch::Contains("<g class=\"stage\" data-stage=\"2\" data-ranks=\"12\" data-replicas=\"3\" data-pipelines=\"4\""));
  // The counts in the label, the ranks in the tooltip.
  CHECK_THAT(svg, Catch::Contains(">stage 1 &#183; 8 ranks</text>"));
  CHECK_THAT(svg, Catch::Contains(">(2 replicas x 4 pipelines)</text>"));
  CHECK_THAT(svg, Catch::Contains(">(1 replica x 4 pipelines)</text>"));
  CHECK_THAT(svg, Catch::Contains("<title>stage 2 &#183; 12 ranks (3 replicas x 4 pipelines): ranks 3-5,9-11,15-17,21-23</title>"));
  // Each stage's timeline drawn once, in its row.
  CHECK(count_of(svg, "data-kind=\"forward\"") == 3 * 4);
  CHECK(count_of(svg, "data-kind=\"backward\"") == 3 * 4);
  CHECK(count_of(svg, "data-kind=\"gradient allreduce\"") == 3);
  CHECK(count_of(svg, "<path ") == 0);
  CHECK(svg == schedule_svg(plan, "folded"));
  // 16 ranks still have a row each.
  auto sixteen = folded_pipeline({1, 3}, 4, 4);
  std::string rows = schedule_svg(sixteen, "per rank");
  CHECK(count_of(rows, "<g class=\"rank\"") == 16);
  CHECK(count_of(rows, "<g class=\"stage\"") == 0);
}

TEST_CASE("schedule.svg of interleaved stages has a row per device group with all its chunks", "[pictures]") {
  // 2 groups of 2 chunks on ranks 0 and 1: stages 0 and 2 on rank 0, 1 and 3 on rank 1.
  partition::PlacedPipeline plan;
  plan.config.microbatches = 4;
  plan.config.chunks = 2;
  plan.stages.resize(4);
  for (int s = 0; s < 4; ++s) plan.stages[s].ranks = {s % 2};
  std::vector<partition::SimulatedStage> chunks(4, {1.0, 2.0, 0.25, 0.5});
  plan.simulation = partition::simulate(chunks, {1, 1, 1, 1}, 4, plan::Schedule::k1F1B, 2);
  plan.ranks = {{0, 0, 0, 0, 0}, {1, 0, 1, 1, 0}};
  std::string svg = schedule_svg(plan, "interleaved");
  CHECK(tags_balance(svg));
  CHECK(count_of(svg, "<g class=\"rank\"") == 2);
  CHECK_THAT(svg, Catch::Contains("rank 1 &#183; stages 1, 3</text>"));
  CHECK(count_of(svg, "<g id=\"stage-") == 2);
  // Every chunk's passes, drawn once in its group's timeline.
  CHECK(count_of(svg, "data-kind=\"forward\"") == 4 * 4);
  CHECK(count_of(svg, "data-kind=\"backward\"") == 4 * 4);
  CHECK(count_of(svg, "data-kind=\"gradient allreduce\"") == 4);
}

TEST_CASE("schedule.svg joins many tasks into one path per stage and kind", "[pictures]") {
  auto plan = folded_pipeline({1, 2, 3}, 4, 256);
  REQUIRE(plan.simulation.tasks.size() > 2000);
  std::string svg = schedule_svg(plan, "many tasks");
  CHECK(tags_balance(svg));
  CHECK(count_of(svg, "<rect class=\"task\"") == 0);
  CHECK(count_of(svg, "<text x=\"") < 100);  // no microbatch numbers
  // Stage 0 receives no activations, the last stage no gradients.
  CHECK(count_of(svg, "<path class=\"tasks\"") == 4 + 5 + 4);
  CHECK(count_of(svg, "<path class=\"tasks\" data-kind=\"forward\" data-tasks=\"256\"") == 3);
  CHECK(count_of(svg, "<path class=\"tasks\" data-kind=\"activation transfer\" data-tasks=\"256\"") == 2);
  CHECK(count_of(svg, "<path class=\"tasks\" data-kind=\"gradient allreduce\" data-tasks=\"1\"") == 3);
  CHECK_THAT(svg, Catch::Contains("<title>backward: 256 tasks</title>"));
  CHECK(count_of(svg, "<g class=\"stage\"") == 3);
  CHECK(svg.size() < 40 * plan.simulation.tasks.size());
  CHECK(svg == schedule_svg(plan, "many tasks"));
  // Boxes that overlap on screen (at least 1.5 px wide) are one rectangle: at 2048 microbatches
  // 1F1B's steady state is one run, and the picture stays small.
  auto long_step = folded_pipeline({1, 2, 3}, 4, 2048);
  std::string joined = schedule_svg(long_step, "long step");
  auto backward_at = joined.find("data-kind=\"backward\" data-tasks=\"2048\"");
  REQUIRE(backward_at != std::string::npos);
  auto d_at = joined.find(" d=\"", backward_at) + 4;
  std::string d = joined.substr(d_at, joined.find('"', d_at) - d_at);
  CHECK_THAT(d, Catch::Matches(R"(M[0-9.]+ [0-9.]+h[0-9.]+(m-?[0-9.]+ 0h[0-9.]+)*)"));
  CHECK(count_of(d, "h") < 100);
  CHECK(joined.size() < 20000);
  // Per-rank rows (16 ranks or fewer) draw each stage's joined paths once too.
  auto few_ranks = folded_pipeline({1, 1}, 2, 1024);
  std::string rows = schedule_svg(few_ranks, "per rank");
  CHECK(tags_balance(rows));
  CHECK(count_of(rows, "<g class=\"rank\"") == 4);
  CHECK(count_of(rows, "<use href=\"#stage-1\"/>") == 2);
  CHECK(count_of(rows, "<path class=\"tasks\" data-kind=\"forward\" data-tasks=\"1024\"") == 2);
  CHECK(count_of(rows, "<rect class=\"task\"") == 0);
}

TEST_CASE("stages.dot has a node per stage and edges labelled with tensors and bytes", "[pictures]") {
  auto plan = plan::from_json(test::small_plan(), "out/plan.json");
  std::string dot = stages_dot(plan);
  CHECK_THAT(dot, Catch::StartsWith("digraph plan {\n"));
  CHECK_THAT(dot, Catch::EndsWith("}\n"));
  CHECK(count_of(dot, "\n  stage0 [label=") == 1);
  CHECK(count_of(dot, "\n  stage1 [label=") == 1);
  CHECK_THAT(dot, Catch::Contains("stage 1\\naten::linear y .. aten::linear y\\n2 x 1 replicas, ranks 1-2, recompute full\\n"
                                  "fwd 1.000 ms, bwd 2.000 ms / microbatch\\n256.00 MiB of 1.00 GiB per device"));
  // "a" is [2, 16] float32 on each of the two replicas: 256 bytes per microbatch.
  CHECK_THAT(dot, Catch::Contains("  stage0 -> stage1 [label=\"a (256 B) / microbatch\"];\n"));
  CHECK_THAT(dot, Catch::Contains("  \"input x\" -> stage0 [label=\"x (128 B) / microbatch\"];\n"));
  CHECK_THAT(dot, Catch::Contains("  stage1 -> \"output y\" [label=\"16 B / microbatch\"];\n"));
  CHECK_THAT(dot, Catch::Contains("  \"input x\" [shape=ellipse, style=solid, label=\"x\\n4x8 float32\"];\n"));
}

TEST_CASE("rank lists print as runs", "[format]") {
  CHECK(ranges_text({}) == "");
  CHECK(ranges_text({3}) == "3");
  CHECK(ranges_text({8, 0, 1, 2, 3, 10, 11}) == "0-3,8,10-11");
}
