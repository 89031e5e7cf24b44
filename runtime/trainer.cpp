#include "runtime/trainer.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>

#include "torch_side/accelerator.h"
#include "torch_side/torch_dtype.h"
#include "runtime/memory_tracker.h"

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

}  // namespace

Trainer::Trainer(const plan::Plan& plan, const RankLayout& layout, int rank, StageRunner& runner, TrainingData& data,
                 Communicator& communicator, StateSync& state, int accumulate_steps, EmbeddingExchange* embeddings)
    : plan_(plan),
      layout_(layout),
      stage_(plan.stages.at(static_cast<std::size_t>(layout.placement(rank).stage))),
      rank_(rank),
      placement_(layout.placement(rank)),
      runner_(runner),
      data_(data),
      communicator_(communicator),
      state_(state),
      accumulate_steps_(accumulate_steps),
      embeddings_(embeddings),
      tasks_(plan::stage_passes(plan.schedule, plan.stages_after(stage_.id), plan.batch.microbatches)),
      consumers_(stage_.outputs.size()),
      fwd_timer_(runner.device()),
      bwd_timer_(runner.device()) {
  for (const auto& stage : plan.stages) {
    auto& positions = pass_position_.emplace_back(2, std::vector<int>(static_cast<std::size_t>(plan.batch.microbatches)));
    auto order = plan::stage_passes(plan.schedule, plan.stages_after(stage.id), plan.batch.microbatches);
    for (std::size_t i = 0; i < order.size(); ++i)
      positions[static_cast<std::size_t>(order[i].pass)][static_cast<std::size_t>(order[i].microbatch)] = static_cast<int>(i);
    tag_stride_ = std::max(tag_stride_, static_cast<int>(stage.inputs.size()));
    for (std::size_t k = 0; k < stage.inputs.size(); ++k) {
      const auto& input = stage.inputs[k];
      if (!input.model_input && input.from_stage == stage_.id)
        consumers_.at(static_cast<std::size_t>(input.from_output)).push_back({stage.id, static_cast<int>(k)});
    }
  }
}

// Messages between two ranks are told apart by microbatch, receiving input and direction.
int Trainer::tag(int microbatch, int input, plan::Pass pass) const {
  return (microbatch * tag_stride_ + input) * 2 + (pass == plan::Pass::kBackward ? 1 : 0);
}

plan::PassTask Trainer::pass_of_tag(int tag) const {
  return {tag % 2 == 1 ? plan::Pass::kBackward : plan::Pass::kForward, tag / 2 / tag_stride_};
}

// The pieces of the tensors a pass receives, their transfers started: for a forward pass each
// input's pieces from the replicas of the stage that computes it, for a backward pass each
// output's gradient pieces from the replicas of every stage it feeds. A tensor-parallel rank
// talks to the same tensor rank of the other stage (every stage rannc-run trains has one
// degree): each rank of a group holds the whole of what its stage sends and receives.
std::vector<Trainer::Incoming> Trainer::start_receives(const plan::PassTask& task) {
  std::vector<Incoming> incoming;
  auto start = [&](std::size_t slot, const plan::Tensor& tensor, int peer_stage, const Piece& piece,
                   const SampleRange& range, int input) {
    int peer = layout_.rank_of(peer_stage, placement_.pipeline, piece.peer_replica, placement_.tensor_rank);
    incoming.push_back({slot, peer_stage, range,
                        communicator_.start_receive(piece_shape(tensor, range), scalar_type(tensor), peer,
                                                    tag(task.microbatch, input, task.pass))});
  };
  if (task.pass == plan::Pass::kForward) {
    for (std::size_t k = 0; k < stage_.inputs.size(); ++k) {
      const auto& input = stage_.inputs[k];
      if (input.model_input || input.embedding) continue;
      for (const auto& piece : layout_.pieces_from(stage_.id, placement_.replica, input.from_stage, input.batch_dim >= 0))
        start(k, input, input.from_stage, piece, piece.at_receiver, static_cast<int>(k));
    }
    return incoming;
  }
  for (std::size_t o = 0; o < stage_.outputs.size(); ++o) {
    const auto& output = stage_.outputs[o];
    if (!has_gradient(output)) continue;
    for (const auto& consumer : consumers_[o])
      for (const auto& piece : layout_.pieces_to(stage_.id, placement_.replica, consumer.stage, output.batch_dim >= 0))
        start(o, output, consumer.stage, piece, piece.at_sender, consumer.input);
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
    auto sent = pass_of_tag(sent_tag);
    return positions[static_cast<std::size_t>(sent.pass)][static_cast<std::size_t>(sent.microbatch)] <= done;
  });
  return received;
}

