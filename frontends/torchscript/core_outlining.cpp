#include "frontends/torchscript/core_outlining.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "torch_side/recompute_cores.h"

namespace rannc {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

bool is_tensor(const Value* value) { return value->type()->isSubtypeOf(*c10::TensorType::get()); }

// Constants and weight reads are shared by whoever reads them: forward keeps its own, and a core
// clones the constants it reads and takes the weights as inputs.
bool shared(const Node* node) { return node->kind() == c10::prim::Constant || node->kind() == c10::prim::GetAttr; }

// One core moved into its method.
class CoreOutliner {
 public:
  CoreOutliner(torch::jit::Module& module, Graph& forward, const std::vector<Node*>& nodes, int index)
      : module_(module), forward_(forward), method_(tp::core_method(index)), core_(std::make_shared<Graph>()) {
    for (Node* node : nodes)
      if (node->owningBlock() == forward.block() && !shared(node) && members_.insert(node).second) order_.push_back(node);
    std::sort(order_.begin(), order_.end(), [](Node* a, Node* b) { return a->isBefore(b); });
  }

  void run() {
    if (order_.empty()) return;
    self_ = forward_.inputs().at(0);
    env_[self_] = core_->addInput("self")->setType(self_->type());
    for (Node* node : order_) {
      Node* copy = core_->insertNode(core_->createClone(node, [this](Value* v) { return inside(v); }));
      for (std::size_t i = 0; i < node->outputs().size(); ++i) env_[node->outputs()[i]] = copy->outputs()[i];
    }
    mark_removed();
    std::vector<Value*> outputs = escaping_values();
    std::vector<Value*> returned;
    for (Value* output : outputs) returned.push_back(env_.at(output));
    core_->registerOutput(core_->insertNode(core_->createTuple(returned))->output());
    core_->lint();
    auto* function = module_._ivalue()->compilation_unit()->create_function(
        c10::QualifiedName(*module_.type()->name(), method_), core_);
    module_.type()->addMethod(function);
    call_in_forward(outputs);
  }

 private:
  // The core's value for a value of forward that it reads but does not compute.
  Value* inside(Value* outer) {
    if (auto it = env_.find(outer); it != env_.end()) return it->second;
    if (is_tensor(outer)) {
      inputs_.push_back(outer);
      return env_[outer] = core_->addInput()->setType(outer->type());
    }
    Node* producer = outer->node();
    if (producer->kind() == c10::prim::Param || !producer->blocks().empty() || producer->hasSideEffects())
      throw std::logic_error("internal error: attention core " + method_ + " reads '" + outer->debugName() +
                             "', a value that is not a tensor and cannot be computed again inside it");
    // Glue (a size, a scale): computed again in the core from what it is computed from.
    Node* copy = core_->insertNode(core_->createClone(producer, [this](Value* v) { return inside(v); }));
    for (std::size_t i = 0; i < producer->outputs().size(); ++i) env_[producer->outputs()[i]] = copy->outputs()[i];
    glue_.push_back(producer);
    return env_.at(outer);
  }

  // What forward no longer computes: the core's nodes, and the glue read only by them.
  void mark_removed() {
    removed_ = members_;
    std::sort(glue_.begin(), glue_.end(), [](Node* a, Node* b) { return b->isBefore(a); });
    for (Node* node : glue_) {
      bool unread = std::all_of(node->outputs().begin(), node->outputs().end(), [&](Value* output) {
        return std::all_of(output->uses().begin(), output->uses().end(),
                           [&](const torch::jit::Use& use) { return removed_.count(use.user) > 0; });
      });
      if (unread) removed_.insert(node);
    }
  }

  // The values of the core that forward reads after it, in order.
  std::vector<Value*> escaping_values() const {
    std::vector<Value*> escaping;
    for (Node* node : order_)
      for (Value* output : node->outputs()) {
        bool read_outside = std::any_of(output->uses().begin(), output->uses().end(),
                                        [&](const torch::jit::Use& use) { return !removed_.count(use.user); });
        if (!read_outside) continue;
        if (!is_tensor(output))
          throw std::logic_error("internal error: attention core " + method_ + " makes '" + output->debugName() +
                                 "', which is not a tensor, for the rest of the stage");
        escaping.push_back(output);
      }
    return escaping;
  }

  // Forward calls the core where its last node was, and no longer computes what the core does.
  void call_in_forward(const std::vector<Value*>& outputs) {
    Node* last = order_.back();
    for (Value* output : outputs)
      for (const auto& use : output->uses())
        if (!removed_.count(use.user) && use.user != forward_.return_node() && use.user->isBefore(last))
          throw std::logic_error("internal error: attention core " + method_ + " is read inside itself by " +
                                 use.user->kind().toQualString());
    torch::jit::WithInsertPoint point(last->next());
    Value* list = forward_.insertNode(forward_.createList(c10::TensorType::get(), inputs_))->output();
    Value* results = forward_.insert(c10::Symbol::fromQualString(tp::kRecomputeCore),
                                     {self_, torch::jit::NamedValue(method_), list});
    Node* unpack = forward_.insertNode(forward_.createListUnpack(results, outputs.size()));
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      unpack->outputs()[i]->setType(outputs[i]->type());
      outputs[i]->replaceAllUsesWith(unpack->outputs()[i]);
    }
    std::vector<Node*> removed(removed_.begin(), removed_.end());
    std::sort(removed.begin(), removed.end(), [](Node* a, Node* b) { return b->isBefore(a); });
    for (Node* node : removed) node->destroy();
  }

  torch::jit::Module& module_;
  Graph& forward_;
  std::string method_;
  std::shared_ptr<Graph> core_;
  std::vector<Node*> order_;  // the core's nodes in forward's order
  std::unordered_set<Node*> members_;
  std::unordered_map<Value*, Value*> env_;  // forward's values -> the core's
  std::vector<Value*> inputs_;              // forward's tensors the core takes, in its arguments' order
  std::vector<Node*> glue_;                 // forward's non-tensor values the core computes again
  std::unordered_set<Node*> removed_;
  Value* self_ = nullptr;
};

}  // namespace

void outline_cores(torch::jit::Module& module, Graph& forward, const std::vector<std::vector<Node*>>& cores) {
  for (std::size_t k = 0; k < cores.size(); ++k) CoreOutliner(module, forward, cores[k], static_cast<int>(k)).run();
  forward.lint();
}

std::vector<std::vector<Node*>> nodes_on_lines(Graph& forward, const std::vector<std::vector<int>>& lines) {
  std::unordered_map<std::size_t, std::size_t> core_of_line;
  for (std::size_t k = 0; k < lines.size(); ++k)
    for (int line : lines[k]) core_of_line[static_cast<std::size_t>(line)] = k;
  std::vector<std::vector<Node*>> cores(lines.size());
  for (Node* node : forward.nodes()) {
    const auto& range = node->sourceRange();
    if (!range.source()) continue;
    auto found = core_of_line.find(range.source()->lineno_for_offset(range.start()));
    if (found != core_of_line.end()) cores[found->second].push_back(node);
  }
  return cores;
}

}  // namespace rannc
