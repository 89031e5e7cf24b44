#include "runtime/trainer.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "torch_side/accelerator.h"
#include "torch_side/torch_dtype.h"
#include "runtime/memory_tracker.h"
#include "support/error.h"

namespace rannc::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

c10::ScalarType scalar_type(const plan::Tensor& tensor) {
  return ir::to_scalar_type(*ir::parse_dtype(tensor.dtype)).value_or(c10::kFloat);
}

bool has_gradient(const plan::Tensor& tensor) { return ir::is_floating_point(*ir::parse_dtype(tensor.dtype)); }

// The shape of a piece: the tensor's shape with `length` samples along its batch dim.
std::vector<std::int64_t> piece_shape(const plan::Tensor& tensor, const SampleRange& range) {
  auto shape = tensor.shape;
  if (tensor.batch_dim >= 0) shape[static_cast<std::size_t>(tensor.batch_dim)] = range.length;
  return shape;
}

at::Tensor cut(const at::Tensor& tensor, int batch_dim, const SampleRange& range) {
  return batch_dim < 0 ? tensor : tensor.narrow(batch_dim, range.begin, range.length);
}

// The passes of the device group whose first stage is `first`, in the order it runs them.
std::vector<plan::PassTask> group_order(const plan::Plan& plan, int first) {
  if (plan.interleave > 1)
    return plan::group_passes(plan.pipeline_stages(), first, plan.interleave, plan.batch.microbatches);
  return plan::stage_passes(plan.schedule, plan.stages_after(first), plan.batch.microbatches);
}

// [pass][microbatch]: where each pass of `stage` comes in its device group's order.
std::vector<std::vector<int>> pass_positions(const plan::Plan& plan, int stage) {
  std::vector<std::vector<int>> positions(2, std::vector<int>(static_cast<std::size_t>(plan.batch.microbatches)));
  int groups = plan.pipeline_stages(), chunk = stage / groups;
  auto order = group_order(plan, stage % groups);
  for (std::size_t i = 0; i < order.size(); ++i)
    if (order[i].chunk == chunk)
      positions[static_cast<std::size_t>(order[i].pass)][static_cast<std::size_t>(order[i].microbatch)] = static_cast<int>(i);
  return positions;
}

}  // namespace

Trainer::Trainer(const plan::Plan& plan, const RankLayout& layout, int rank, std::vector<StageRunner*> runners,
                 TrainingData& data, Communicator& communicator, StateSync& state, int accumulate_steps,
                 EmbeddingExchange* embeddings)
    : plan_(plan),
      layout_(layout),
      rank_(rank),
      placement_(layout.placement(rank)),
      data_(data),
      communicator_(communicator),
      state_(state),
      accumulate_steps_(accumulate_steps),
      embeddings_(embeddings),
      tasks_(group_order(plan, placement_.stage)),
      fwd_timer_(runners.front()->device()),
      bwd_timer_(runners.front()->device()) {
  auto stages = layout.stages_of(rank);
  for (std::size_t c = 0; c < stages.size(); ++c) {
    const auto& stage = plan.stages.at(static_cast<std::size_t>(stages[c]));
    chunks_.push_back({&stage, runners.at(c), std::vector<std::vector<Consumer>>(stage.outputs.size())});
  }
  for (const auto& stage : plan.stages) {
    pass_position_.push_back(pass_positions(plan, stage.id));
    tag_stride_ = std::max(tag_stride_, static_cast<int>(stage.inputs.size()));
    for (std::size_t k = 0; k < stage.inputs.size(); ++k) {
      const auto& input = stage.inputs[k];
      for (auto& chunk : chunks_)
        if (!input.model_input && input.from_stage == chunk.stage->id)
          chunk.consumers.at(static_cast<std::size_t>(input.from_output)).push_back({stage.id, static_cast<int>(k)});
    }
  }
}

void check_messages(const plan::Plan& plan) {
  std::size_t inputs = 1;
  for (const auto& stage : plan.stages) inputs = std::max(inputs, stage.inputs.size());
  std::int64_t tags = std::int64_t{2} * plan.stage_count() * plan.batch.microbatches * static_cast<std::int64_t>(inputs);
  if (tags > std::numeric_limits<int>::max())
    throw InputError(plan.path + ": " + std::to_string(tags) + " message tags (stages x microbatches x inputs x 2) "
                     "exceed what a tag holds");
  // A rank's chunks would send to the rank itself, which Gloo and NCCL do not take.
  int groups = plan.pipeline_stages();
  for (const auto& stage : plan.stages)
    for (const auto& input : stage.inputs)
      if (input.from_stage >= 0 && input.from_stage % groups == stage.id % groups)
        throw InputError(plan.path + ": stage " + std::to_string(stage.id) + " reads '" + input.name + "' from stage " +
                         std::to_string(input.from_stage) + ", which runs on the same device group (interleave " +
                         std::to_string(plan.interleave) + "): rannc-run does not pass tensors between a rank's chunks yet");
}

