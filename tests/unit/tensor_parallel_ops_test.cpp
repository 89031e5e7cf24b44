// The tensor-parallel operators (torch_side/tensor_parallel_ops.h) over c10d's Gloo
// (runtime/tensor_parallel_group.h): the ranks of a group run as threads of this process, each
// with its own ProcessGroupGloo over one HashStore, and what each rank computes is checked
// against the same computation on the whole tensors. The operators are called as stage files
// call them: through the dispatcher, and through TorchScript compiled and loaded here.
#include <ATen/ops/cross_entropy_loss.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/script.h>

#include <exception>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/tensor_parallel_group.h"
#include "torch_side/tensor_parallel_ops.h"

// Last: glog, which libtorch includes, defines a CHECK of its own that would replace Catch's.
#include <catch2/catch.hpp>

namespace rannc::tp {
namespace {

const auto kTimeout = std::chrono::seconds(20);  // a rank that fails leaves the others waiting this long

std::shared_ptr<Group> gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size) {
  auto options = c10d::ProcessGroupGloo::Options::create();
  options->timeout = kTimeout;
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  return std::make_shared<runtime::TensorParallelGroup>(group, kTimeout);
}

// The calling thread's group for the scope.
class ThreadGroup {
 public:
  explicit ThreadGroup(std::shared_ptr<Group> group) { set_thread_group(std::move(group)); }
  ~ThreadGroup() { set_thread_group(nullptr); }
};

// Runs body(rank) as each rank of a group of n, one thread each, and returns what each returned
// (Catch2's checks are not thread-safe, so the test checks afterwards). A rank's error is rethrown.
template <typename Body>
auto run_ranks(int n, Body body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<decltype(body(0))> results(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank)
    threads.emplace_back([&, rank] {
      try {
        ThreadGroup group(gloo_group(store, rank, n));
        results[rank] = body(rank);
      } catch (...) {
        errors[rank] = std::current_exception();
      }
    });
  for (auto& thread : threads) thread.join();
  for (auto& error : errors)
    if (error) std::rethrow_exception(error);
  return results;
}

// The operators as the TorchScript interpreter finds them: by name, through the dispatcher.
at::Tensor call(const char* op, const at::Tensor& x) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(op, "").typed<at::Tensor(const at::Tensor&)>().call(x);
}

at::Tensor call(const char* op, const at::Tensor& x, std::int64_t dim) {
  return c10::Dispatcher::singleton()
      .findSchemaOrThrow(op, "")
      .typed<at::Tensor(const at::Tensor&, std::int64_t)>()
      .call(x, dim);
}

// TorchScript source as the plugin compiles a stage's, naming the operators torch.ops.rannc.tp_*.
std::shared_ptr<torch::jit::CompilationUnit> compile(const std::string& source) {
  auto unit = std::make_shared<torch::jit::CompilationUnit>();
  unit->define(/*prefix=*/{}, source, script_resolver(), /*self=*/nullptr);
  return unit;
}

bool same(const at::Tensor& actual, const at::Tensor& expected) {
  return actual.sizes() == expected.sizes() && actual.scalar_type() == expected.scalar_type() &&
         actual.allclose(expected, 1e-6, 1e-9);
}

at::Tensor random(at::IntArrayRef shape) { return at::randn(shape, at::kDouble); }

struct Result {
  at::Tensor value;
  at::Tensor grad;
};

// On each rank r: y = op(inputs[r]) (with dim when given), then the gradient of sum(y * weights[r]).
std::vector<Result> run_op(const char* op, const std::vector<at::Tensor>& inputs,
                           const std::vector<at::Tensor>& weights, std::optional<std::int64_t> dim = std::nullopt) {
  return run_ranks(static_cast<int>(inputs.size()), [&](int rank) {
    at::Tensor x = inputs[rank].clone().requires_grad_();
    at::Tensor y = dim ? call(op, x, *dim) : call(op, x);
    (y * weights[rank]).sum().backward();
    return Result{y.detach(), x.grad()};
  });
}

std::vector<at::Tensor> randoms(int n, at::IntArrayRef shape) {
  std::vector<at::Tensor> tensors;
  for (int r = 0; r < n; ++r) tensors.push_back(random(shape));
  return tensors;
}

at::Tensor sum(const std::vector<at::Tensor>& tensors) { return at::stack(tensors).sum(0); }

