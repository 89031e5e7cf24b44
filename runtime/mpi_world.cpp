#include "runtime/mpi_world.h"

#include <mpi.h>
#include <unistd.h>

#include <climits>

namespace rannc::runtime {

MpiWorld::MpiWorld(int& argc, char**& argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  // The ranks of this node, ordered by world rank; the communicator is only asked and freed.
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
}

MpiWorld::~MpiWorld() { MPI_Finalize(); }

std::string MpiWorld::hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  gethostname(name, HOST_NAME_MAX);
  return name;
}

std::string MpiWorld::broadcast(const std::string& text, int root) const {
  int length = static_cast<int>(text.size());
  MPI_Bcast(&length, 1, MPI_INT, root, MPI_COMM_WORLD);
  std::string result = rank_ == root ? text : std::string(static_cast<std::size_t>(length), '\0');
  MPI_Bcast(result.data(), length, MPI_CHAR, root, MPI_COMM_WORLD);
  return result;
}

std::vector<std::string> MpiWorld::gather(const std::string& text) const {
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<std::size_t>(size_)), offsets(static_cast<std::size_t>(size_));
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += lengths[static_cast<std::size_t>(r)];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> texts;
  if (rank_ != 0) return texts;
  for (int r = 0; r < size_; ++r)
    texts.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(lengths[r])));
  return texts;
}

int MpiWorld::max(int value) const {
  int result = value;
  MPI_Allreduce(&value, &result, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return result;
}

void MpiWorld::abort(int status) const {
  MPI_Abort(MPI_COMM_WORLD, status);
  _exit(status);  // MPI_Abort does not return; this keeps the compiler and a broken MPI honest
}

}  // namespace rannc::runtime
