// The profiler: times and measures ops of a TorchScript model one at a time with libtorch,
// and whole training steps for comparison. Part of the torch plugin. It runs on the GPU when
// there is one (accelerator.h; RANNC_PROFILE_DEVICE=cpu keeps it on the CPU): CUDA events time
// each pass, the caching allocator's figures give its memory; else on the CPU with the clock and
// a counting allocator.
//
// Each op is cloned into a graph of its own whose inputs are the values a forward pass of the
// model gives it (constants stay constants), then run forward and backward a few times. Memory
// comes from a counting CPU allocator installed for the profile run: it must hand out DataPtrs
// whose data equals their context, or oneDNN convolutions assert (TOOLCHAIN.md, section 5).
#include <ATen/Parallel.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/mse_loss.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/runtime/interpreter.h>
#include <torch/version.h>

#include <ATen/Context.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <fstream>
#include <limits>
#include <mutex>
#include <unordered_map>

#include "compiler/torch_plugin.h"
#include "torch_side/accelerator.h"
#include "torch_side/device_constants.h"
#include "torch_side/torch_version.h"
#include "frontends/torchscript/torchscript_source.h"
#include "support/error.h"

namespace rannc {
namespace {

using torch::jit::Node;
using torch::jit::Value;
using Clock = std::chrono::steady_clock;

double elapsed_ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// Where ops are profiled: the first GPU when there is one, unless RANNC_PROFILE_DEVICE=cpu.
c10::Device profile_device() {
  static const c10::Device device = [] {
    const char* choice = std::getenv("RANNC_PROFILE_DEVICE");
    bool cpu = choice && std::string(choice) == "cpu";
    if (cpu || !accel::cuda_available()) return c10::Device(c10::DeviceType::CPU);
    c10::Device gpu(c10::DeviceType::CUDA, 0);
    accel::set_current_device(gpu);
    // fp32 in fp32, as the runtime computes it (no TF32).
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setAllowTF32CuDNN(false);
    return gpu;
  }();
  return device;
}

// Counts the bytes allocated on the CPU: current and peak since the last reset.
class CountingAllocator final : public c10::Allocator {
 public:
  RANNC_ALLOCATOR_ALLOCATE(bytes) {
    void* data = c10::alloc_cpu(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    sizes_[data] = bytes;
    current_ += static_cast<std::int64_t>(bytes);
    peak_ = std::max(peak_, current_);
    return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  RANNC_ALLOCATOR_COPY_DATA

  std::int64_t current() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_;
  }
  std::int64_t peak() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return peak_;
  }
  void reset_peak() {
    std::lock_guard<std::mutex> lock(mutex_);
    peak_ = current_;
  }

  static CountingAllocator& installed() {
    static CountingAllocator* allocator = [] {
      auto* a = new CountingAllocator();  // lives as long as any tensor it allocated
      c10::SetCPUAllocator(a, /*priority=*/100);
      return a;
    }();
    return *allocator;
  }

 private:
  static void release(void* data) {
    auto& self = installed();
    {
      std::lock_guard<std::mutex> lock(self.mutex_);
      auto it = self.sizes_.find(data);
      if (it != self.sizes_.end()) {
        self.current_ -= static_cast<std::int64_t>(it->second);
        self.sizes_.erase(it);
      }
    }
    c10::free_cpu(data);
  }

  mutable std::mutex mutex_;
  mutable std::unordered_map<void*, size_t> sizes_;
  mutable std::int64_t current_ = 0, peak_ = 0;
};

// Tensor memory where the profile runs: the counting CPU allocator, or the GPU's caching allocator.
class MemoryMeter {
 public:
  explicit MemoryMeter(const c10::Device& device) : device_(device) {
    if (device_.is_cpu()) CountingAllocator::installed();
  }
  std::int64_t current() const {
    return device_.is_cpu() ? CountingAllocator::installed().current() : accel::allocated_bytes(device_);
  }
  std::int64_t peak() const {
    return device_.is_cpu() ? CountingAllocator::installed().peak() : accel::peak_allocated_bytes(device_);
  }
  void reset_peak() {
    if (device_.is_cpu()) CountingAllocator::installed().reset_peak();
    else accel::reset_peak_memory(device_);
  }

