// Event simulation of one training step of a pipeline: every stage runs its forwards and
// backwards in the schedule's order (1F1B: warm-up forwards, then one forward one backward,
// then the remaining backwards; GPipe: all forwards, then all backwards), each waiting for its
// input from the neighbouring stage plus the transfer (plan/schedule.h defines the orders);
// after its last backward a stage
// allreduces its gradients. All pipelines are identical, so one is simulated.
#pragma once

#include <cstdint>
#include <vector>

#include "cost_model/memory.h"
#include "plan/schedule.h"

namespace rannc::partition {

struct SimulatedStage {
  double fwd_ms = 0, bwd_ms = 0;  // per microbatch on one replica (bwd includes recomputation)
  double transfer_ms = 0;         // one way: receiving the inputs, or sending their gradients back
  double allreduce_ms = 0;
};

// What a box of the timeline is. Compute and the allreduce occupy the stage; transfers run
// beside compute (their own stream) and only delay the task that waits for them.
enum class TaskKind : std::uint8_t {
  kForward,
  kBackward,
  kActivationTransfer,  // a microbatch's inputs arriving from the previous stage
  kGradientTransfer,    // the gradients of a stage's outputs arriving from the next stage
  kAllreduce,           // the stage's gradients among its replicas, after its last backward
};
const char* task_kind_name(TaskKind kind);

// One box of the timeline, for reports and pictures. Zero-length transfers and allreduces
// are not recorded.
struct SimulatedTask {
  int stage = 0;       // the stage that computes, or receives the transfer
  int microbatch = 0;  // -1 for the allreduce
  TaskKind kind = TaskKind::kForward;
  double start_ms = 0, end_ms = 0;
  int peer = -1;       // transfers: the stage that sends
};

struct Simulation {
  double iteration_ms = 0;
  std::vector<double> busy_ms;        // per stage: compute time in the step
  std::vector<double> finish_ms;      // per stage: end of its gradient allreduce
  std::vector<int> max_in_flight;     // per stage: most microbatches between forward and backward
  std::vector<SimulatedTask> tasks;   // in the order they were scheduled; the allreduces last
  double bubble_fraction = 0;         // idle share of the step, over the stages' replicas
};

// `chunks` > 1: interleaved 1F1B (plan/schedule.h); `stages` are the chunks in model order,
// stage s on the devices of stage s mod (stages / chunks), and the per-stage results are per chunk
// (max_in_flight: each chunk's count when its group keeps the most; finish_ms: its group's end).
// A group synchronises its chunks' gradients one after another after its last backward.
Simulation simulate(const std::vector<SimulatedStage>& stages, const std::vector<int>& replicas, int microbatches,
                    plan::Schedule schedule, int chunks = 1);

}  // namespace rannc::partition
