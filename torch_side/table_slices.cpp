// The shards of a sharded plan, cut from the tables file partition wrote (every embedding table
// whole, as the model initialised it).
#include <torch/script.h>

#include "compiler/torch_plugin.h"
#include "support/error.h"
#include "torch_side/state_dict_file.h"
#include "torch_side/torch_error.h"

namespace rannc {

TensorDict table_slices(const std::string& tables_file, const std::vector<TorchPlugin::TableSlice>& slices) {
  torch::jit::Module tables;
  try {
    tables = torch::jit::load(tables_file);
  } catch (const std::exception& e) {
    throw InputError(tables_file + ": cannot load the tables file: " + torch_message(e));
  }
  TensorDict shards;
  for (const auto& slice : slices) {
    if (!tables.hasattr(slice.stage_name))
      throw InputError(tables_file + ": no table " + slice.stage_name + " (" + slice.table + ")");
    at::Tensor table = tables.attr(slice.stage_name).toTensor();
    shards.emplace_back(slice.table,
                        table.narrow(0, slice.row_begin, slice.rows).narrow(1, slice.col_begin, slice.cols).detach().clone());
  }
  return shards;
}

}  // namespace rannc