 private:
  c10::Device device_;
};

std::string cpu_description() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return model + ", " + std::to_string(at::get_num_threads()) + " threads, libtorch " + TORCH_VERSION;
}

template <typename Body>
double median_ms(int reps, Body body) {
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    body();
    times.push_back(elapsed_ms(start));
  }
  return median(times);
}

// The fastest of `reps` runs: what the hardware can do, since other work on a shared machine
// only ever slows a run down.
template <typename Body>
double fastest_ms(int reps, Body body) {
  double fastest = std::numeric_limits<double>::infinity();
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    body();
    fastest = std::min(fastest, elapsed_ms(start));
  }
  return fastest;
}

// The same as median_ms, timed on `device` (CUDA events on a GPU).
template <typename Body>
double median_device_ms(const c10::Device& device, int reps, Body body) {
  accel::Timer timer(device);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    timer.start();
    body();
    times.push_back(timer.stop_ms());
  }
  return median(times);
}

// A value as an op input for profiling: tensors detached from the recording, with a fresh
// gradient slot when the model computes a gradient for them.
c10::IValue prepared(const c10::IValue& recorded, bool requires_grad, const c10::Device& device) {
  auto prepare = [&](const at::Tensor& t) {
    at::Tensor copy = t.detach();
    if (copy.defined() && copy.device().is_cpu() && !device.is_cpu()) copy = copy.to(device);
    if (requires_grad && copy.is_floating_point()) copy.requires_grad_(true);
    return copy;
  };
  if (recorded.isTensor()) return prepare(recorded.toTensor());
  if (recorded.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : recorded.toTensorVector()) list.push_back(prepare(t));
    return list;
  }
  return recorded;
}

void collect_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) out.push_back(value.toTensor());
  else if (value.isTensorList()) for (const at::Tensor& t : value.toTensorVector()) out.push_back(t);
  else if (value.isTuple()) for (const auto& e : value.toTupleRef().elements()) collect_tensors(e, out);
  else if (value.isList()) for (const auto& e : value.toListRef()) collect_tensors(e, out);
}

// Between repetitions an activation input loses its gradient, as in the model, where it is not
// a leaf; a weight keeps its .grad, so backward adds into it as every step after the first does.
void reset_activation_grads(const torch::jit::Stack& inputs, const std::vector<bool>& is_weight) {
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (is_weight[i]) continue;
    std::vector<at::Tensor> tensors;
    collect_tensors(inputs[i], tensors);
    for (auto& t : tensors) {
      if (t.requires_grad()) t.mutable_grad().reset();
    }
  }
}

// One op in a graph of its own, with the inputs a forward pass of the model gives it.
class SingleOp {
 public:
  SingleOp(Node* node, const std::unordered_map<const Value*, c10::IValue>& values,
           const std::function<bool(std::size_t)>& input_requires_grad, const std::function<bool(std::size_t)>& input_is_weight,
           const c10::Device& device) {
    auto graph = std::make_shared<torch::jit::Graph>();
    std::unordered_map<Value*, Value*> env;
    for (std::size_t i = 0; i < node->inputs().size(); ++i) {
      Value* input = node->inputs()[i];
      if (env.count(input)) continue;
      if (input->node()->kind() == c10::prim::Constant) {
        env[input] = graph->appendNode(graph->createClone(input->node(), [](Value* v) { return v; }))->output();
        continue;
      }
      env[input] = graph->addInput()->setType(input->type());
      inputs_.push_back(prepared(values.at(input), input_requires_grad(i), device));
      is_weight_.push_back(input_is_weight(i));
    }
    Node* clone = graph->appendNode(graph->createClone(node, [&](Value* v) { return env.at(v); }));
    std::string kind = node->kind().toQualString();
    in_place_ = kind.size() > 1 && kind.back() == '_';
    for (Value* output : clone->outputs()) graph->registerOutput(output);
    if (!device.is_cpu()) retarget_device_constants(graph->block(), device);
    code_ = std::make_unique<torch::jit::Code>(graph, "profile");
  }

  // The inputs of one run. An in-place op (relu_, add_) writes into its first input, which
  // autograd refuses for a leaf that requires grad, so it gets a fresh copy, as in the model,
  // where that input is some earlier op's output.
  torch::jit::Stack fresh_inputs() const {
    torch::jit::Stack stack = inputs_;
    if (in_place_ && !stack.empty() && stack.front().isTensor()) stack.front() = stack.front().toTensor().clone();
    return stack;
  }

