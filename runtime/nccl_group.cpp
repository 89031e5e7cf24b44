#include "runtime/nccl_group.h"

#include <stdexcept>

#ifdef RANNC_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#include <torch/csrc/distributed/c10d/Store.hpp>
#endif

namespace rannc::runtime {

#ifdef RANNC_WITH_NCCL

bool nccl_built() { return true; }

c10::intrusive_ptr<CommGroup> nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                         std::chrono::seconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

#else

bool nccl_built() { return false; }

c10::intrusive_ptr<CommGroup> nccl_group(const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::seconds) {
  throw std::logic_error("this rannc-run was built without NCCL");
}

#endif

}  // namespace rannc::runtime
