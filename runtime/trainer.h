// One rank's training steps: its stages' passes in schedule order (one stage, or with interleaved
// 1F1B its v model chunks), activations and their gradients exchanged with the neighbouring
// stages' replicas, then the state synchronisation (gradients summed over the ranks that hold the
// same weights, and the optimizer step).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/plan_json.h"
#include "plan/schedule.h"
#include "runtime/communicator.h"
#include "runtime/embedding_exchange.h"
#include "runtime/rank_layout.h"
#include "runtime/stage_runner.h"
#include "runtime/state_sync.h"
#include "runtime/training_data.h"
#include "torch_side/accelerator.h"

namespace rannc::runtime {

struct StepRecord {
  int step = 0;
  double loss = 0, ms = 0;
  double grad_norm = 0;  // the global gradient norm before clipping (0 when not clipping)
  double lr = 0;         // the learning rate the step trained at
};

// Where a step's wall time goes on the host, per step: reading the samples; running the passes
// (on a GPU, issuing their kernels; and waiting for the peers' transfers); the weights' work
// around them (gradients zeroed, offloaded copies, gradient sync, optimizer step); and reading
// the loss, summed over the ranks, then waiting for the device.
struct HostTimes {
  double data_ms = 0, passes_ms = 0, optimizer_ms = 0, wait_ms = 0;
};

// Milliseconds per step, averaged over the steps run.
struct RankRecord {
  int rank = 0, stage = 0;
  std::int64_t peak_mem_bytes = 0, offload_bytes = 0;
  std::int64_t optimizer_elements = 0;  // weight elements this rank's optimizer steps (its shards when sharded)
  std::int64_t data_bytes = 0;          // read from --data's files
  double fwd_ms = 0, bwd_ms = 0, comm_ms = 0;
  HostTimes host;
  std::optional<ExchangeRecord> embeddings;  // sharded plans: the embedding exchange's bytes and time
};

// Refuses, in one line, a plan whose messages rannc-run cannot tell apart (more tags than an int
// holds) or cannot send (between two model chunks of one rank).
void check_messages(const plan::Plan& plan);

class Trainer {
 public:
  // Each step runs `accumulate_steps` global batches (data steps step * accumulate_steps + k),
  // whose gradients add up before the optimizer steps.
  // `runners`: the rank's stages (RankLayout::stages_of), in that order.
  // `embeddings`: a sharded plan's tables, whose pooled rows some stage inputs are (else null).
  Trainer(const plan::Plan& plan, const RankLayout& layout, int rank, std::vector<StageRunner*> runners, TrainingData& data,
          Communicator& communicator, StateSync& state, int accumulate_steps, EmbeddingExchange* embeddings = nullptr);

  // Every rank runs the same steps; the loss comes back on every rank.
  StepRecord run_step(int step);
  RankRecord record() const;

 private:
  struct Consumer {
    int stage, input;  // the stage input an output of this stage feeds
  };

  // One of the rank's stages (a model chunk), with the stage inputs each of its outputs feeds.
  struct Chunk {
    const plan::Stage* stage;
    StageRunner* runner;
    std::vector<std::vector<Consumer>> consumers;  // per output
  };

  // What a message's tag says: the stage whose pass takes it, and that pass.
  struct Tagged {
    int stage;
    plan::PassTask task;
  };

  // A piece of a tensor a pass receives.
  struct Incoming {
    std::size_t slot;   // the stage input (forward pass) or output (backward pass) it is part of
    int peer_stage;     // the stage sending it
    SampleRange range;  // where its samples sit in that tensor
    Communicator::Receive receive;
  };

  void run_passes(at::Tensor& loss_sum);
  void run_pass(const plan::PassTask& task, std::vector<Incoming>& ready, at::Tensor& loss_sum,
                const std::function<void()>& start_next);
  std::vector<Incoming> start_receives(const plan::PassTask& task);
  at::Tensor finish_receive(Incoming& piece, const plan::PassTask& task);
  std::vector<at::Tensor> gather_inputs(const Chunk& chunk, const plan::PassTask& task, std::vector<Incoming>& incoming);
  void send_outputs(const Chunk& chunk, int microbatch, const std::vector<at::Tensor>& outputs);
  std::vector<at::Tensor> gather_output_grads(const Chunk& chunk, const plan::PassTask& task,
                                              std::vector<Incoming>& incoming);
  void send_input_grads(const Chunk& chunk, int microbatch, const std::vector<at::Tensor>& grads);
  int tag(int stage, int microbatch, int input, plan::Pass pass) const;
  Tagged tagged(int tag) const;  // what a tag was made for

  const plan::Plan& plan_;
  const RankLayout& layout_;
  int rank_;
  Placement placement_;
  std::vector<Chunk> chunks_;  // the rank's stages, in model order
  TrainingData& data_;
  Communicator& communicator_;
  StateSync& state_;
  int accumulate_steps_;
  EmbeddingExchange* embeddings_;
  std::vector<plan::PassTask> tasks_;
  // Per stage, per pass and microbatch: the index of that pass in its device group's order.
  std::vector<std::vector<std::vector<int>>> pass_position_;
  int tag_stride_ = 1;
  int steps_run_ = 0;
  // The passes' time on the device, marked without waiting for it: on a GPU the host keeps
  // queueing work while transfers overlap it.
  accel::Timer fwd_timer_, bwd_timer_;
  double fwd_ms_ = 0, bwd_ms_ = 0, comm_ms_ = 0;
  HostTimes host_;  // summed over the steps
};

}  // namespace rannc::runtime