  torch::jit::Stack run(torch::jit::Stack stack) const {
    torch::jit::InterpreterState(*code_).run(stack);
    return stack;
  }

  void clear_activation_grads() const { reset_activation_grads(inputs_, is_weight_); }

 private:
  torch::jit::Stack inputs_;
  std::vector<bool> is_weight_;
  bool in_place_ = false;
  std::unique_ptr<torch::jit::Code> code_;
};

struct Differentiable {
  std::vector<at::Tensor> outputs, grads;
};

Differentiable differentiable_outputs(const torch::jit::Stack& outputs) {
  Differentiable d;
  std::vector<at::Tensor> tensors;
  for (const auto& output : outputs) collect_tensors(output, tensors);
  for (const auto& t : tensors) {
    if (!t.defined() || !t.requires_grad()) continue;
    d.outputs.push_back(t);
    d.grads.push_back(at::ones_like(t));
  }
  return d;
}

constexpr double kSlowOpMs = 200;  // ops slower than this are timed fewer times

// The medians of repetitions of a forward and a backward pass, timed on the device (CUDA events
// on a GPU) and by the host's clock, with the memory each pass allocates (the allocators count
// on the host, so reading them never waits for a GPU).
struct Passes {
  double fwd_ms = 0, bwd_ms = 0;            // on the device
  double fwd_host_ms = 0, bwd_host_ms = 0;  // the host's time to issue each pass
  double host_ms = 0;                       // the host's time for all the repetitions
  bool has_backward = false;                // whether an output needs a gradient (in every repetition alike)
  bool stayed_behind_backlog = true;        // see run_passes' `backlog_end`
  std::int64_t fwd_peak_bytes = 0, retained_bytes = 0, bwd_peak_bytes = 0;
  int reps = 0;
};

// `reps` repetitions of the passes of `run` on what `prepare` gives it (untimed), back to back
// without waiting for a GPU, as a step issues its ops; after a warm-up when `warm_up` (which cuts
// `reps` to 3 for a slow op). With `backlog_end`, whether the device was still busy with work
// queued before them when the last pass had been issued.
template <typename Prepare, typename Run>
Passes run_passes(int reps, bool warm_up, const c10::Device& device, Prepare prepare, Run run,
                  const accel::Marker* backlog_end = nullptr) {
  MemoryMeter allocator(device);
  accel::Timer fwd_timer(device), bwd_timer(device);
  Passes p;
  std::vector<double> fwd_host, bwd_host;
  auto warm_start = Clock::now(), start = warm_start;
  for (int rep = warm_up ? -1 : 0; rep < reps; ++rep) {  // rep -1 is the warm-up
    torch::jit::Stack inputs = prepare();
    std::int64_t base = allocator.current();
    allocator.reset_peak();
    auto host_start = Clock::now();
    fwd_timer.start();
    torch::jit::Stack outputs = run(std::move(inputs));
    fwd_timer.stop();
    fwd_host.push_back(elapsed_ms(host_start));
    p.fwd_peak_bytes = allocator.peak() - base;
    p.retained_bytes = allocator.current() - base;
    Differentiable d = differentiable_outputs(outputs);
    p.has_backward = !d.outputs.empty();
    std::int64_t before_bwd = allocator.current();
    allocator.reset_peak();
    host_start = Clock::now();
    bwd_timer.start();
    if (p.has_backward) torch::autograd::backward(d.outputs, d.grads);
    bwd_timer.stop();
    bwd_host.push_back(elapsed_ms(host_start));
    p.bwd_peak_bytes = allocator.peak() - before_bwd;
    if (rep < 0) {
      accel::synchronize(device);
      if (elapsed_ms(warm_start) > kSlowOpMs) reps = std::min(reps, 3);
      fwd_timer.take_ms(), bwd_timer.take_ms(), fwd_host.clear(), bwd_host.clear();
      start = Clock::now();
    }
  }
  p.host_ms = elapsed_ms(start);
  if (backlog_end) p.stayed_behind_backlog = !backlog_end->reached();
  p.fwd_ms = median(fwd_timer.take_each_ms());
  p.bwd_ms = p.has_backward ? median(bwd_timer.take_each_ms()) : 0;
  p.fwd_host_ms = median(fwd_host);
  p.bwd_host_ms = p.has_backward ? median(bwd_host) : 0;
  p.reps = reps;
  return p;
}

