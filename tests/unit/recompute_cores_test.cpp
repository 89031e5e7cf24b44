// The checkpoint of attention cores (torch_side/recompute_cores.h), called as a selective stage's
// file calls it: TorchScript whose forward hands a core method to torch.ops.rannc.recompute_core.
// Outside a CoreRecomputation scope it is the method as written; inside, autograd keeps only the
// core's inputs, and backward runs the core again with the forward's random state, so dropout's
// mask and every gradient are those of the plain method.
#include <torch/csrc/autograd/autograd.h>
#include <torch/script.h>

#include <optional>
#include <string>
#include <vector>

#include "torch_side/recompute_cores.h"
#include "torch_side/tensor_parallel_ops.h"

// Last: glog, which libtorch includes, defines a CHECK of its own that would replace Catch's.
#include <catch2/catch.hpp>

namespace rannc::tp {
namespace {

// A core as a stage's attention has one: scores, softmax, dropout and the product with V, a
// weight of the module read inside.
torch::jit::Module stage_with_core() {
  torch::jit::Module module(c10::QualifiedName("__torch__.rannc.CoreTest"));
  module.register_parameter("p0", torch::full({1}, 0.5).requires_grad_(true), false);
  module.define(R"JIT(
def core_0(self, q, k, v):
    scores = torch.matmul(q, k.transpose(-2, -1)) * self.p0
    weights = torch.dropout(torch.softmax(scores, -1), 0.5, True)
    return (torch.matmul(weights, v),)

def forward(self, q, k, v):
    context = torch.ops.rannc.recompute_core(self, "core_0", [q, k, v])
    return (torch.relu(context[0]),)
)JIT",
                script_resolver());
  return module;
}

struct Run {
  at::Tensor output;
  std::vector<at::Tensor> grads;  // of q, k, v and p0
  std::string output_node;        // the name of the node that made the core's output
  std::size_t core_edges = 0;     // the edges out of that node
  at::Tensor next_draw;           // the generator's draw after backward
};

Run train_step(bool recompute_cores) {
  auto module = stage_with_core();
  torch::manual_seed(3);
  auto q = torch::randn({2, 4, 8}).requires_grad_(true), k = torch::randn({2, 4, 8}).requires_grad_(true);
  auto v = torch::randn({2, 4, 8}).requires_grad_(true);
  torch::manual_seed(11);
  Run run;
  {
    std::optional<CoreRecomputation> scope;
    if (recompute_cores) scope.emplace();
    run.output = module.forward({q, k, v}).toTupleRef().elements()[0].toTensor();
  }
  const auto& core_node = run.output.grad_fn()->next_edges().at(0).function;
  run.output_node = core_node->name();
  run.core_edges = core_node->next_edges().size();
  torch::autograd::backward({run.output}, {torch::ones_like(run.output)});
  auto p0 = module.attr("p0").toTensor();
  run.grads = {q.grad(), k.grad(), v.grad(), p0.grad()};
  run.next_draw = torch::rand({4});
  return run;
}

TEST_CASE("recompute_core outside a scope runs the core's method as autograd records it") {
  auto plain = train_step(false);
  CHECK(plain.output_node.find("CheckpointedCore") == std::string::npos);
  for (const auto& grad : plain.grads) CHECK(grad.defined());
}

TEST_CASE("recompute_core in a scope keeps only the core's inputs and runs it again in backward alike") {
  auto plain = train_step(false);
  auto recomputed = train_step(true);
  // One node for the whole core, whose edges lead to q, k, v: nothing inside it was recorded.
  CHECK(recomputed.output_node.find("CheckpointedCore") != std::string::npos);
  CHECK(recomputed.core_edges == 3);
  CHECK(torch::equal(recomputed.output, plain.output));
  // The same dropout mask in backward: every gradient equal, the weight read inside the core too.
  for (std::size_t i = 0; i < plain.grads.size(); ++i) {
    INFO("gradient " << i);
    REQUIRE(recomputed.grads[i].defined());
    CHECK(torch::equal(recomputed.grads[i], plain.grads[i]));
  }
  // Backward put the generator back: the draws after it are the plain run's.
  CHECK(torch::equal(recomputed.next_draw, plain.next_draw));
}

}  // namespace
}  // namespace rannc::tp
