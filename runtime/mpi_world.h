// The launcher's view of the job: which rank this process is, and the few collective steps
// that must work before (or without) c10d: the rendezvous address, agreeing on start-up errors,
// and tearing the whole job down when one rank fails mid-run.
#pragma once

#include <string>
#include <vector>

namespace rannc::runtime {

class MpiWorld {
 public:
  MpiWorld(int& argc, char**& argv);
  ~MpiWorld();
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // This rank's place among the ranks that share its node, as MPI itself knows it
  // (MPI_Comm_split_type, MPI_COMM_TYPE_SHARED): right under mpirun, srun or any MPI-3 launcher,
  // whatever the environment says.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  static std::string hostname();

  // Rank `root`'s text, on every rank.
  std::string broadcast(const std::string& text, int root) const;
  // Every rank's text, indexed by rank, on rank 0 (empty elsewhere).
  std::vector<std::string> gather(const std::string& text) const;
  int max(int value) const;

  // Ends every rank of the job with `status` (mpirun kills the others).
  [[noreturn]] void abort(int status) const;

 private:
  int rank_ = 0, size_ = 1;
  int local_rank_ = 0, local_size_ = 1;
};

}  // namespace rannc::runtime