// Work for a GPU to be busy with for about `ms`: fp32 matrix products queued on its current
// stream, so that what the host queues next runs back to back however slowly it was issued.
void queue_backlog(const c10::Device& device, double ms) {
  struct Operands {
    at::Tensor a, b, product;
    double product_ms = 0;
  };
  // Made once and never freed: a GPU tensor freed at exit can outlive the CUDA runtime.
  static Operands* operands = [&] {
    auto* o = new Operands();
    auto on = at::TensorOptions().device(device);
    o->a = at::randn({1024, 1024}, on), o->b = at::randn({1024, 1024}, on), o->product = at::empty({1024, 1024}, on);
    at::mm_out(o->product, o->a, o->b);
    accel::Timer timer(device);
    timer.start();
    for (int i = 0; i < 20; ++i) at::mm_out(o->product, o->a, o->b);
    o->product_ms = timer.stop_ms() / 20;
    return o;
  }();
  auto products = static_cast<int>(std::ceil(ms / std::max(operands->product_ms, 1e-3)));
  for (int i = 0; i < products; ++i) at::mm_out(operands->product, operands->a, operands->b);
}

// The host's time to issue an op's pass alone that issuing it within a step does not cost: a
// graph of its own run by an interpreter of its own, a backward call of its own (the autograd
// engine hands a GPU's backward to a thread of its own and waits for it: about 45 us on an H200
// host against a few for a node within a step's backward). Measured as chains of 1 and of 17
// transposes (views: no kernels) on the GPU: what one costs beyond the marginal op.
struct CallOverhead {
  double fwd_ms = 0, bwd_ms = 0;
};

const CallOverhead& call_overhead(const c10::Device& device) {
  static const CallOverhead overhead = [&] {
    auto chain_host_ms = [&](int length) {
      std::string ir = "graph(%x0 : Tensor):\n  %zero : int = prim::Constant[value=0]()\n"
                       "  %one : int = prim::Constant[value=1]()\n";
      for (int i = 0; i < length; ++i)
        ir += "  %x" + std::to_string(i + 1) + " : Tensor = aten::transpose(%x" + std::to_string(i) + ", %zero, %one)\n";
      ir += "  return (%x" + std::to_string(length) + ")\n";
      auto graph = std::make_shared<torch::jit::Graph>();
      torch::jit::parseIR(ir, graph.get());
      torch::jit::Code code(graph, "call overhead");
      at::Tensor x = at::randn({4, 8}, at::TensorOptions().device(device)).requires_grad_(true);
      return run_passes(
          25, /*warm_up=*/true, device,
          [&] {
            x.mutable_grad().reset();
            return torch::jit::Stack{x};
          },
          [&](torch::jit::Stack stack) {
            torch::jit::InterpreterState(code).run(stack);
            return stack;
          });
    };
    constexpr int kLong = 17;
    Passes one = chain_host_ms(1), chain = chain_host_ms(kLong);
    CallOverhead o;
    o.fwd_ms = std::max(one.fwd_host_ms - (chain.fwd_host_ms - one.fwd_host_ms) / (kLong - 1), 0.0);
    o.bwd_ms = std::max(one.bwd_host_ms - (chain.bwd_host_ms - one.bwd_host_ms) / (kLong - 1), 0.0);
    return o;
  }();
  return overhead;
}