// Messages between two ranks are told apart by the stage input they carry (forward) or carry the
// gradient of (backward): two of a rank's model chunks may talk to the same peer. Then by
// microbatch and direction.
int Trainer::tag(int stage, int microbatch, int input, plan::Pass pass) const {
  int message = (stage * plan_.batch.microbatches + microbatch) * tag_stride_ + input;
  return message * 2 + (pass == plan::Pass::kBackward ? 1 : 0);
}

// The stage whose pass takes a tagged message: the input's stage in forward, the stage that
// sent that input in backward.
Trainer::Tagged Trainer::tagged(int tag) const {
  int message = tag / 2, microbatches = plan_.batch.microbatches;
  int input = message % tag_stride_, stage = message / tag_stride_ / microbatches;
  plan::PassTask task{tag % 2 == 1 ? plan::Pass::kBackward : plan::Pass::kForward,
                      message / tag_stride_ % microbatches, 0};
  if (task.pass == plan::Pass::kBackward)
    stage = plan_.stages[static_cast<std::size_t>(stage)].inputs[static_cast<std::size_t>(input)].from_stage;
  return {stage, task};
}

// The pieces of the tensors a pass receives, their transfers started: for a forward pass each
// input's pieces from the replicas of the stage that computes it, for a backward pass each
// output's gradient pieces from the replicas of every stage it feeds. A tensor-parallel rank
// talks to the same tensor rank of the other stage (every stage rannc-run trains has one
// degree): each rank of a group holds the whole of what its stage sends and receives.
std::vector<Trainer::Incoming> Trainer::start_receives(const plan::PassTask& task) {
  const Chunk& chunk = chunks_.at(static_cast<std::size_t>(task.chunk));
  const plan::Stage& stage = *chunk.stage;
  std::vector<Incoming> incoming;
  auto start = [&](std::size_t slot, const plan::Tensor& tensor, int peer_stage, const Piece& piece,
                   const SampleRange& range, int receiving_stage, int input) {
    int peer = layout_.rank_of(peer_stage, placement_.pipeline, piece.peer_replica, placement_.tensor_rank);
    incoming.push_back({slot, peer_stage, range,
                        communicator_.start_receive(piece_shape(tensor, range), scalar_type(tensor), peer,
                                                    tag(receiving_stage, task.microbatch, input, task.pass))});
  };
  if (task.pass == plan::Pass::kForward) {
    for (std::size_t k = 0; k < stage.inputs.size(); ++k) {
      const auto& input = stage.inputs[k];
      if (input.model_input || input.embedding) continue;
      for (const auto& piece : layout_.pieces_from(stage.id, placement_.replica, input.from_stage, input.batch_dim >= 0))
        start(k, input, input.from_stage, piece, piece.at_receiver, stage.id, static_cast<int>(k));
    }
    return incoming;
  }
  for (std::size_t o = 0; o < stage.outputs.size(); ++o) {
    const auto& output = stage.outputs[o];
    if (!has_gradient(output)) continue;
    for (const auto& consumer : chunk.consumers[o])
      for (const auto& piece : layout_.pieces_to(stage.id, placement_.replica, consumer.stage, output.batch_dim >= 0))
        start(o, output, consumer.stage, piece, piece.at_sender, consumer.stage, consumer.input);
  }
  return incoming;
}

// A message from a peer comes from one of its passes: every pass before it in the peer's order,
// and the pass itself, has received what it needed, so the sends to that peer they consumed are
// delivered and their tensors can go. (Waiting for any other send could deadlock.)
at::Tensor Trainer::finish_receive(Incoming& piece, const plan::PassTask& task) {
  auto received = communicator_.finish(piece.receive);
  const auto& positions = pass_position_[static_cast<std::size_t>(piece.peer_stage)];
  int done = positions[static_cast<std::size_t>(task.pass)][static_cast<std::size_t>(task.microbatch)];
  communicator_.wait_for_sends_to(piece.receive.peer, [&](int sent_tag) {
    // The peer's pass that takes it: on the stage the tag names, in the same device group's order.
    auto sent = tagged(sent_tag);
    const auto& taken = pass_position_[static_cast<std::size_t>(sent.stage)];
    return taken[static_cast<std::size_t>(sent.task.pass)][static_cast<std::size_t>(sent.task.microbatch)] <= done;
  });
  return received;
}