// A group of `size` that only knows this rank's place, for the errors raised before any
// communication; alone (size 1), its collectives are the identity.
class LocalGroup : public Group {
 public:
  LocalGroup(int size, int rank) : size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(at::Tensor&) override { alone(); }
  void all_reduce_max(at::Tensor&) override { alone(); }
  at::Tensor all_gather(const at::Tensor& tensor, std::int64_t) override { return alone(tensor); }
  at::Tensor reduce_scatter(const at::Tensor& tensor, std::int64_t) override { return alone(tensor); }

 private:
  at::Tensor alone(const at::Tensor& tensor = {}) const {
    if (size_ != 1) throw std::logic_error("this test expected no collective");
    return tensor.defined() ? tensor.clone() : tensor;
  }
  int size_;
  int rank_;
};

TEST_CASE("tensor parallel: tp_copy is the identity forward and sums the gradient over the group backward") {
  at::manual_seed(1);
  for (int n : {2, 4}) {
    at::Tensor x = random({3, 4});
    auto weights = randoms(n, {3, 4});
    auto results = run_op(kCopy, std::vector<at::Tensor>(n, x), weights);
    for (const auto& result : results) {
      CHECK(same(result.value, x));
      CHECK(same(result.grad, sum(weights)));
    }
  }
}

TEST_CASE("tensor parallel: tp_reduce sums over the group forward and is the identity backward") {
  at::manual_seed(2);
  for (int n : {2, 4}) {
    auto inputs = randoms(n, {3, 4});
    auto weights = randoms(n, {3, 4});
    auto results = run_op(kReduce, inputs, weights);
    for (int r = 0; r < n; ++r) {
      CHECK(same(results[r].value, sum(inputs)));
      CHECK(same(results[r].grad, weights[r]));
    }
  }
}

// The dims each op with a dim is tried on, as given and as its operand's non-negative index.
const std::vector<std::pair<std::int64_t, std::int64_t>> kDims = {{0, 0}, {1, 1}, {-1, 2}};

// tp_gather and tp_join both all-gather forward: rank r's chunk of a whole tensor goes in, the
// whole comes out on every rank. expected_grad(weights, n, d, r) is rank r's gradient.
template <typename ExpectedGrad>
void check_all_gathering(const char* op, ExpectedGrad expected_grad) {
  for (int n : {2, 4})
    for (auto [dim, d] : kDims) {
      at::Tensor whole = random({2 * n, n, 3 * n});
      auto chunks = whole.chunk(n, d);
      auto weights = randoms(n, whole.sizes());
      auto results = run_op(op, {chunks.begin(), chunks.end()}, weights, dim);
      for (int r = 0; r < n; ++r) {
        CHECK(same(results[r].value, whole));
        CHECK(same(results[r].grad, expected_grad(weights, n, d, r)));
      }
    }
}

TEST_CASE("tensor parallel: tp_gather all-gathers forward and reduce-scatters backward, along any dim") {
  at::manual_seed(3);
  check_all_gathering(kGather, [](const std::vector<at::Tensor>& weights, int n, std::int64_t d, int r) {
    return sum(weights).chunk(n, d)[r];
  });
}

TEST_CASE("tensor parallel: tp_reduce_scatter reduce-scatters forward and all-gathers backward, along any dim") {
  at::manual_seed(4);
  for (int n : {2, 4})
    for (auto [dim, d] : kDims) {
      auto inputs = randoms(n, {2 * n, n, 3 * n});
      auto weights = randoms(n, sum(inputs).chunk(n, d)[0].sizes());
      auto results = run_op(kReduceScatter, inputs, weights, dim);
      for (int r = 0; r < n; ++r) {
        CHECK(same(results[r].value, sum(inputs).chunk(n, d)[r]));
        CHECK(same(results[r].grad, at::cat(weights, d)));
      }
    }
}

TEST_CASE("tensor parallel: tp_split takes this rank's chunk forward and all-gathers backward") {
  at::manual_seed(5);
  for (int n : {2, 4})
    for (auto [dim, d] : kDims) {
      at::Tensor whole = random({2 * n, n, 3 * n});
      auto weights = randoms(n, whole.chunk(n, d)[0].sizes());
      auto results = run_op(kSplit, std::vector<at::Tensor>(n, whole), weights, dim);
      for (int r = 0; r < n; ++r) {
        CHECK(same(results[r].value, whole.chunk(n, d)[r]));
        CHECK(results[r].value.is_contiguous());
        CHECK(same(results[r].grad, at::cat(weights, d)));
      }
    }
}

TEST_CASE("tensor parallel: tp_join all-gathers forward and takes this rank's chunk of the gradient backward") {
  at::manual_seed(6);
  check_all_gathering(kJoin, [](const std::vector<at::Tensor>& weights, int n, std::int64_t d, int r) {
    return weights[r].chunk(n, d)[r];
  });
}

