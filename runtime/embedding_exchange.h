// One rank's part of a sharded plan's embedding tables (plan.json "sharding"): its shards, the
// exchange of lookups with the other ranks, and the shards' optimizer. Per step:
//
//   forward   the indices module turns this rank's model inputs into each table's ids; every id
//             goes to the ranks whose shard holds its row (table-wise and column-wise: the shard's
//             rank, every column piece; row-wise: bucketed by row range), with its sample; each
//             owner sums its rows per sample and sends the sums back (in the plan's comm dtype);
//             this rank assembles each table's pooled rows (column pieces side by side, row-wise
//             partial sums added; data-parallel tables looked up locally), averaging mean bags.
//   backward  the pooled rows' gradients go back the same way (in the backward comm dtype); each
//             owner keeps them with the ids it served; data-parallel tables' gradients add up in
//             one buffer, with a flag per row looked up.
//   step      the data-parallel tables' buffer is summed over all ranks; then the plan's sparse
//             optimizer (sgd, momentum, adam as torch.optim steps a row, or row-wise Adagrad)
//             updates in place each row looked up since the last step, once, with the sum of its
//             gradients (a fused sparse update, as TorchRec's FBGEMM optimizers do): no shard has
//             a gradient of its size, and rows not looked up keep their weights and state.
//
// Every exchange is one all-to-all over the world (Communicator::all_to_all), on host tensors.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "plan/plan.h"
#include "runtime/communicator.h"
#include "runtime/state_sync.h"

namespace torch::jit {
struct Module;
}

namespace rannc::runtime {

// Bytes this rank sent in each exchange over the steps run (and summed in the data-parallel
// tables' allreduce), and the time spent in lookups and in the exchanges.
struct ExchangeRecord {
  std::int64_t index_bytes = 0, pooled_bytes = 0, grad_bytes = 0, allreduce_bytes = 0;
  // Held in host memory all run: the host tier's shards and their optimizer state, which the
  // rank's peak tensor memory (the device's) leaves out.
  std::int64_t host_bytes = 0;
  double lookup_ms = 0;                                        // lookups and the sparse updates
  double index_ms = 0, pooled_ms = 0, grad_ms = 0, allreduce_ms = 0;  // each collective
};

class EmbeddingExchange {
 public:
  // Loads the indices module and this rank's shard file; InputError naming the file when either
  // is missing, differs from the plan's SHA-256 or lacks a shard the plan gives this rank.
  EmbeddingExchange(const plan::Plan& plan, int rank, Communicator& communicator, const OptimizerSettings& settings);
  ~EmbeddingExchange();

  // The model inputs the indices module reads (this rank's rows are given to forward()).
  const std::vector<std::string>& index_inputs() const;
  // Looks up this rank's samples (`inputs` in index_inputs() order): each table's pooled rows.
  void forward(const std::vector<at::Tensor>& inputs);
  const at::Tensor& pooled(const std::string& table) const;
  // The gradient of a table's pooled rows (several calls for one table add up).
  void add_gradient(const std::string& table, const at::Tensor& grad);
  // Sends the gradients to the shards (several backward() calls before a step add up).
  void backward();
  // Updates the rows looked up since the last step.
  void step(double lr);
  const ExchangeRecord& record() const { return record_; }

 private:
  struct Slot;   // a shard of one table on one rank
  struct Table;  // one table as this rank sees it
  struct Lookups;
  struct ShardGradient;  // a shard's lookups since the last step, with their gradients
  class RowOptimizer;    // the sparse optimizer, one row at a time

  void split_ids(const at::Tensor& ids, const at::Tensor& offsets, Table& table) const;
  std::vector<at::Tensor> lookup_owned(const std::vector<at::Tensor>& received);
  void assemble(const std::vector<at::Tensor>& received);
  void add_replicated_gradients();
  void sum_replicated_gradients();
  std::map<std::size_t, at::Tensor> whole_row_squares();
  void update_rows(const Table& table, const at::Tensor& whole_row_squares);

  const plan::Plan& plan_;
  int rank_, world_;
  Communicator& communicator_;
  std::unique_ptr<torch::jit::Module> indices_;
  std::vector<Table> tables_;
  std::vector<std::vector<Slot>> slots_;  // per rank, in table then shard order
  std::vector<at::Tensor> owned_;         // this rank's shard of each of its slots
  std::vector<ShardGradient> gradients_;  // per owned shard (data-parallel tables': in replicated_)
  at::Tensor replicated_;                 // the data-parallel tables' gradients and looked-up flags, end to end
  std::int64_t replicated_elements_ = 0;
  std::unique_ptr<RowOptimizer> optimizer_;
  std::map<std::string, std::size_t> table_index_;
  std::int64_t batch_ = 0;  // this rank's samples
  ExchangeRecord record_;
};

}  // namespace rannc::runtime