// An op's passes as a training step runs them: the median of `reps` after a warm-up, with the
// memory each pass allocates.
//
// On a GPU a pass has two times, which the cost model combines over a stage (a pass takes the
// longer of the two sums, cost_model.h): the GPU's time to run its kernels and the host's time to
// issue it. The kernels are timed by CUDA events behind a backlog of other work, so that they run
// back to back as the host, ahead, queued them; the host's time is its clock's over passes issued
// back to back without waiting for the GPU, less what issuing a pass alone costs beyond issuing it
// within a step (call_overhead). Timing each pass from an idle GPU instead charged every op its
// dispatch and launch latency in full, which a step largely hides behind large kernels (predicted
// steps 1.3-2.2x the measured: docs/gpu.md). On the CPU the host runs the kernels: one time.
template <typename Prepare, typename Run>
cost::OpMeasurement measure_passes(int reps, const c10::Device& device, Prepare prepare, Run run) {
  Passes issued = run_passes(reps, /*warm_up=*/true, device, prepare, run);
  cost::OpMeasurement m;
  m.fwd_ms = issued.fwd_ms;
  m.bwd_ms = issued.bwd_ms;
  m.fwd_peak_bytes = issued.fwd_peak_bytes;
  m.retained_bytes = issued.retained_bytes;
  m.bwd_peak_bytes = issued.bwd_peak_bytes;
  m.reps = issued.reps;
  if (device.is_cpu()) return m;
  constexpr int kTries = 3;
  double backlog_ms = 1.5 * issued.host_ms + 0.5;
  for (int attempt = 0; attempt < kTries; ++attempt, backlog_ms *= 4) {
    queue_backlog(device, backlog_ms);
    accel::Marker backlog_end(device);
    backlog_end.record();
    Passes kernels = run_passes(issued.reps, /*warm_up=*/false, device, prepare, run, &backlog_end);
    m.fwd_ms = kernels.fwd_ms;
    m.bwd_ms = kernels.bwd_ms;
    if (kernels.stayed_behind_backlog) break;
  }
  const CallOverhead& alone = call_overhead(device);
  m.fwd_host_ms = std::max(issued.fwd_host_ms - alone.fwd_ms, 0.0);
  m.bwd_host_ms = issued.has_backward ? std::max(issued.bwd_host_ms - alone.bwd_ms, 0.0) : 0;
  return m;
}

cost::OpMeasurement measure(const SingleOp& op, int reps, const c10::Device& device) {
  return measure_passes(
      reps, device,
      [&] {
        op.clear_activation_grads();
        return op.fresh_inputs();
      },
      [&](torch::jit::Stack inputs) { return op.run(std::move(inputs)); });
}

const TorchScriptSource& torchscript_source(const Model& model) {
  const auto* source = dynamic_cast<const TorchScriptSource*>(model.source.get());
  if (!source) {
    throw InputError(model.path + ": the profiler runs TorchScript models; profile the .pt form of this model "
                     "(its measurements then calibrate the ONNX model's costs too)");
  }
  return *source;
}

// Every value of the lowered graph after one forward pass on the example inputs.
std::unordered_map<const Value*, c10::IValue> forward_values(const Model& model, const TorchScriptSource& source) {
  // Recorded on the CPU; each op's inputs go to the profiled device when it is measured.
  auto inputs = example_inputs(model.path, source.specs, 1);
  auto recorded = record_values(*source.graph, inputs, source.weights);
  std::unordered_map<const Value*, c10::IValue> values;
  const auto& graph_inputs = source.graph->inputs();
  for (std::size_t i = 0; i < graph_inputs.size(); ++i) {
    if (i < inputs.size()) {
      values[graph_inputs[i]] = inputs[i];
      continue;
    }
    // Buffers are copied: profiling a training-mode batch_norm updates its statistics in place.
    const auto& weight = source.weights[i - inputs.size()];
    values[graph_inputs[i]] = weight.trainable ? weight.tensor : weight.tensor.clone();
  }
  std::size_t next = 0;
  for (const Node* node : source.graph->nodes()) {
    for (const Value* output : node->outputs()) values[output] = recorded.at(next++);
  }
  return values;
}

// Runs a profiling step; a libtorch failure becomes one line naming the model.
template <typename Step>
auto naming_the_model(const std::string& path, const char* what, Step step) -> decltype(step()) {
  try {
    return step();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(path + ": " + what + ": " + torch_message(e));
  }
}

}  // namespace

