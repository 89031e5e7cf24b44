// Module paths of ops ("encoder.layers.3.self_attn"): how the frontends read them from what the
// exporters leave behind, and how a stage's share of the model is named by them
// ("embed, layers.0-2").
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace rannc::ir {

// The module of a node named by torch.onnx.export ("/encoder/layers.0/self_attn/MatMul" ->
// "encoder.layers.0.self_attn"; a Sequential's child, "/layers/layers.0/Gemm" -> "layers.0");
// "" for a node at the top of the model ("/MatMul") or a name without such a path
// ("MatMul_12", "").
std::string module_path_from_onnx_name(std::string_view node_name);

// The innermost module of a torch.export node's "nn_module_stack" metadata, entries
// "key,path,type" joined by ';' from the outermost (the model, path "") inward:
// "L__self__,,M;L__self___layers_0,layers.0,torch.nn.Linear" -> "layers.0". "" when the stack
// names no module below the model, or is a placeholder (_empty_nn_module_stack_...).
std::string module_path_from_nn_module_stack(std::string_view stack);

// The block a module path belongs to, the unit a stage's modules are named by: the path up to
// its first component that is a number ("layers.3" of "layers.3.self_attn.out_proj"); without
// one, up to its first component numbered after an underscore ("encoder.layers.encoder_layer_3"
// of torchvision's ViT); else its first component ("embed" of "embed.norm").
std::string module_block(std::string_view path);

// The blocks of the modules of `ops`, each once, in the order of the ops; ops without a module
// are skipped. Linear in the ops and the graph's distinct module paths.
std::vector<std::string> module_blocks(const Graph& graph, const std::vector<OpId>& ops);

// Blocks as people read them: consecutive numbered siblings as one range, the rest as they are,
// joined by ", " ({"embed", "layers.0", "layers.1", "layers.2", "head"} ->
// "embed, layers.0-2, head"); cut to `max_chars` with "..." when longer.
std::string modules_summary(const std::vector<std::string>& blocks, std::size_t max_chars = 40);

}  // namespace rannc::ir
