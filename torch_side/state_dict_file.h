// State dicts on disk in PyTorch's own format: what `torch.save(model.state_dict(), f)` writes and
// `torch.load(f)` reads. The runtime's checkpoints, `rannc-partition export` and `rannc-run --init`
// go through here, so a file one writes the others (and Python) read.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace rannc {

// Named tensors in order (a state_dict's order is the model's).
using TensorDict = std::vector<std::pair<std::string, at::Tensor>>;

// The bytes of a file `torch.load` reads back as a dict {name: tensor}.
std::string state_dict_bytes(const TensorDict& tensors);

// A dict of tensors saved by torch.save (a state_dict, whose OrderedDict libtorch 1.13 cannot
// unpickle on its own, or a plain dict) or by state_dict_bytes. InputError "PATH: ..." naming
// `what` when the file is missing, not a regular file, not a PyTorch archive, or holds anything
// but string keys and tensor values.
TensorDict read_state_dict(const std::string& path, const std::string& what);
// The same for a torch.save file held in memory (a .pt2 archive's state dict); `what` begins
// every message ("model.pt2: the state dict (serialized_state_dict.pt)").
TensorDict read_state_dict_bytes(const std::string& bytes, const std::string& what);

}  // namespace rannc
