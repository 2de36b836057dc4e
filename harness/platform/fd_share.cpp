#include "fd_share.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>

#include "check.h"

namespace pb {

namespace {

using Clock = std::chrono::steady_clock;

// The longest name an abstract address holds (sun_path less its leading NUL).
constexpr size_t kMaxName = sizeof(sockaddr_un::sun_path) - 1;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

[[noreturn]] void fail_step(const std::string& what, const char* step, const std::string& name,
                            const std::string& why) {
  throw_error(__FILE__, __LINE__, "sharing " + what + ": " + step + " on socket '@" + name + "' failed: " + why);
}

std::string errno_text() { return std::strerror(errno); }

Clock::time_point deadline_after(double timeout_s) {
  PB_CHECK(timeout_s > 0, "fd_share: the time-out must be positive");
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
}

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return int(std::max<int64_t>(0, left));
}

// Waits until `fd` is ready for `events` (or has an error or a hang-up, which
// the next call reports); false at the deadline.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, ms_left(deadline));
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) return true;  // the call that follows names the error
  }
}

sockaddr_un abstract_address(const std::string& name, socklen_t& length) {
  PB_CHECK(!name.empty() && name.size() <= kMaxName,
           "fd_share: socket name '" + name + "' must be 1.." + std::to_string(kMaxName) + " characters");
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: the abstract namespace
  length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

UniqueFd stream_socket() { return UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)); }

std::string fresh_name() {
  std::random_device device;
  const uint64_t token = (uint64_t(device()) << 32) ^ uint64_t(device());
  char buf[64];
  std::snprintf(buf, sizeof buf, "pb-fd.%ld.%016llx", long(::getpid()), static_cast<unsigned long long>(token));
  return buf;
}

// The peer of an accepted connection runs as this user.
bool same_user(int connection) {
  ucred peer{};
  socklen_t length = sizeof peer;
  return ::getsockopt(connection, SOL_SOCKET, SO_PEERCRED, &peer, &length) == 0 && peer.uid == ::getuid();
}

// One byte with room for one descriptor (SCM_RIGHTS): the message both sides use.
struct FdMessage {
  char byte = 'f';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

void send_fd(int connection, int fd, const std::string& name, const std::string& what) {
  FdMessage m;
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t sent;
  do sent = ::sendmsg(connection, &m.msg, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  if (sent != 1) fail_step(what, "sendmsg", name, sent < 0 ? errno_text() : "short write");
}

UniqueFd receive_on(int sock, Clock::time_point deadline, double timeout_s, const std::string& name,
                    const std::string& what) {
  for (;;) {
    if (!wait_ready(sock, POLLIN, deadline))
      fail_step(what, "recvmsg", name, "connected, but no descriptor came within " + seconds(timeout_s));
    FdMessage m;
    const ssize_t got = ::recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC);
    if (got < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (got < 0) fail_step(what, "recvmsg", name, errno_text());
    if (got == 0) fail_step(what, "recvmsg", name, "the exporter closed the connection without sending");
    const cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
    if ((m.msg.msg_flags & MSG_CTRUNC) || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
        c->cmsg_len != CMSG_LEN(sizeof(int)))
      fail_step(what, "recvmsg", name, "the message carried no descriptor");
    int fd = -1;
    std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return UniqueFd(fd);
  }
}

}  // namespace

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void UniqueFd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void mpi_ok(int rc, const char* what) {
  PB_CHECK(rc == MPI_SUCCESS, std::string(what) + " failed (MPI error " + std::to_string(rc) + ")");
}

FdServer::FdServer() : name_(fresh_name()), listener_(stream_socket()) {
  if (!listener_) fail_step("a descriptor", "socket", name_, errno_text());
  socklen_t length = 0;
  const sockaddr_un address = abstract_address(name_, length);
  if (::bind(listener_.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0)
    fail_step("a descriptor", "bind", name_, errno_text());
  if (::listen(listener_.get(), SOMAXCONN) != 0) fail_step("a descriptor", "listen", name_, errno_text());
}

void FdServer::serve(int fd, int importers, double timeout_s, const std::string& what) {
  PB_CHECK(fd >= 0, "FdServer::serve: no descriptor to share for " + what);
  const Clock::time_point deadline = deadline_after(timeout_s);
  for (int served = 0; served < importers;) {
    const int connection = ::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (connection < 0) {
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED)
        fail_step(what, "accept", name_, errno_text());
      if (!wait_ready(listener_.get(), POLLIN, deadline))
        fail_step(what, "accept", name_,
                  std::to_string(served) + " of " + std::to_string(importers) + " importers connected within " +
                      seconds(timeout_s));
      continue;
    }
    UniqueFd owned(connection);
    if (!same_user(connection)) continue;  // another user's process: not ours to serve
    send_fd(connection, fd, name_, what);
    ++served;
  }
}

UniqueFd receive_fd(const std::string& name, double timeout_s, const std::string& what) {
  const Clock::time_point deadline = deadline_after(timeout_s);
  socklen_t length = 0;
  const sockaddr_un address = abstract_address(name, length);
  for (;;) {
    UniqueFd sock = stream_socket();
    if (!sock) fail_step(what, "socket", name, errno_text());
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&address), length) == 0)
      return receive_on(sock.get(), deadline, timeout_s, name, what);
    // Nobody listens yet (ECONNREFUSED) or the backlog is full (EAGAIN): retry until the deadline.
    if (errno != ECONNREFUSED && errno != EAGAIN && errno != EINTR) fail_step(what, "connect", name, errno_text());
    if (Clock::now() >= deadline)
      fail_step(what, "connect", name,
                "nobody listens there after " + seconds(timeout_s) + " (" + errno_text() +
                    "): the exporter (rank 0 of this GPU's ranks) has exited or never listened");
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10, std::max(1, ms_left(deadline)))));
  }
}

UniqueFd share_fd(int fd, MPI_Comm comm, double timeout_s, const std::string& what) {
  int me = 0, size = 1;
  mpi_ok(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
  mpi_ok(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  if (size == 1) return {};
  // Rank 0 listens before it broadcasts the name, so a connect never races the listen.
  char name[kMaxName + 1] = {};
  std::unique_ptr<FdServer> server;
  std::string problem;
  if (me == 0) {
    try {
      server = std::make_unique<FdServer>();
      std::memcpy(name, server->name().data(), server->name().size());
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  throw_if_root_failed(problem, comm);
  mpi_ok(MPI_Bcast(name, int(sizeof name), MPI_CHAR, 0, comm), "MPI_Bcast(socket name)");
  if (me == 0) {
    server->serve(fd, size - 1, timeout_s, what);
    return {};
  }
  return receive_fd(name, timeout_s, what);
}

void throw_if_root_failed(const std::string& problem, MPI_Comm comm) {
  int me = 0;
  mpi_ok(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
  int64_t length = int64_t(problem.size());
  mpi_ok(MPI_Bcast(&length, 1, MPI_INT64_T, 0, comm), "MPI_Bcast(rank 0's problem, length)");
  if (length == 0) return;
  std::string text = me == 0 ? problem : std::string(size_t(length), ' ');
  mpi_ok(MPI_Bcast(text.data(), int(length), MPI_CHAR, 0, comm), "MPI_Bcast(rank 0's problem)");
  if (me == 0) throw Error(problem);
  throw_error(__FILE__, __LINE__, "rank 0 of this communicator failed: " + text);
}

}  // namespace pb
