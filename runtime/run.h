// rannc-run on one rank: set up, train the requested steps, report.
#pragma once

#include "runtime/mpi_world.h"
#include "runtime/run_options.h"

namespace rannc::runtime {

// Returns the exit status. Errors before training (plan, data, stage file, rank count) are
// gathered from all ranks and printed once by rank 0, and every rank returns the same status.
// An error during training prints one line naming the rank and ends the whole job.
int run(const RunOptions& options, const MpiWorld& world);

}  // namespace rannc::runtime
