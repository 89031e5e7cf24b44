// Selective recomputation in a stage file (part of the torch plugin): each attention core of a
// selective stage moves out of forward into a method of its own, core_<k>, which forward calls
// through rannc::recompute_core (torch_side/recompute_cores.h), so that rannc-run can keep only the
// core's inputs and run it again in backward. Every stage writer ends here: the TorchScript cut
// names each core's nodes as it clones them, a generated stage by the lines its source wrote the
// core's ops on.
#pragma once

#include <torch/csrc/jit/ir/ir.h>
#include <torch/script.h>

#include <vector>

namespace rannc {

// Moves core k's nodes (of forward's top block, in any order) into method core_<k> of `module`,
// which takes the core's tensor inputs and returns the tuple of the values forward reads from it;
// forward calls it in their place. Non-tensor values a core reads (a size, a scale) are computed
// again inside it from what they are computed from. `forward` is the graph of `module`'s forward,
// registered or to be. Throws std::logic_error when a core cannot be moved so (it would return a
// non-tensor, or reads a non-tensor stage input).
void outline_cores(torch::jit::Module& module, torch::jit::Graph& forward,
                   const std::vector<std::vector<torch::jit::Node*>>& cores);

// The nodes of `forward`'s top block that the given lines of its source (0-based) made, one list
// per core: how a generated stage's cores are found after Module::define compiled it.
std::vector<std::vector<torch::jit::Node*>> nodes_on_lines(torch::jit::Graph& forward,
                                                           const std::vector<std::vector<int>>& lines);

}  // namespace rannc