namespace {

// A GPU's peaks as measured in fp32 (the precision the profiler runs ops in): a large matmul,
// a large copy, and the time of a near-empty op from the host's view (its launch).
cost::DeviceProfile measure_gpu(const c10::Device& device) {
  torch::NoGradGuard no_grad;
  cost::DeviceProfile profile;
  profile.description = accel::device_name(device) + ", libtorch " + TORCH_VERSION + ", CUDA events";
  auto on = at::TensorOptions().device(device);
  constexpr std::int64_t n = 8192;
  auto a = at::randn({n, n}, on), b = at::randn({n, n}, on);
  at::mm(a, b);
  profile.peak_fp32_flops = 2.0 * n * n * n / (median_device_ms(device, 5, [&] { at::mm(a, b); }) * 1e-3);
  constexpr std::int64_t elements = 256 * 1024 * 1024;  // 1 GiB
  auto from = at::randn({elements}, on), to = at::empty({elements}, on);
  to.copy_(from);
  profile.mem_bandwidth = 2.0 * elements * 4 / (median_device_ms(device, 5, [&] { to.copy_(from); }) * 1e-3);
  auto x = at::ones({4}, on), y = at::ones({4}, on);
  constexpr int kTinyOps = 1000;
  accel::synchronize(device);
  profile.op_overhead = median_ms(5, [&] {
                          for (int i = 0; i < kTinyOps; ++i) at::add(x, y);
                          accel::synchronize(device);
                        }) * 1e-3 / kTinyOps;
  return profile;
}

}  // namespace

std::string profiled_device_name() { return accel::device_name(profile_device()); }

namespace {

// The CPU's figures as a training step sees them: libtorch's default intra-op threads (and the
// BLAS library's own), tensors from the default allocator. Each is the fastest of a few runs
// (see fastest_ms) and takes a fraction of a second.

// FLOP/s of a square matmul. The size grows until one product takes long enough to time well,
// so that a CPU without fast kernels for the dtype (bf16 before AVX-512) is not kept for seconds.
double matmul_flops(at::ScalarType dtype) {
  constexpr double kLongEnoughMs = 20;
  constexpr std::int64_t kLargest = 1536;
  for (std::int64_t n = 256;; n = std::min(2 * n, kLargest)) {
    auto a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
    at::mm(a, b);  // warm-up: packing buffers, the thread pool
    if (fastest_ms(1, [&] { at::mm(a, b); }) < kLongEnoughMs && n < kLargest) continue;
    return 2.0 * n * n * n / (fastest_ms(5, [&] { at::mm(a, b); }) * 1e-3);
  }
}

// Bytes read plus bytes written per second by a copy far larger than the caches.
double copy_bandwidth() {
  constexpr std::int64_t kElements = 64 * 1024 * 1024;  // 256 MiB of fp32
  auto from = at::empty({kElements}).fill_(1), to = at::empty({kElements});
  to.copy_(from);  // faults the pages in
  return 2.0 * kElements * 4 / (fastest_ms(5, [&] { to.copy_(from); }) * 1e-3);
}

// TorchScript IR of `blocks` repetitions of a small layer as traced models have them, on a
// 4 x 8 x 32 activation, each block's output the next one's input: ops the cost model costs (a
// linear layer, relu, dropout with p = 0, an affine layer_norm, softmax, a residual add) and
// about as many that it counts free but a step runs too (a trace's shape arithmetic, views).
// `costed` counts the first kind.
std::string small_layer_chain(int blocks, int& costed) {
  std::string ir = R"(graph(%x0 : Tensor, %w : Tensor, %b : Tensor, %gamma : Tensor, %beta : Tensor):
  %zero : int = prim::Constant[value=0]()
  %one : int = prim::Constant[value=1]()
  %last : int = prim::Constant[value=-1]()
  %width : int = prim::Constant[value=32]()
  %eps : float = prim::Constant[value=1.0000000000000001e-05]()
  %p : float = prim::Constant[value=0.]()
  %yes : bool = prim::Constant[value=1]()
  %no : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %shape : int[] = prim::ListConstruct(%width)
)";
  const char* block = R"(  %h# : Tensor = aten::linear(%x#, %w, %b)
  %r# : Tensor = aten::relu(%h#)
  %o# : Tensor = aten::dropout(%r#, %p, %yes)
  %n# : Tensor = aten::layer_norm(%o#, %shape, %gamma, %beta, %eps, %no)
  %s# : Tensor = aten::softmax(%n#, %last, %none)
  %a# : Tensor = aten::add(%s#, %x#, %one)
  %d# : int = aten::size(%a#, %zero)
  %t# : Tensor = prim::NumToTensor(%d#)
  %i# : int = aten::Int(%t#)
  %v# : int[] = prim::ListConstruct(%i#, %last, %width)
  %u# : Tensor = aten::view(%a#, %v#)
  %x@ : Tensor = aten::transpose(%u#, %zero, %one)
)";
  constexpr int kCostedPerBlock = 6;
  for (int i = 0; i < blocks; ++i) {
    std::string text = block;
    for (std::size_t at = text.find_first_of("#@"); at != std::string::npos; at = text.find_first_of("#@", at)) {
      std::string number = std::to_string(text[at] == '#' ? i : i + 1);
      text.replace(at, 1, number);
      at += number.size();
    }
    ir += text;
  }
  costed = blocks * kCostedPerBlock;
  return ir + "  return (%x" + std::to_string(blocks) + ")\n";
}

