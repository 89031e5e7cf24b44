// Files that start a plan's job: launch.sh (mpirun on an allocation or one machine) and
// job.sbatch (a SLURM batch job). Both sit beside plan.json and find it relative to themselves,
// so the output folder can be moved or copied to the cluster as a whole.
#pragma once

#include <string>

#include "plan/plan.h"

namespace rannc::emit {

// The ranks a plan runs (devices that carry no stage get none).
int launched_ranks(const plan::Plan& plan);

// Both scripts take rannc-run from $RANNC_RUN, else from `runtime_folder` (the folder of the
// rannc-partition that wrote the plan, where rannc-run is built and installed beside it; empty:
// none), else from PATH; when none is found they say so in one line and exit 2.

// `mpirun -np R rannc-run plan.json "$@"`, from any working directory.
std::string launch_script(const plan::Plan& plan, const std::string& runtime_folder);

// A SLURM job of the plan's nodes, one task per rank, one GPU per task, with commented-out
// placeholders for the cluster's --time, --partition and --account. The ranks start by
// `srun --mpi=pmix`, or by `mpirun` with RANNC_LAUNCHER=mpirun (any other value: one line, exit 2).
std::string sbatch_script(const plan::Plan& plan, const std::string& runtime_folder);

}  // namespace rannc::emit