// A Megatron-LM MLP: the first linear split by its output features (column-parallel), the
// second by its input features (row-parallel), between tp_copy and tp_reduce.
constexpr const char* kParallelMlp = R"JIT(
def mlp(x, w1, b1, w2):
    h = torch.gelu(torch.matmul(torch.ops.rannc.tp_copy(x), w1.t()) + b1)
    return torch.ops.rannc.tp_reduce(torch.matmul(h, w2.t()))
)JIT";

struct MlpGrads {
  at::Tensor y, x, w1, b1, w2;
};

MlpGrads with_grads(at::Tensor y, const at::Tensor& g, std::vector<at::Tensor> leaves) {
  (y * g).sum().backward();
  return {y.detach(), leaves[0].grad(), leaves[1].grad(), leaves[2].grad(), leaves[3].grad()};
}

std::vector<at::Tensor> leaves_of(std::vector<at::Tensor> tensors) {
  for (auto& tensor : tensors) tensor = tensor.clone().requires_grad_();
  return tensors;
}

TEST_CASE("tensor parallel: a column- then row-parallel MLP in TorchScript matches the whole MLP and its gradients") {
  at::manual_seed(7);
  const std::int64_t rows = 5, features = 6, hidden = 8;
  at::Tensor x = random({rows, features}), w1 = random({hidden, features}), b1 = random({hidden});
  at::Tensor w2 = random({features, hidden}), g = random({rows, features});
  auto whole = leaves_of({x, w1, b1, w2});
  auto expected =
      with_grads(at::matmul(at::gelu(at::matmul(whole[0], whole[1].t()) + whole[2]), whole[3].t()), g, whole);
  for (int n : {2, 4}) {
    // Three calls: the profiling executor runs the graph as written, then optimised.
    auto results = run_ranks(n, [&](int rank) {
      auto unit = compile(kParallelMlp);
      std::vector<MlpGrads> calls;
      for (int call = 0; call < 3; ++call) {
        auto leaves = leaves_of({x, w1.chunk(n, 0)[rank], b1.chunk(n, 0)[rank], w2.chunk(n, 1)[rank]});
        at::Tensor y = unit->get_function("mlp")({leaves[0], leaves[1], leaves[2], leaves[3]}).toTensor();
        calls.push_back(with_grads(y, g, leaves));
      }
      return calls;
    });
    for (int r = 0; r < n; ++r)
      for (const auto& call : results[r]) {
        CHECK(same(call.y, expected.y));
        CHECK(same(call.x, expected.x));
        CHECK(same(call.w1, expected.w1.chunk(n, 0)[r]));
        CHECK(same(call.b1, expected.b1.chunk(n, 0)[r]));
        CHECK(same(call.w2, expected.w2.chunk(n, 1)[r]));
      }
  }
}

TEST_CASE("tensor parallel: a saved module calling torch.ops.rannc.tp_copy loads and differentiates") {
  torch::jit::Module module("Stage");
  module.define(R"JIT(
def forward(self, x):
    return torch.ops.rannc.tp_copy(x) * 2.0
)JIT",
                script_resolver());
  std::stringstream file;
  module.save(file);
  const std::string saved = file.str();
  at::Tensor x = at::arange(6, at::kDouble).view({2, 3});
  auto results = run_ranks(2, [&](int) {
    std::istringstream in(saved);
    auto loaded = torch::jit::load(in);
    bool named = false;
    for (const auto* node : loaded.get_method("forward").graph()->nodes())
      named = named || node->kind() == c10::Symbol::fromQualString(kCopy);
    at::Tensor leaf = x.clone().requires_grad_();
    at::Tensor y = loaded.forward({leaf}).toTensor();
    y.sum().backward();
    return std::make_tuple(named, y.detach(), leaf.grad());
  });
  for (const auto& [named, y, grad] : results) {
    CHECK(named);
    CHECK(same(y, 2 * x));
    CHECK(same(grad, at::full({2, 3}, 4.0, at::kDouble)));  // 2 from each of the 2 ranks
  }
}

