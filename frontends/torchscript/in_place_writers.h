// Which TorchScript nodes change a value's contents in place, read from the alias annotations
// of the op schemas: `Tensor(a!) self` writes its argument, `Tensor(a) self` returns a view of
// it (a slice, a view, a split unpacked from its list), and a write to a view writes the value.
// torch's AliasDb would count every graph input as written as soon as anything is written in
// place. The frontend records these writes in the IR (ir::Value::writers); the stage writer
// copies a stage input that its ops write.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <vector>

namespace rannc {

namespace detail {

inline void collect_in_place_writers(const torch::jit::Value* value, std::vector<torch::jit::Node*>& writers) {
  for (const auto& use : value->uses()) {
    torch::jit::Node* user = use.user;
    const auto* schema = user->maybeSchema();
    bool unpacks = user->kind() == c10::prim::ListUnpack || user->kind() == c10::prim::TupleUnpack;
    if (!schema && !unpacks) continue;
    if (schema) {
      if (use.offset >= schema->arguments().size()) continue;
      const auto* alias = schema->arguments()[use.offset].alias_info();
      if (!alias) continue;  // read only
      if (alias->isWrite()) writers.push_back(user);
    }
    // Its outputs alias the value (a view, the tensor an in-place op returns, an unpacked
    // element): writes to them write the value.
    for (const torch::jit::Value* output : user->outputs()) collect_in_place_writers(output, writers);
  }
}

}  // namespace detail

// The nodes that write `value` or a view of it, in no particular order (a node may repeat).
inline std::vector<torch::jit::Node*> in_place_writers(const torch::jit::Value* value) {
  std::vector<torch::jit::Node*> writers;
  detail::collect_in_place_writers(value, writers);
  return writers;
}

}  // namespace rannc
