// The tensor-parallel collectives a tensor rank's stage file calls, by operator name: the one place
// the stage writers take them from (the TorchScript cut, frontends/torchscript/tensor_rank_cut.h,
// inserts them as nodes; the cut of generated source, compiler/source_rank_cut.h, writes them as
// calls) and librannc_tensor_parallel.so registers them (torch_side/tensor_parallel_ops.h). Pure C++.
#pragma once

#include <string>

namespace rannc::tp {

// Before a column-parallel op: forward the identity, backward the gradient summed over the group.
inline constexpr const char* kCopy = "rannc::tp_copy";
// After a row-parallel op: forward the sum over the group, backward the identity.
inline constexpr const char* kReduce = "rannc::tp_reduce";
// Entering a sequence-parallel region's tensor-parallel ops, (x, dim): forward all-gather along
// dim, backward reduce-scatter.
inline constexpr const char* kGather = "rannc::tp_gather";
// Leaving them for sequence-parallel ops, (x, dim): forward reduce-scatter along dim, backward all-gather.
inline constexpr const char* kReduceScatter = "rannc::tp_reduce_scatter";
// Entering sequence-parallel ops from a whole tensor, (x, dim): forward this rank's chunk along
// dim, backward all-gather.
inline constexpr const char* kSplit = "rannc::tp_split";
// Leaving sequence-parallel ops to a whole tensor, (x, dim): forward all-gather along dim,
// backward this rank's chunk of the gradient.
inline constexpr const char* kJoin = "rannc::tp_join";

// An operator as TorchScript source calls it: "rannc::tp_copy" -> "torch.ops.rannc.tp_copy".
inline std::string script_callee(const std::string& qualified) {
  auto colons = qualified.find("::");
  return "torch.ops." + qualified.substr(0, colons) + "." + qualified.substr(colons + 2);
}

}  // namespace rannc::tp