// Cross entropy over `classes` classes split over n ranks, against the whole logits'; the loss
// is scaled by 3 so that the gradient's factor shows.
void check_vocab_parallel_cross_entropy(int n, const at::Tensor& logits, const at::Tensor& target) {
  at::Tensor whole = logits.to(at::kDouble).clone().requires_grad_();
  at::Tensor expected = at::cross_entropy_loss(whole, target, {}, at::Reduction::Sum);
  (3 * expected).backward();
  const std::int64_t slice = logits.size(1) / n;
  auto results = run_ranks(n, [&](int rank) {
    at::Tensor mine = logits.narrow(1, rank * slice, slice).clone().requires_grad_();
    at::Tensor loss = vocab_parallel_cross_entropy_sum(mine, target, rank * slice);
    (3 * loss).backward();
    return Result{loss.detach(), mine.grad()};
  });
  const bool reduced = logits.scalar_type() == at::kBFloat16;
  for (int r = 0; r < n; ++r) {
    at::Tensor expected_grad = whole.grad().narrow(1, r * slice, slice);
    if (reduced) {
      CHECK(results[r].value.scalar_type() == at::kFloat);
      CHECK(results[r].value.to(at::kDouble).allclose(expected.detach(), 1e-5));
      CHECK(results[r].grad.scalar_type() == at::kBFloat16);
      CHECK(results[r].grad.to(at::kDouble).allclose(expected_grad, 1e-2, 1e-2));
    } else {
      CHECK(same(results[r].value, expected.detach()));
      CHECK(same(results[r].grad, expected_grad));
    }
  }
}

TEST_CASE("tensor parallel: vocab-parallel cross entropy equals the whole vocabulary's, its gradient the slice's") {
  at::manual_seed(8);
  at::Tensor logits = 10 * random({6, 8});  // large logits: the maxima keep exp finite
  // Classes held by every rank of 2 and of 4.
  at::Tensor target = at::tensor(std::vector<std::int64_t>{0, 3, 5, 7, 2, 6});
  for (int n : {2, 4}) {
    check_vocab_parallel_cross_entropy(n, logits, target);
    check_vocab_parallel_cross_entropy(n, logits.to(at::kBFloat16), target);
  }
}

TEST_CASE("tensor parallel: vocab-parallel cross entropy refuses a target outside the vocabulary") {
  at::Tensor target = at::tensor(std::vector<std::int64_t>{1, 8});
  CHECK_THROWS_WITH(run_ranks(2, [&](int) { return vocab_parallel_cross_entropy_sum(at::zeros({2, 4}), target, 0); }),
                    Catch::Contains("a target is no class of the vocabulary"));
  ThreadGroup group(std::make_shared<LocalGroup>(1, 0));
  CHECK_THROWS_WITH(vocab_parallel_cross_entropy_sum(at::zeros({2, 4}), at::zeros({3}, at::kLong), 0),
                    Catch::Contains("got logits [2, 4] and Long targets [3]"));
}

TEST_CASE("tensor parallel: an operator without a group says so") {
  at::Tensor x = at::ones({2, 2});
  for (const char* op : {kCopy, kReduce})
    CHECK_THROWS_WITH(call(op, x), Catch::Contains("a tensor-parallel stage ran without its tensor-parallel group"));
  CHECK_THROWS_WITH(call(kSplit, x, 0), Catch::Contains("ran without its tensor-parallel group"));
}

TEST_CASE("tensor parallel: the thread's group comes before the process's") {
  at::Tensor x = at::ones({2, 5});
  set_process_group(std::make_shared<LocalGroup>(1, 0));
  CHECK(same(call(kReduce, x), x));
  {
    ThreadGroup group(std::make_shared<LocalGroup>(2, 1));
    CHECK(same(call(kSplit, x, 0), x.narrow(0, 1, 1)));
  }
  set_process_group(nullptr);
  CHECK_THROWS_WITH(call(kReduce, x), Catch::Contains("without its tensor-parallel group"));
}

TEST_CASE("tensor parallel: a dim the group does not divide is refused, also from TorchScript") {
  ThreadGroup group(std::make_shared<LocalGroup>(2, 0));
  at::Tensor x = at::ones({4, 5});
  const std::string message = "dim 1 of a tensor of shape [4, 5] has size 5, which the tensor-parallel group's 2 "
                              "ranks do not divide into equal chunks";
  CHECK_THROWS_WITH(call(kSplit, x, -1), Catch::Contains("rannc::tp_split: " + message));
  CHECK_THROWS_WITH(call(kReduceScatter, x, 1), Catch::Contains("rannc::tp_reduce_scatter: " + message));
  auto unit = compile(R"JIT(
def split(x):
    return torch.ops.rannc.tp_split(x, 1)
)JIT");
  CHECK_THROWS_WITH(unit->get_function("split")({x}), Catch::Contains(message));
  CHECK_THROWS_WITH(call(kGather, x, 2), Catch::Contains("Dimension out of range"));
}

}  // namespace
}  // namespace rannc::tp
