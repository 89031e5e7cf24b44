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
//             owner adds them into its shard's gradient at the ids it served; data-parallel tables'
//             gradients are summed over all ranks.
//   step      the shards step with the plan's sparse optimizer (sgd, momentum, adam as torch.optim,
//             or row-wise Adagrad), at rannc-run's learning rate.
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
  double lookup_ms = 0;                                        // lookups and gradient scatters
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
  // Sends the gradients to the shards and sums the data-parallel tables' over all ranks.
  void backward();
  void step(double lr);
  const ExchangeRecord& record() const { return record_; }

 private:
  struct Slot;   // a shard of one table on one rank
  struct Table;  // one table as this rank sees it
  struct Lookups;

  void split_ids(const at::Tensor& ids, const at::Tensor& offsets, Table& table) const;
  std::vector<at::Tensor> lookup_owned(const std::vector<at::Tensor>& received);
  void assemble(const std::vector<at::Tensor>& received);

  const plan::Plan& plan_;
  int rank_, world_;
  Communicator& communicator_;
  std::unique_ptr<torch::jit::Module> indices_;
  std::vector<Table> tables_;
  std::vector<std::vector<Slot>> slots_;  // per rank, in table then shard order
  std::vector<at::Tensor> owned_;         // this rank's shard of each of its slots (leaves with .grad())
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // sgd, momentum, adam
  std::vector<at::Tensor> row_sums_;                     // rowwise_adagrad: one accumulator per row of each shard
  std::map<std::string, std::size_t> table_index_;
  std::int64_t batch_ = 0;  // this rank's samples
  ExchangeRecord record_;
};

}  // namespace rannc::runtime
