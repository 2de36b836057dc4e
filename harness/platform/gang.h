// The MPI gang: one process per GPU, launched by mpirun.
//
// Rank 0 reads inputs and broadcasts them; results gather to rank 0, which
// alone writes files. The node-local rank comes from a shared-memory split of
// the world, and the GPU is local_rank mod the visible device count. A rank
// that fails calls fail(), which prints its message with rank and host and
// aborts the whole job (MPI_Abort): a failure never leaves the others hanging.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "results.h"

namespace pb {

class Gang {
 public:
  // MPI_Init (once) and the rank / host / local-rank discovery.
  Gang(int* argc, char*** argv);
  ~Gang();
  Gang(const Gang&) = delete;
  Gang& operator=(const Gang&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  const std::string& host() const { return host_; }
  bool is_root() const { return rank_ == 0; }
  MPI_Comm comm() const { return MPI_COMM_WORLD; }
  std::string describe() const;  // "rank 3/8 on host gpu07 (local 3/8)"

  // Rank 0's value, on every rank.
  std::string broadcast(const std::string& from_root) const;
  // Every rank's value, on rank 0 in rank order (empty elsewhere).
  std::vector<std::string> gather(const std::string& mine) const;
  void barrier() const;

  // Prints "[rank r on host h] error: message" and aborts the job.
  [[noreturn]] void fail(const std::string& message, int code = 1) const;

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string host_;
  bool owns_mpi_ = false;
};

// Spans and per-rank records travel between ranks as bytes.
std::string pack_spans(const std::vector<Span>& spans);
std::vector<Span> unpack_spans(const std::string& bytes);
std::string pack_bells(const std::vector<BellOp>& bells);
std::vector<BellOp> unpack_bells(const std::string& bytes);
std::string pack_rank_reps(const std::vector<RankRep>& reps);
std::vector<RankRep> unpack_rank_reps(const std::string& bytes);

}  // namespace pb