// Seconds per pass that a step spends on each op beyond its FLOPs and bytes: dispatch, autograd,
// allocation, the fixed costs of small kernels (a BLAS call, its threads) and its share of the
// free ops around it. small_layer_chain() run by the TorchScript interpreter while autograd
// records it, then its backward: the mean of the two passes per costed op, each pass the fastest
// of 5.
double op_overhead_seconds() {
  int costed = 0;
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(small_layer_chain(40, costed), graph.get());
  torch::jit::Code chain(graph, "overhead");
  auto weight = [](std::vector<std::int64_t> shape) { return at::randn(shape).requires_grad_(true); };
  at::Tensor x = weight({4, 8, 32}), w = weight({32, 32}), b = weight({32}), gamma = weight({32}), beta = weight({32});
  double forward_ms = std::numeric_limits<double>::infinity(), backward_ms = forward_ms;
  for (int rep = -1; rep < 5; ++rep) {  // rep -1 is the warm-up
    torch::jit::Stack stack{x, w, b, gamma, beta};
    auto start = Clock::now();
    torch::jit::InterpreterState(chain).run(stack);
    if (rep >= 0) forward_ms = std::min(forward_ms, elapsed_ms(start));
    at::Tensor out = stack.back().toTensor();
    start = Clock::now();
    torch::autograd::backward({out}, {at::ones_like(out)});
    if (rep >= 0) backward_ms = std::min(backward_ms, elapsed_ms(start));
  }
  return (forward_ms + backward_ms) / 2 / costed * 1e-3;
}

}  // namespace

TorchPlugin::CpuMeasurement measure_this_cpu() {
  TorchPlugin::CpuMeasurement cpu;
  cpu.description = cpu_description();
  cpu.figures.peak_fp32_flops = matmul_flops(at::kFloat);
  cpu.figures.peak_bf16_flops = matmul_flops(at::kBFloat16);
  cpu.figures.mem_bandwidth = copy_bandwidth();
  cpu.figures.op_overhead = op_overhead_seconds();
  return cpu;
}

// The profile DB's figures of the device ops are profiled on: the GPU's, else the CPU's as
// measure_this_cpu takes them, under the counting allocator the ops are then profiled with.
cost::DeviceProfile measure_profiled_device() {
  if (!profile_device().is_cpu()) return measure_gpu(profile_device());
  CountingAllocator::installed();
  cost::DeviceProfile device;
  device.description = cpu_description();
  device.peak_fp32_flops = matmul_flops(at::kFloat);
  device.mem_bandwidth = copy_bandwidth();
  device.op_overhead = op_overhead_seconds();
  return device;
}