std::vector<at::Tensor> Trainer::gather_inputs(const plan::PassTask& task, std::vector<Incoming>& incoming) {
  std::vector<at::Tensor> inputs;
  for (std::size_t k = 0; k < stage_.inputs.size(); ++k) {
    const auto& input = stage_.inputs[k];
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

void Trainer::send_outputs(int microbatch, const std::vector<at::Tensor>& outputs) {
  for (std::size_t o = 0; o < outputs.size(); ++o) {
    for (const auto& consumer : consumers_[o]) {
      const auto& input = plan_.stages[static_cast<std::size_t>(consumer.stage)].inputs[static_cast<std::size_t>(consumer.input)];
      for (const auto& piece : layout_.pieces_to(stage_.id, placement_.replica, consumer.stage, input.batch_dim >= 0)) {
        int peer = layout_.rank_of(consumer.stage, placement_.pipeline, piece.peer_replica, placement_.tensor_rank);
        // In the plan's dtype, which the receiver expects: a bf16 output of autocast goes as fp32, exactly.
        communicator_.send(cut(outputs[o].detach().to(scalar_type(input)), input.batch_dim, piece.at_sender), peer,
                           tag(microbatch, consumer.input, plan::Pass::kForward));
      }
    }
  }
}

// The gradient of each output: the sum over the stages it feeds, each piece added where its
// replica's samples sit. Undefined where nothing sends one (integers, unused outputs).
std::vector<at::Tensor> Trainer::gather_output_grads(const plan::PassTask& task, std::vector<Incoming>& incoming) {
  std::vector<at::Tensor> grads(stage_.outputs.size());
  for (auto& piece : incoming) {
    const auto& output = stage_.outputs[piece.slot];
    auto part = finish_receive(piece, task);
    auto& grad = grads[piece.slot];
    if (!grad.defined()) grad = at::zeros(output.shape, at::TensorOptions().dtype(scalar_type(output)).device(runner_.device()));
    cut(grad, output.batch_dim, piece.range).add_(part);
  }
  return grads;
}

void Trainer::send_input_grads(int microbatch, const std::vector<at::Tensor>& grads) {
  for (std::size_t k = 0; k < stage_.inputs.size(); ++k) {
    const auto& input = stage_.inputs[k];
    if (input.embedding && grads[k].defined()) embeddings_->add_gradient(*input.embedding, grads[k]);
    if (input.model_input || input.embedding || !has_gradient(input)) continue;
    // The sender waits for a gradient of every float it sent, used or not.
    auto grad = grads[k].defined() ? grads[k].to(scalar_type(input))
                                   : at::zeros(input.shape, at::TensorOptions().dtype(scalar_type(input)).device(runner_.device()));
    for (const auto& piece : layout_.pieces_from(stage_.id, placement_.replica, input.from_stage, input.batch_dim >= 0)) {
      int peer = layout_.rank_of(input.from_stage, placement_.pipeline, piece.peer_replica, placement_.tensor_rank);
      communicator_.send(cut(grad, input.batch_dim, piece.at_receiver), peer,
                         tag(microbatch, static_cast<int>(k), plan::Pass::kBackward));
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
    if (task.pass == plan::Pass::kForward) {
      auto inputs = gather_inputs(task, ready);
      if (early) start_next();
      fwd_timer_.start();
      auto outputs = runner_.forward(task.microbatch, std::move(inputs), loss_sum);
      fwd_timer_.stop();
      send_outputs(task.microbatch, outputs);
    } else {
      auto grads = gather_output_grads(task, ready);
      if (early) start_next();
      bwd_timer_.start();
      auto input_grads = runner_.backward(task.microbatch, grads);
      bwd_timer_.stop();
      send_input_grads(task.microbatch, input_grads);
    }
    if (!early) start_next();
  }
  communicator_.wait_for_sends();
}

// The gradients of `accumulate_steps_` global batches add up before the one optimizer step.
StepRecord Trainer::run_step(int step) {
  auto start = Clock::now();
  runner_.zero_gradients();
  runner_.begin_step();
  at::Tensor loss_sum;  // this rank's microbatches' losses, on its device
  for (int k = 0; k < accumulate_steps_; ++k) {
    data_.load_step(static_cast<std::int64_t>(step) * accumulate_steps_ + k);
    if (embeddings_) {
      std::vector<at::Tensor> index_inputs;
      for (const auto& name : embeddings_->index_inputs()) index_inputs.push_back(data_.rows(name, 0));
      embeddings_->forward(index_inputs);
    }
    run_passes(loss_sum);
    if (embeddings_) embeddings_->backward();
  }
  runner_.end_step();
  double grad_norm = state_.step(step);
  if (embeddings_) embeddings_->step(state_.lr_at(step));
  // Read once the host has issued the whole step. Ranks without the loss add 0, and a
  // tensor-parallel group, whose ranks all compute it, counts it once.
  double loss = loss_sum.defined() && placement_.tensor_rank == 0 ? loss_sum.item<double>() : 0;
  if (layout_.world_size() > 1) loss = communicator_.sum_over_world(loss);
  comm_ms_ += communicator_.take_wait_ms();
  ++steps_run_;
  accel::synchronize(runner_.device());
  fwd_ms_ += fwd_timer_.take_ms();
  bwd_ms_ += bwd_timer_.take_ms();
  return {step, loss, ms_since(start), grad_norm, state_.lr_at(step)};
}

RankRecord Trainer::record() const {
  double steps = std::max(steps_run_, 1);
  // A GPU's peak is the caching allocator's, of the device memory the plan predicts.
  std::int64_t peak = runner_.device().is_cpu() ? peak_tensor_bytes() : accel::peak_allocated_bytes(runner_.device());
  RankRecord record{rank_, stage_.id, peak, runner_.offload_bytes(), state_.stepped_elements(), data_.bytes_read(),
                    fwd_ms_ / steps, bwd_ms_ / steps, comm_ms_ / steps, std::nullopt};
  if (embeddings_) {
    record.embeddings = embeddings_->record();  // bytes over the run, times per step
    for (double* ms : {&record.embeddings->lookup_ms, &record.embeddings->index_ms, &record.embeddings->pooled_ms,
                       &record.embeddings->grad_ms, &record.embeddings->allreduce_ms})
      *ms /= steps;
  }
  return record;
}

}  // namespace rannc::runtime
