// A tensor-parallel group whose ranks are threads of one process (verify chains each tensor
// rank's stage file so), its collectives in memory: no c10d, no sockets, nothing to time out.
// Each collective waits until every rank has handed in its tensor, and each rank then computes
// the result from all of them in rank order, so every rank gets the same bits.
#pragma once

#include <functional>

#include "torch_side/tensor_parallel_ops.h"

namespace rannc::tp {

// Runs body(rank) for each rank of a group of `size`, one thread each, with that rank's Group
// set as the thread's group (set_thread_group), and returns when every thread has ended. A rank
// whose body throws, or ends while the others still wait in a collective (the ranks' stages call
// different collectives), breaks the group: the others' collectives throw instead of waiting.
// The first error that is not such a consequence is rethrown.
void run_ranks_as_threads(int size, const std::function<void(int rank)>& body);

}  // namespace rannc::tp