namespace {

// The loss a training step takes, as rannc-run's: of the first output, itself when it is a
// scalar, else a cross entropy over its last dim (targets of class 0; an MSE to zero for a
// vector), in fp32. A plain sum would keep nothing for backward and hand back a broadcast
// gradient: less time and memory than training takes (the cost model adds the loss's).
at::Tensor training_loss(const std::vector<at::Tensor>& outputs) {
  if (outputs.empty() || !outputs.front().requires_grad()) return {};
  const at::Tensor output = outputs.front().to(at::kFloat);
  if (output.dim() == 0) return output;
  if (output.dim() == 1) return at::mse_loss(output, at::zeros_like(output));
  auto logits = output.reshape({-1, output.size(-1)});
  return at::cross_entropy_loss(logits, at::zeros({logits.size(0)}, logits.options().dtype(at::kLong)));
}

cost::OpMeasurement measure_loss(const std::vector<std::int64_t>& shape, int reps) {
  const c10::Device device = profile_device();
  MemoryMeter meter(device);  // installs the counting allocator before the first CPU tensor
  at::Tensor output = at::randn(shape, at::TensorOptions().device(device)).requires_grad_(true);
  return measure_passes(
      reps, device,
      [&] {
        output.mutable_grad().reset();  // an activation's: fresh each step
        return torch::jit::Stack{output};
      },
      [&](torch::jit::Stack) { return torch::jit::Stack{training_loss({output})}; });
}

TorchPlugin::StepMeasurement measure_step(const Model& model, int reps) {
  const auto& source = torchscript_source(model);
  const c10::Device device = profile_device();
  MemoryMeter allocator(device);
  // On a GPU, the model file loaded afresh onto it (as rannc-run loads stage files): moving the
  // profiled module's parameters would leave autograd expecting their gradients on the CPU.
  torch::jit::Module module = device.is_cpu() ? source.module : torch::jit::load(model.path, device);
  retarget_device_constants(module, device);
  module.train();
  // The runtime runs stages without the profiling executor's autodiff graphs: plain
  // interpretation with eager autograd, which is what the per-op measurements add up to.
  torch::jit::GraphOptimizerEnabledGuard plain(false);
  std::vector<c10::IValue> inputs;
  for (auto& t : example_inputs(model.path, source.specs, 1)) inputs.emplace_back(t.to(device));
  auto step = [&] {
    std::vector<at::Tensor> outputs;
    collect_tensors(module.forward(inputs), outputs);
    at::Tensor loss = training_loss(outputs);
    if (loss.defined()) loss.backward();
  };
  step();  // warm-up: the executor specialises the graph, gradients get allocated
  step();
  std::int64_t state_bytes = 0;
  for (const auto& w : source.weights) state_bytes += (w.trainable ? 2 : 1) * static_cast<std::int64_t>(w.tensor.nbytes());
  TorchPlugin::StepMeasurement m;
  std::int64_t transient = 0;
  std::vector<double> host_ms;
  accel::synchronize(device);
  m.step_ms = median_device_ms(device, reps, [&] {
    std::int64_t start = allocator.current();
    allocator.reset_peak();
    auto issued = std::chrono::steady_clock::now();
    step();
    host_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - issued).count());
    accel::synchronize(device);
    transient = std::max(transient, allocator.peak() - start);
  });
  m.host_ms = median(host_ms);
  m.peak_bytes = state_bytes + transient;
  m.reps = reps;
  return m;
}

}  // namespace

std::vector<std::optional<cost::OpMeasurement>> profile_torchscript_ops(const Model& model,
                                                                        const std::vector<ir::OpId>& ops,
                                                                        const std::vector<bool>& requires_grad, int reps,
                                                                        const TorchPlugin::Progress& progress) {
  const auto& source = torchscript_source(model);
  const c10::Device device = profile_device();
  MemoryMeter meter(device);  // installs the counting allocator before the first CPU tensor
  auto values = naming_the_model(model.path, "forward fails while profiling",
                                 [&] { return forward_values(model, source); });
  std::vector<std::optional<cost::OpMeasurement>> results;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const ir::Op& op = model.graph.op(ops[i]);
    Node* node = source.nodes.at(static_cast<std::size_t>(op.source_node));
    try {
      if (!node->blocks().empty()) throw std::invalid_argument("an op with blocks does not run alone");
      auto input_value = [&](std::size_t input) -> const ir::Value& { return model.graph.value(op.inputs.at(input)); };
      SingleOp single(
          node, values, [&](std::size_t input) { return requires_grad[static_cast<std::size_t>(op.inputs.at(input))]; },
          [&](std::size_t input) { return input_value(input).is_weight(); }, device);
      results.emplace_back(measure(single, reps, device));
    } catch (const std::exception&) {
      results.emplace_back(std::nullopt);  // costed by the roofline instead; the caller reports it
    }
    if (progress) progress(i + 1, ops.size());
  }
  return results;
}

std::optional<cost::OpMeasurement> profile_training_loss(const std::vector<std::int64_t>& shape, int reps) {
  try {
    return measure_loss(shape, reps);
  } catch (const std::exception&) {
    return std::nullopt;  // costed by the roofline instead; the caller reports it
  }
}

TorchPlugin::StepMeasurement measure_torchscript_step(const Model& model, int reps) {
  return naming_the_model(model.path, "a whole training step fails", [&] { return measure_step(model, reps); });
}

}  // namespace rannc
