// Event simulation of one training step of a pipeline: every stage runs its forwards and
// backwards in the schedule's order (1F1B: warm-up forwards, then one forward one backward,
// then the remaining backwards; GPipe: all forwards, then all backwards), each waiting for its
// input from the neighbouring stage plus the transfer; after its last backward a stage
// allreduces its gradients. All pipelines are identical, so one is simulated.
#pragma once

#include <vector>

#include "cost_model/memory.h"

namespace rannc::partition {

struct SimulatedStage {
  double fwd_ms = 0, bwd_ms = 0;  // per microbatch on one replica (bwd includes recomputation)
  double transfer_ms = 0;         // one way: receiving the inputs, or sending their gradients back
  double allreduce_ms = 0;
};

// One box of the timeline, for reports and pictures.
struct SimulatedTask {
  int stage = 0, microbatch = 0;
  bool backward = false;
  double start_ms = 0, end_ms = 0;
};

struct Simulation {
  double iteration_ms = 0;
  std::vector<double> busy_ms;        // per stage: compute time in the step
  std::vector<double> finish_ms;      // per stage: end of its gradient allreduce
  std::vector<int> max_in_flight;     // per stage: most microbatches between forward and backward
  std::vector<SimulatedTask> tasks;   // in the order they were scheduled
  double bubble_fraction = 0;         // idle share of the step, over the stages' replicas
};

Simulation simulate(const std::vector<SimulatedStage>& stages, const std::vector<int>& replicas, int microbatches,
                    cost::Schedule schedule);

// The order a stage runs its tasks in: (microbatch, backward) pairs.
std::vector<std::pair<int, bool>> stage_task_order(cost::Schedule schedule, int stage, int stages, int microbatches);

}  // namespace rannc::partition
