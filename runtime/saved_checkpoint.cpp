#include "runtime/saved_checkpoint.h"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <optional>
#include <map>

#include "plan/plan_json.h"
#include "runtime/rank_layout.h"
#include "support/error.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/tensor_rank_slices.h"

namespace rannc::runtime {
namespace {

// Elements a weight of a checkpoint may have: more is a corrupt or hostile file, not a weight.
constexpr double kMaxWeightElements = 1e13;

// Each name of `wanted` under the first stage holding it, the one whose copy stands for all (a
// tied weight is the same in every stage that holds it, its gradients summed over them all);
// weights only, without buffers, when `params_only`. Found in one pass over the stages.
std::map<int, std::vector<std::string>> by_owner(const plan::Plan& plan, const std::set<std::string>& wanted,
                                                 bool params_only) {
  std::map<int, std::vector<std::string>> owned;
  std::set<std::string> placed;
  for (const auto& stage : plan.stages) {
    for (const auto* list : {&stage.params, &stage.buffers}) {
      if (params_only && list == &stage.buffers) continue;
      for (const auto& weight : *list)
        if (wanted.count(weight.name) && placed.insert(weight.name).second) owned[stage.id].push_back(weight.name);
    }
  }
  return owned;
}

// The tensor ranks whose files a stage's names need: all of them when one is split.
int ranks_needed(const plan::Stage& stage, const std::vector<std::string>& names) {
  bool split = std::any_of(names.begin(), names.end(),
                           [&](const auto& name) { return stage.tensor_parallel.split_of(name) != nullptr; });
  return split ? stage.tensor_parallel.degree : 1;
}

const at::Tensor& named(const TensorDict& tensors, const std::string& name, const std::string& file) {
  auto found = std::find_if(tensors.begin(), tensors.end(), [&](const auto& entry) { return entry.first == name; });
  if (found == tensors.end()) throw InputError(file + ": has no '" + name + "'");
  return found->second;
}

// An entry of an optimizer state file: "NAME:FIELD" or "NAME:FIELD@OFFSET" (NAME may hold ':',
// as ONNX initializer names do; FIELD does not).
struct StateKey {
  std::string name, field;
  std::int64_t offset = -1;  // -1: the whole weight
};

StateKey parse_state_key(const std::string& key, const std::string& file) {
  auto colon = key.rfind(':');
  auto bad = [&] { return InputError(file + ": '" + key + "' is not an optimizer state entry (NAME:FIELD[@OFFSET])"); };
  if (colon == std::string::npos || colon == 0) throw bad();
  StateKey parsed{key.substr(0, colon), key.substr(colon + 1)};
  auto at = parsed.field.find('@');
  if (at == std::string::npos) return parsed;
  auto digits = parsed.field.substr(at + 1);
  parsed.field.resize(at);
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) throw bad();
  parsed.offset = std::stoll(digits);
  return parsed;
}

// A weight's optimizer state as one tensor rank held it, from whole entries or from the pieces
// its shards held.
struct PartialState {
  std::int64_t step = 0;
  std::optional<std::vector<std::int64_t>> shape;  // given with pieces (empty: a 0-dim weight)
  std::map<std::string, at::Tensor> fields;
  std::map<std::string, std::int64_t> pieces_filled;  // elements, of fields made of pieces
};

void add_entry(PartialState& state, const StateKey& key, const at::Tensor& tensor, const std::string& file) {
  auto what = [&] { return file + ": '" + key.name + ":" + key.field + "'"; };
  if (key.field == "step") {
    if (tensor.numel() != 1) throw InputError(what() + ": not one number");
    state.step = tensor.to(at::kLong).item<std::int64_t>();
  } else if (key.field == "shape") {
    auto dims = tensor.to(at::kLong).contiguous();
    std::vector<std::int64_t> shape(dims.data_ptr<std::int64_t>(), dims.data_ptr<std::int64_t>() + dims.numel());
    double elements = 1;
    for (auto dim : shape) elements *= static_cast<double>(dim);
    if (tensor.dim() != 1 || std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; }) ||
        elements > kMaxWeightElements)
      throw InputError(what() + ": not the dims of a weight");
    state.shape = std::move(shape);
  } else if (key.offset < 0) {
    state.fields[key.field] = tensor;
  } else {
    if (!state.shape) throw InputError(what() + ": a piece of a weight whose shape the file does not give");
    auto& buffer = state.fields[key.field];
    if (!buffer.defined()) buffer = at::zeros(*state.shape, tensor.options());
    if (tensor.dim() != 1 || key.offset + tensor.numel() > buffer.numel())
      throw InputError(what() + ": a piece beyond the weight's " + std::to_string(buffer.numel()) + " elements");
    buffer.view({-1}).narrow(0, key.offset, tensor.numel()).copy_(tensor);
    state.pieces_filled[key.field] += tensor.numel();
  }
}

