// Passing a file descriptor between the processes of one node
// (harness/platform/fd_share.h) under mpirun, without a GPU: rank 0's memfd
// reaches every rank as the same file; groups of ranks share at once under
// their own names; a name nobody listens on, and importers that never come,
// fail within their deadlines with messages naming the step and the rank.
// The granularity rounding of shared_region.h rides along (host arithmetic).
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "check.h"
#include "fd_share.h"
#include "mpi_test.h"
#include "shared_region.h"

using namespace pb;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The rank's random 64-bit token, the same on every rank of comm (rank 0's).
std::string common_token(MPI_Comm comm) {
  unsigned long long token = (uint64_t(std::random_device{}()) << 32) | std::random_device{}();
  MPI_Bcast(&token, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
  return std::to_string(token);
}

// A memfd holding `text` at offset 0.
UniqueFd memfd_with(const std::string& text) {
  UniqueFd fd(::memfd_create("pb-fd-share-test", MFD_CLOEXEC));
  REQUIRE(fd);
  REQUIRE(::pwrite(fd.get(), text.data(), text.size(), 0) == ssize_t(text.size()));
  return fd;
}

std::string read_at(int fd, size_t bytes, off_t offset) {
  std::string s(bytes, '\0');
  const ssize_t got = ::pread(fd, s.data(), bytes, offset);
  s.resize(got > 0 ? size_t(got) : 0);
  return s;
}

// Rank 0 of comm shares a memfd holding a token; every rank reads it back
// through its own descriptor and writes its rank into a slot of the file,
// which rank 0 then sees: one file, not a copy.
void check_sharing(MPI_Comm comm, const std::string& what) {
  int me = 0, size = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  const std::string token = "shared by rank 0: " + common_token(comm);
  UniqueFd mine = me == 0 ? memfd_with(token) : UniqueFd();
  UniqueFd got = share_fd(mine.get(), comm, 10.0, what);
  if (me == 0) {
    CHECK_FALSE(got);
    got = std::move(mine);
  }
  REQUIRE(got);
  CHECK(read_at(got.get(), token.size(), 0) == token);
  const char slot = char('A' + me);
  CHECK(::pwrite(got.get(), &slot, 1, off_t(256 + me)) == 1);
  MPI_Barrier(comm);
  if (me == 0) {
    std::string expected;
    for (int r = 0; r < size; ++r) expected += char('A' + r);
    CHECK(read_at(got.get(), size_t(size), 256) == expected);
  }
  MPI_Barrier(comm);
}

// What `f` threw (empty: nothing) and the seconds it took.
template <class F>
std::pair<std::string, double> failure_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  }
  return {message, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

TEST_CASE("share_fd: rank 0's descriptor reaches every rank as the same file") {
  check_sharing(test::g_gang->comm(), "a test file");
}

TEST_CASE("share_fd: groups of ranks (one per GPU) share at once, each under its own name") {
  MPI_Comm group;
  MPI_Comm_split(test::g_gang->comm(), test::g_gang->rank() % 2, test::g_gang->rank(), &group);
  check_sharing(group, "a test file of this group");
  MPI_Comm_free(&group);
}

TEST_CASE("receive_fd: a name nobody listens on fails within the deadline, naming the step") {
  const std::string name = "pb-fd.nobody." + std::to_string(::getpid());
  const auto [message, waited] = failure_of([&] { receive_fd(name, 0.3, "the test region"); });
  CHECK(waited >= 0.29);
  CHECK(waited < 3.0);
  INFO(message);
  CHECK(contains(message, "sharing the test region: connect on socket '@" + name + "' failed"));
  CHECK(contains(message, "nobody listens there after 0.3 s"));
  CHECK_FALSE(contains(message, error_context()));  // "rank r on host": the prefix Gang::fail adds, once
  CHECK(contains(error_context(), "rank " + std::to_string(test::g_gang->rank())));
}

TEST_CASE("FdServer::serve: importers that never connect fail the exporter within the deadline") {
  FdServer server;
  UniqueFd fd = memfd_with("never read");
  const auto [message, waited] = failure_of([&] { server.serve(fd.get(), 2, 0.2, "the test region"); });
  CHECK(waited >= 0.19);
  CHECK(waited < 3.0);
  INFO(message);
  CHECK(contains(message, "accept on socket '@" + server.name() + "' failed: 0 of 2 importers connected within 0.2 s"));
}

TEST_CASE("FdServer::serve: one importer served, the second missing, names the count") {
  FdServer server;
  UniqueFd fd = memfd_with("served once");
  UniqueFd received;
  std::string importer_error;
  std::thread importer([&] {
    try {
      received = receive_fd(server.name(), 5.0, "the test region");
    } catch (const std::exception& e) {
      importer_error = e.what();
    }
  });
  const std::string message = failure_of([&] { server.serve(fd.get(), 2, 0.5, "the test region"); }).first;
  importer.join();
  CHECK(importer_error.empty());
  REQUIRE(received);
  CHECK(read_at(received.get(), 11, 0) == "served once");
  CHECK(contains(message, "1 of 2 importers connected within 0.5 s"));
}

TEST_CASE("throw_if_root_failed: every rank throws rank 0's message, no rank waits") {
  const bool root = test::g_gang->is_root();
  const std::string message =
      failure_of([&] { throw_if_root_failed(root ? "planted failure on rank 0" : "", test::g_gang->comm()); }).first;
  CHECK(contains(message, "planted failure on rank 0"));
  if (!root) CHECK(contains(message, "rank 0 of this communicator failed"));
  CHECK_NOTHROW(throw_if_root_failed("", test::g_gang->comm()));
}

TEST_CASE("granularity: the recommended one, at least 2 MiB, a multiple of the minimum") {
  constexpr int64_t MiB = int64_t(1) << 20;
  CHECK(region_granularity(2 * MiB, 2 * MiB) == 2 * MiB);
  CHECK(region_granularity(4096, 64 * 1024) == 2 * MiB);  // small recommendations are raised
  CHECK(region_granularity(2 * MiB, 32 * MiB) == 32 * MiB);
  CHECK(region_granularity(3 * MiB, 2 * MiB) == 3 * MiB);   // the minimum rules
  CHECK(region_granularity(3 * MiB / 2, 0) == 3 * MiB);     // 2 MiB up to a multiple of 1.5 MiB
  CHECK_THROWS_AS(region_granularity(0, 2 * MiB), Error);
  const int64_t g = 2 * MiB;
  CHECK(round_up(0, g) == 0);
  CHECK(round_up(1, g) == g);
  CHECK(round_up(g, g) == g);
  CHECK(round_up(g + 1, g) == 2 * g);
  CHECK(round_up(int64_t(22'700'000'000), g) % g == 0);
  CHECK(round_up(int64_t(22'700'000'000), g) - int64_t(22'700'000'000) < g);
  CHECK_THROWS_AS(round_up(1, 0), Error);
  CHECK_THROWS_AS(round_up(-1, g), Error);
}

TEST_CASE("share modes: the scenario's spellings, and an empty region touches nothing") {
  CHECK(share_mode_from_name("vmm") == ShareMode::vmm);
  CHECK(share_mode_from_name("ipc") == ShareMode::ipc);
  CHECK(std::string(share_mode_name(ShareMode::vmm)) == "vmm");
  CHECK(std::string(share_mode_name(ShareMode::ipc)) == "ipc");
  CHECK_THROWS_WITH_AS(share_mode_from_name("cuda"), doctest::Contains("allowed values: vmm, ipc"), Error);
  // Zero bytes: no device, no collective.
  SharedRegion empty = SharedRegion::share(ShareMode::vmm, 0, MPI_COMM_SELF, 0, "nothing", 1.0);
  CHECK(empty.base() == nullptr);
  CHECK(empty.bytes() == 0);
  CHECK(empty.granularity() == 0);
}
