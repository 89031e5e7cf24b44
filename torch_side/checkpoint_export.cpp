#include "torch_side/checkpoint_export.h"

#include <algorithm>
#include <map>
#include <set>

#include "support/atomic_file.h"
#include "support/error.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/tensor_rank_slices.h"
#include "torch_side/torch_error.h"

namespace rannc {
namespace {

at::Tensor* split_weight(TensorDict& tensors, const std::string& name, const std::string& file) {
  auto found = std::find_if(tensors.begin(), tensors.end(), [&](const auto& named) { return named.first == name; });
  if (found == tensors.end()) throw InputError(file + ": has no '" + name + "', a split weight of its stage");
  return &found->second;
}

// A stage's tensors, whole: a tensor-parallel stage's split weights joined from its tensor ranks'
// files, its other tensors from the first (every rank of the group holds the same).
TensorDict stage_tensors(const TorchPlugin::ExportRequest::StageFiles& stage) {
  std::vector<TensorDict> ranks;
  for (const auto& file : stage.files) ranks.push_back(read_state_dict(file, "checkpoint"));
  TensorDict whole = ranks.front();
  for (const auto& split : stage.split) {
    std::vector<at::Tensor> slices;
    for (std::size_t r = 0; r < ranks.size(); ++r) slices.push_back(*split_weight(ranks[r], split.name, stage.files[r]));
    *split_weight(whole, split.name, stage.files.front()) = joined_slices(slices, split);
  }
  return whole;
}

// The stages' tensors in stage order. A tied weight is in each stage that uses it, the same after
// every step (its gradients are summed over all holders), so the first copy stands for all.
TensorDict merged_stages(const std::vector<TorchPlugin::ExportRequest::StageFiles>& stages) {
  TensorDict merged;
  std::set<std::string> seen;
  for (const auto& stage : stages)
    for (auto& [name, tensor] : stage_tensors(stage))
      if (seen.insert(name).second) merged.emplace_back(name, tensor);
  return merged;
}

// The module's state_dict entries in PyTorch's order: module by module, parameters then buffers.
TensorDict module_state(const torch::jit::Module& model) {
  TensorDict state;
  for (const auto& sub : model.named_modules()) {
    std::string prefix = sub.name.empty() ? "" : sub.name + ".";
    for (const auto& param : sub.value.named_parameters(false)) state.emplace_back(prefix + param.name, param.value);
    for (const auto& buffer : sub.value.named_buffers(false)) state.emplace_back(prefix + buffer.name, buffer.value);
  }
  return state;
}

torch::jit::Module load_model(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const c10::Error& e) {
    throw InputError(path + ": cannot load the model: " + torch_message(e));
  }
}

// The tensors named, in that order: a model's state_dict without the stages' constants. A name
// no stage holds (a weight no op reads) is counted as untouched.
TensorDict only_named(TensorDict tensors, const std::vector<std::string>& names, TorchPlugin::ExportResult& result) {
  std::map<std::string, at::Tensor> by_name(tensors.begin(), tensors.end());
  TensorDict named;
  for (const auto& name : names) {
    auto found = by_name.find(name);
    if (found == by_name.end()) ++result.untouched;
    else named.emplace_back(name, found->second);
  }
  return named;
}

}  // namespace

ExportedCheckpoint export_checkpoint(const TorchPlugin::ExportRequest& request) {
  ExportedCheckpoint exported;
  auto& result = exported.result;
  TensorDict state;
  if (request.model.empty()) {
    state = merged_stages(request.stages);
    if (!request.state_dict_names.empty()) state = only_named(std::move(state), request.state_dict_names, result);
    for (const auto& [alias, held_as] : request.state_dict_aliases) {
      auto held = std::find_if(state.begin(), state.end(), [&](const auto& entry) { return entry.first == held_as; });
      if (held == state.end()) ++result.untouched;
      else state.emplace(held + 1, alias, held->second);  // the same tensor: torch.save keeps them tied
    }
    result.trained = static_cast<int>(state.size());
  } else {
    auto stages = merged_stages(request.stages);
    std::map<std::string, at::Tensor> merged(stages.begin(), stages.end());
    auto model = load_model(request.model);
    state = module_state(model);
    at::NoGradGuard no_grad;
    for (auto& [name, tensor] : state) {
      auto found = merged.find(name);
      if (found == merged.end()) {
        ++result.untouched;
        continue;
      }
      if (found->second.sizes() != tensor.sizes())
        throw InputError("export: '" + name + "' is " + c10::str(found->second.sizes()) + " in the checkpoint, " +
                         c10::str(tensor.sizes()) + " in " + request.model);
      tensor.copy_(found->second);  // the model's own tensor: --module saves it so
      merged.erase(found);
      ++result.trained;
    }
    if (!merged.empty())
      throw InputError("export: the checkpoint's '" + merged.begin()->first + "' is not in " + request.model);
    if (!request.module_output.empty()) exported.model = model;
  }
  write_file_atomically(request.output, state_dict_bytes(state), "the state_dict");
  return exported;
}

}  // namespace rannc
