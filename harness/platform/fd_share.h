// Handing a file descriptor from one process to the others of its node: a
// Unix domain socket in the abstract namespace, the descriptor in an
// SCM_RIGHTS message. The CUDA virtual memory API exports device memory as such
// a descriptor (shared_region.h).
//
//   FdServer server                      listens on a fresh name, "pb-fd.<pid>.<64 random bits>"
//   server.serve(fd, n, timeout_s, what) accepts n connections and sends each a copy of fd
//   receive_fd(name, timeout_s, what)    connects to name; the descriptor sent there, owned
//   share_fd(fd, comm, timeout_s, what)  collective: comm's rank 0 passes fd, every other
//                                        rank gets its own copy (rank 0 gets none back)
//
// Every step has a deadline: a peer that never comes is an error naming the
// step, the socket and the seconds waited, never a hang. `what` says in the
// message what was being shared ("the weights"); the rank and host come with
// every pb::Error (check.h). The server serves any process of its own user
// (SO_PEERCRED) that connects; only the communicator's ranks are told the name.
#pragma once

#include <mpi.h>

#include <string>

namespace pb {

// Owns a file descriptor (closed on destruction); -1 = none.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();

 private:
  int fd_ = -1;
};

class FdServer {
 public:
  FdServer();  // binds and listens; throws naming the step
  const std::string& name() const { return name_; }
  // Accepts `importers` connections by the deadline and sends each a copy of `fd`.
  void serve(int fd, int importers, double timeout_s, const std::string& what);

 private:
  std::string name_;
  UniqueFd listener_;
};

// Connects to the server `name` (retrying while nobody listens, until the
// deadline) and returns the descriptor it sends.
UniqueFd receive_fd(const std::string& name, double timeout_s, const std::string& what);

// Collective over comm (one node): rank 0 passes `fd` (ignored elsewhere);
// every other rank returns its copy, rank 0 an empty UniqueFd. When rank 0
// cannot listen, every rank throws its message.
UniqueFd share_fd(int fd, MPI_Comm comm, double timeout_s, const std::string& what);

// Collective over comm: broadcasts rank 0's `problem` (empty: none); when
// there is one, every rank throws it, the others saying it came from rank 0.
// Rank 0 catches its failure and calls this, so that no rank waits for it.
void throw_if_root_failed(const std::string& problem, MPI_Comm comm);

// Throws naming `what` when an MPI call did not return MPI_SUCCESS.
void mpi_ok(int rc, const char* what);

}  // namespace pb