// The whole state from each tensor rank's (one when the weight is not split).
ParamState whole_state(const std::string& name, std::vector<PartialState>& ranks,
                       const plan::TensorParallel::SplitWeight* split, const std::string& folder) {
  for (auto& rank : ranks) {
    for (const auto& [field, filled] : rank.pieces_filled)
      if (filled != rank.fields.at(field).numel())
        throw InputError(folder + ": the shards of '" + name + "' hold " + std::to_string(filled) + " of its " +
                         std::to_string(rank.fields.at(field).numel()) + " elements of " + field);
    if (rank.fields.size() != ranks.front().fields.size())
      throw InputError(folder + ": the tensor ranks of '" + name + "' hold different optimizer state");
  }
  ParamState whole{ranks.front().step, {}};
  for (const auto& [field, tensor] : ranks.front().fields) {
    if (!split) {
      whole.fields.emplace_back(field, tensor);
      continue;
    }
    std::vector<at::Tensor> slices;
    for (auto& rank : ranks) slices.push_back(rank.fields.at(field));
    whole.fields.emplace_back(field, joined_slices(slices, *split));
  }
  return whole;
}

}  // namespace

SavedCheckpoint::SavedCheckpoint(std::string folder, plan::CheckpointManifest manifest)
    : folder_(std::move(folder)), manifest_(std::move(manifest)) {
  plan_ = plan::read_plan_file(checked(plan::kCheckpointPlanFile));
}

std::string SavedCheckpoint::checked(const std::string& file) const {
  return plan::checked_checkpoint_file(folder_, manifest_, file);
}

void SavedCheckpoint::read_weights(const std::set<std::string>& wanted, const TakeTensor& take) const {
  for (const auto& [id, names] : by_owner(plan_, wanted, false)) {
    const auto& stage = plan_.stages.at(static_cast<std::size_t>(id));
    std::vector<std::string> files;
    std::vector<TensorDict> ranks;
    for (int t = 0; t < ranks_needed(stage, names); ++t) {
      files.push_back(checked(plan::stage_weights_file(stage, t)));
      ranks.push_back(read_state_dict(files.back(), "checkpoint"));
    }
    for (const auto& name : names) {
      const auto* split = stage.tensor_parallel.split_of(name);
      if (!split) {
        take(name, named(ranks.front(), name, files.front()));
        continue;
      }
      std::vector<at::Tensor> slices;
      for (std::size_t t = 0; t < ranks.size(); ++t) slices.push_back(named(ranks[t], name, files[t]));
      take(name, joined_slices(slices, *split));
    }
  }
}

// Each rank wrote its shards to its own file, or shared one written by its stage's first
// replica: the files and whose chunks each holds, once each.
std::vector<SavedCheckpoint::OptimizerFile> SavedCheckpoint::optimizer_files() const {
  RankLayout layout(plan_);
  std::vector<OptimizerFile> files;
  for (int rank = 0; rank < layout.world_size(); ++rank) {
    auto placement = layout.placement(rank);
    auto stages = layout.stages_of(rank);
    std::string file = plan::rank_optimizer_file(rank);
    if (!manifest_.files.count(file))
      file = plan::stage_optimizer_file(plan_.stages.at(static_cast<std::size_t>(stages.front())), placement.tensor_rank);
    bool listed = std::any_of(files.begin(), files.end(), [&](const auto& known) { return known.file == file; });
    if (!listed) files.push_back({file, stages, placement.tensor_rank});
  }
  return files;
}

void SavedCheckpoint::read_optimizer_state(const std::set<std::string>& wanted, const TakeState& take) const {
  const auto files = optimizer_files();
  for (const auto& [id, names] : by_owner(plan_, wanted, true)) {
    const auto& stage = plan_.stages.at(static_cast<std::size_t>(id));
    // A tied weight's shards may be on the ranks of each stage that holds it.
    std::set<int> holders;
    for (const auto& other : plan_.stages)
      for (const auto& name : names)
        if (other.holds(name, false)) holders.insert(other.id);
    const int degree = ranks_needed(stage, names);
    std::map<std::string, std::vector<PartialState>> partial;
    for (const auto& name : names) partial[name].resize(static_cast<std::size_t>(degree));
    for (const auto& source : files) {
      bool relevant = source.tensor_rank < degree && std::any_of(source.stages.begin(), source.stages.end(),
                                                                 [&](int s) { return holders.count(s) > 0; });
      if (!relevant) continue;
      auto path = checked(source.file);
      for (const auto& [key, tensor] : read_state_dict(path, "checkpoint")) {
        auto parsed = parse_state_key(key, path);
        auto found = partial.find(parsed.name);
        if (found == partial.end()) continue;
        add_entry(found->second[static_cast<std::size_t>(source.tensor_rank)], parsed, tensor, path);
      }
    }
    for (auto& [name, ranks] : partial)
      if (!ranks.front().fields.empty()) take(name, whole_state(name, ranks, stage.tensor_parallel.split_of(name), folder_));
  }
}

std::optional<at::Tensor> SavedCheckpoint::random_state(int rank) const {
  auto file = plan::rank_state_file(rank);
  if (!manifest_.files.count(file)) return std::nullopt;
  auto path = checked(file);
  auto tensors = read_state_dict(path, "checkpoint");
  return named(tensors, kRandomStateKey, path);
}

}  // namespace rannc::runtime
