// NCCL process groups, in builds against a libtorch with NCCL (RANNC_WITH_NCCL, set by CMake
// when it finds ProcessGroupNCCL and nccl.h); the only runtime file that names NCCL.
#pragma once

#include <chrono>

#include "runtime/communicator.h"

namespace c10d {
class Store;
}

namespace rannc::runtime {

// Whether this build can make NCCL groups.
bool nccl_built();

// A group of `size` ranks over `store` on this rank's current GPU. Throws std::logic_error in a
// build without NCCL.
c10::intrusive_ptr<CommGroup> nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         std::chrono::seconds timeout);

}  // namespace rannc::runtime