std::vector<at::Tensor> Trainer::gather_inputs(const Chunk& chunk, const plan::PassTask& task,
                                               std::vector<Incoming>& incoming) {
  std::vector<at::Tensor> inputs;
  for (std::size_t k = 0; k < chunk.stage->inputs.size(); ++k) {
    const auto& input = chunk.stage->inputs[k];
    if (input.model_input) {
      inputs.push_back(data_.rows(*input.model_input, task.microbatch));
      continue;
    }
    if (input.embedding) {
      inputs.push_back(embeddings_->pooled(*input.embedding));
      continue;
    }
    std::vector<at::Tensor> pieces;
    for (auto& piece : incoming)
      if (piece.slot == k) pieces.push_back(finish_receive(piece, task));
    inputs.push_back(pieces.size() == 1 ? pieces.front() : at::cat(pieces, input.batch_dim));
  }
  return inputs;
}

void Trainer::send_outputs(const Chunk& chunk, int microbatch, const std::vector<at::Tensor>& outputs) {
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    for (const auto& consumer : chunk.consumers[o]) {
      const auto& input = plan_.stages[static_cast<std::size_t>(consumer.stage)].inputs[static_cast<std::size_t>(consumer.input)];
      for (const auto& piece : layout_.pieces_to(chunk.stage->id, placement_.replica, consumer.stage, input.batch_dim >= 0)) {
        int peer = layout_.rank_of(consumer.stage, placement_.pipeline, piece.peer_replica, placement_.tensor_rank);
        // In the plan's dtype, which the receiver expects: a bf16 output of autocast goes as fp32, exactly.
        communicator_.send(cut(outputs[o].detach().to(scalar_type(input)), input.batch_dim, piece.at_sender), peer,
                           tag(consumer.stage, microbatch, consumer.input, plan::Pass::kForward));
      }
    }
  }
}

// The gradient of each output: the sum over the stages it feeds, each piece added where its
// replica's samples sit. Undefined where nothing sends one (integers, unused outputs).
std::vector<at::Tensor> Trainer::gather_output_grads(const Chunk& chunk, const plan::PassTask& task,
                                                     std::vector<Incoming>& incoming) {
  std::vector<at::Tensor> grads(chunk.stage->outputs.size());
  for (auto& piece : incoming) {
    const auto& output = chunk.stage->outputs[piece.slot];
    auto part = finish_receive(piece, task);
    auto& grad = grads[piece.slot];
    if (!grad.defined())
      // This replica's samples: a stage that a mixed cluster's kinds share gives its replicas unequal ones.
      grad = at::zeros(piece_shape(output, layout_.replica_slice(chunk.stage->id, placement_.replica)),
                       at::TensorOptions().dtype(scalar_type(output)).device(chunk.runner->device()));
    cut(grad, output.batch_dim, piece.range).add_(part);
  }
  return grads;
}

void Trainer::send_input_grads(const Chunk& chunk, int microbatch, const std::vector<at::Tensor>& grads) {
  const plan::Stage& stage = *chunk.stage;
  for (std::size_t k = 0; k < stage.inputs.size(); ++k) {
    const auto& input = stage.inputs[k];
    if (input.embedding && grads[k].defined()) embeddings_->add_gradient(*input.embedding, grads[k]);
    if (input.model_input || input.embedding || !has_gradient(input)) continue;
    // The sender waits for a gradient of every float it sent, used or not.
    auto grad = grads[k].defined() ? grads[k].to(scalar_type(input))
                                   : at::zeros(piece_shape(input, layout_.replica_slice(stage.id, placement_.replica)),
                                               at::TensorOptions().dtype(scalar_type(input)).device(chunk.runner->device()));
    for (const auto& piece : layout_.pieces_from(stage.id, placement_.replica, input.from_stage, input.batch_dim >= 0)) {
      int peer = layout_.rank_of(input.from_stage, placement_.pipeline, piece.peer_replica, placement_.tensor_rank);
      communicator_.send(cut(grad, input.batch_dim, piece.at_receiver), peer,
                         tag(stage.id, microbatch, static_cast<int>(k), plan::Pass::kBackward));
    }
  }
}

// One global batch: the stage's passes in schedule order. Adds the loss of this rank's
// microbatches to `loss_sum` (StageRunner::forward). Where the backend allows, the next pass's
// receives start before this pass computes, so its transfers overlap the computation.
void Trainer::run_passes(at::Tensor& loss_sum) {
  const bool early = communicator_.receives_start_early();
  std::vector<Incoming> incoming;
  if (!tasks_.empty()) incoming = start_receives(tasks_.front());
  for (std::size_t i = 0; i < tasks_.size(); ++i) {
    const auto& task = tasks_[i];
    std::vector<Incoming> ready = std::move(incoming);
    incoming.clear();
    auto start_next = [&] {
      if (i + 1 < tasks_.size()) incoming = start_receives(tasks_[i + 1]);
    };
    run_pass(task, ready, loss_sum, early ? start_next : std::function<void()>());
    if (!early) start_next();
  }
  communicator_.wait_for_sends();
}

