#include "partitioner/simulate.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace rannc::partition {
namespace {

// The transfer a finished task starts: a forward sends its outputs to the next stage, a
// backward sends its input gradients to the previous one. Both take the receiving side's
// transfer_ms (see SimulatedStage), as ready_at in simulate() assumes.
void record_transfer(Simulation& result, const std::vector<SimulatedStage>& stages, int stage, int microbatch,
                     bool backward, double sent_ms) {
  int to = backward ? stage - 1 : stage + 1;
  if (to < 0 || to >= static_cast<int>(stages.size())) return;
  double length = stages[backward ? stage : to].transfer_ms;
  if (length <= 0) return;
  auto kind = backward ? TaskKind::kGradientTransfer : TaskKind::kActivationTransfer;
  result.tasks.push_back({to, microbatch, kind, sent_ms, sent_ms + length, stage});
}

}  // namespace

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::kForward: return "forward";
    case TaskKind::kBackward: return "backward";
    case TaskKind::kActivationTransfer: return "activation transfer";
    case TaskKind::kGradientTransfer: return "gradient transfer";
    case TaskKind::kAllreduce: return "gradient allreduce";
  }
  return "task";
}

Simulation simulate(const std::vector<SimulatedStage>& stages, const std::vector<int>& replicas, int microbatches,
                    plan::Schedule schedule, int chunks) {
  const int count = static_cast<int>(stages.size());
  // Stage s (a chunk when interleaved) runs on group s mod `groups`, which runs its tasks in turn.
  const int groups = count / chunks;
  constexpr double kNotYet = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> fwd_end(count, std::vector<double>(microbatches, kNotYet));
  std::vector<std::vector<double>> bwd_end = fwd_end;
  std::vector<std::vector<plan::PassTask>> orders;
  for (int g = 0; g < groups; ++g)
    orders.push_back(chunks == 1 ? plan::stage_passes(schedule, groups - 1 - g, microbatches)
                                 : plan::group_passes(groups, g, chunks, microbatches));
  std::vector<std::size_t> next(groups, 0);
  std::vector<double> free_at(groups, 0);
  Simulation result;
  result.busy_ms.assign(count, 0);
  result.max_in_flight.assign(count, 0);
  std::vector<int> in_flight(count, 0), group_in_flight(groups, 0), group_most(groups, 0);
  // When is a task's input there? Forward: the previous stage's output has arrived; backward:
  // this stage's forward is done and the next stage's input gradient has arrived.
  auto ready_at = [&](int s, int m, bool backward) {
    if (!backward) return s == 0 ? 0.0 : fwd_end[s - 1][m] + stages[s].transfer_ms;
    double from_next = s + 1 == count ? 0.0 : bwd_end[s + 1][m] + stages[s + 1].transfer_ms;
    return std::max(fwd_end[s][m], from_next);
  };
  for (std::size_t done = 0, total = static_cast<std::size_t>(count) * 2 * microbatches; done < total;) {
    // Run the runnable task that can start earliest (ties: the lowest group), as the hardware would.
    int pick = -1;
    double pick_start = kNotYet;
    for (int g = 0; g < groups; ++g) {
      if (next[g] == orders[g].size()) continue;
      const plan::PassTask& task = orders[g][next[g]];
      double start = std::max(free_at[g], ready_at(task.chunk * groups + g, task.microbatch, task.pass == plan::Pass::kBackward));
      if (start < pick_start) pick = g, pick_start = start;
    }
    if (pick < 0) throw std::logic_error("pipeline simulation deadlocked");
    const plan::PassTask task = orders[pick][next[pick]++];
    const int s = task.chunk * groups + pick, m = task.microbatch;
    bool backward = task.pass == plan::Pass::kBackward;
    double length = backward ? stages[s].bwd_ms : stages[s].fwd_ms;
    double end = pick_start + length;
    (backward ? bwd_end : fwd_end)[s][m] = end;
    free_at[pick] = end;
    result.busy_ms[s] += length;
    in_flight[s] += backward ? -1 : 1;
    group_in_flight[pick] += backward ? -1 : 1;
    // A group's chunks share its memory: each chunk's count at the group's peak.
    if (group_in_flight[pick] > group_most[pick]) {
      group_most[pick] = group_in_flight[pick];
      for (int c = pick; c < count; c += groups) result.max_in_flight[c] = in_flight[c];
    }
    result.tasks.push_back({s, m, backward ? TaskKind::kBackward : TaskKind::kForward, pick_start, end});
    record_transfer(result, stages, s, m, backward, end);
    ++done;
  }
  double busy = 0, ranks = 0;
  result.finish_ms.assign(count, 0);
  for (int g = 0; g < groups; ++g) {
    // After its last backward a group synchronises each chunk's gradients in turn. (Started
    // beside the backwards that follow a chunk's last, as DDP's buckets and Megatron-LM's
    // overlapped reduction do, it would hide under them; that is modelled for no stage yet.)
    double at = free_at[g];
    for (int s = g; s < count; s += groups) {
      double end = at + stages[s].allreduce_ms;
      if (stages[s].allreduce_ms > 0) result.tasks.push_back({s, -1, TaskKind::kAllreduce, at, end});
      at = end;
      busy += result.busy_ms[s] * replicas[s];
    }
    for (int s = g; s < count; s += groups) result.finish_ms[s] = at;
    result.iteration_ms = std::max(result.iteration_ms, at);
    ranks += replicas[g];
  }
  if (result.iteration_ms > 0 && ranks > 0) result.bubble_fraction = 1 - busy / (ranks * result.iteration_ms);
  return result;
}

}  // namespace rannc::partition
