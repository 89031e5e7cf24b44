// `rannc-partition sweep MODEL --gpus 8,16,...`: the model planned on each device count, one
// row each (layout, microbatches, predicted samples/s, model TFLOP/s per device and share of
// peak, memory), as a table, as JSON or as CSV. The model is read and costed once.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "compiler/partition.h"

namespace rannc {

struct SweepOptions {
  PartitionOptions partition;  // everything but the device count, which each row sets
  // --gpus: the device counts, in the order given ("8", "16", ...), or one mix of presets
  // ("a100-40g:16", "h100-80g:16"), planned as each kind alone and then as the mix.
  std::vector<std::string> gpus;
  std::string csv_path;        // also write the rows here ("" : no CSV)
};

struct SweepReport {
  nlohmann::json rows;  // what --json prints: one object per device count
  std::string text;     // the table printed otherwise
};

// Throws InputError for bad options or input. A device count no plan fits is a row that says
// why, not an error: the sweep shows where a model starts to fit.
SweepReport run_sweep(const SweepOptions& options);

}  // namespace rannc