// One pass of one of the rank's chunks; `start_next` (when given) starts the next pass's receives
// once this pass has what it needs, before it computes.
void Trainer::run_pass(const plan::PassTask& task, std::vector<Incoming>& ready, at::Tensor& loss_sum,
                       const std::function<void()>& start_next) {
  const Chunk& chunk = chunks_.at(static_cast<std::size_t>(task.chunk));
  if (task.pass == plan::Pass::kForward) {
    auto inputs = gather_inputs(chunk, task, ready);
    if (start_next) start_next();
    fwd_timer_.start();
    auto outputs = chunk.runner->forward(task.microbatch, std::move(inputs), loss_sum);
    fwd_timer_.stop();
    send_outputs(chunk, task.microbatch, outputs);
  } else {
    auto grads = gather_output_grads(chunk, task, ready);
    if (start_next) start_next();
    bwd_timer_.start();
    auto input_grads = chunk.runner->backward(task.microbatch, grads);
    bwd_timer_.stop();
    send_input_grads(chunk, task.microbatch, input_grads);
  }
}

// The gradients of `accumulate_steps_` global batches add up before the one optimizer step.
StepRecord Trainer::run_step(int step) {
  auto start = Clock::now();
  auto lap = start;
  auto add_lap = [&lap](double& ms) {
    auto now = Clock::now();
    ms += std::chrono::duration<double, std::milli>(now - lap).count();
    lap = now;
  };
  for (auto& chunk : chunks_) {
    chunk.runner->zero_gradients();
    chunk.runner->begin_step();
  }
  add_lap(host_.optimizer_ms);
  at::Tensor loss_sum;  // this rank's microbatches' losses, on its device
  for (int k = 0; k < accumulate_steps_; ++k) {
    data_.load_step(static_cast<std::int64_t>(step) * accumulate_steps_ + k);
    add_lap(host_.data_ms);
    if (embeddings_) {
      std::vector<at::Tensor> index_inputs;
      for (const auto& name : embeddings_->index_inputs()) index_inputs.push_back(data_.rows(name, 0));
      embeddings_->forward(index_inputs);
    }
    run_passes(loss_sum);
    if (embeddings_) embeddings_->backward();
    add_lap(host_.passes_ms);
  }
  for (auto& chunk : chunks_) chunk.runner->end_step();
  double grad_norm = state_.step(step);
  if (embeddings_) embeddings_->step(state_.lr_at(step));
  add_lap(host_.optimizer_ms);
  // Read once the host has issued the whole step. Ranks without the loss add 0, and a
  // tensor-parallel group, whose ranks all compute it, counts it once.
  double loss = loss_sum.defined() && placement_.tensor_rank == 0 ? loss_sum.item<double>() : 0;
  if (layout_.world_size() > 1) loss = communicator_.sum_over_world(loss);
  comm_ms_ += communicator_.take_wait_ms();
  ++steps_run_;
  accel::synchronize(chunks_.front().runner->device());
  add_lap(host_.wait_ms);
  fwd_ms_ += fwd_timer_.take_ms();
  bwd_ms_ += bwd_timer_.take_ms();
  return {step, loss, ms_since(start), grad_norm, state_.lr_at(step)};
}

RankRecord Trainer::record() const {
  double steps = std::max(steps_run_, 1);
  // A GPU's peak is the caching allocator's, of the device memory the plan predicts.
  const auto& device = chunks_.front().runner->device();
  std::int64_t peak = device.is_cpu() ? peak_tensor_bytes() : accel::peak_allocated_bytes(device);
  std::int64_t offload_bytes = 0;
  for (const auto& chunk : chunks_) offload_bytes += chunk.runner->offload_bytes();
  RankRecord record{rank_, placement_.stage, peak, offload_bytes, state_.stepped_elements(), data_.bytes_read(),
                    fwd_ms_ / steps, bwd_ms_ / steps, comm_ms_ / steps,
                    {host_.data_ms / steps, host_.passes_ms / steps, host_.optimizer_ms / steps, host_.wait_ms / steps},
                    std::nullopt};
  if (embeddings_) {
    record.embeddings = embeddings_->record();  // bytes over the run, times per step
    for (double* ms : {&record.embeddings->lookup_ms, &record.embeddings->index_ms, &record.embeddings->pooled_ms,
                       &record.embeddings->grad_ms, &record.embeddings->allreduce_ms})
      *ms /= steps;
  }
  return record;
}

}  // namespace rannc::runtime
