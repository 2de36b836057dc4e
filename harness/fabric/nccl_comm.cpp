#include "nccl_comm.h"


#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "check.h"
#include "runtime_library.h"

namespace pb {

namespace {

using Clock = std::chrono::steady_clock;

std::string version_text(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

// The library and its symbols, or why not.
struct Loaded {
  NcclApi api;
  std::string problem;  // empty when loaded
};

Loaded load_nccl() {
  Loaded l;
  std::string tried;
  void* lib = open_first({"libnccl.so.2", "libnccl.so"}, RTLD_NOW | RTLD_GLOBAL, tried);
  if (!lib) {
    l.problem = "NCCL is not available at run time (" + tried +
                "): the NCCL fabric (fabric nccl or auto across hosts) needs libnccl.so.2 >= " +
                version_text(kMinNcclVersion) + " on the library path (install libnccl2, or add its folder to "
                "LD_LIBRARY_PATH)";
    return l;
  }
  NcclApi& a = l.api;
  std::string& p = l.problem;
  resolve(lib, "ncclGetVersion", a.GetVersion, p, "NCCL");
  resolve(lib, "ncclGetUniqueId", a.GetUniqueId, p, "NCCL");
  resolve(lib, "ncclCommInitRankConfig", a.CommInitRankConfig, p, "NCCL");
  resolve(lib, "ncclCommGetAsyncError", a.CommGetAsyncError, p, "NCCL");
  resolve(lib, "ncclCommFinalize", a.CommFinalize, p, "NCCL");
  resolve(lib, "ncclCommDestroy", a.CommDestroy, p, "NCCL");
  resolve(lib, "ncclCommAbort", a.CommAbort, p, "NCCL");
  resolve(lib, "ncclGroupStart", a.GroupStart, p, "NCCL");
  resolve(lib, "ncclGroupEnd", a.GroupEnd, p, "NCCL");
  resolve(lib, "ncclSend", a.Send, p, "NCCL");
  resolve(lib, "ncclRecv", a.Recv, p, "NCCL");
  resolve(lib, "ncclGetErrorString", a.GetErrorString, p, "NCCL");
  resolve(lib, "ncclGetLastError", a.GetLastError, p, "NCCL");
  if (!p.empty()) return l;
  if (a.GetVersion(&a.version) != ncclSuccess) a.version = 0;
  if (a.version < kMinNcclVersion)
    p = "the NCCL library is version " + version_text(a.version) + "; the NCCL fabric needs " +
        version_text(kMinNcclVersion) + " or newer";
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load_nccl();
  return l;
}

std::string nccl_error(ncclResult_t rc, ncclComm_t comm) {
  const NcclApi& a = loaded().api;
  std::string s = a.GetErrorString ? a.GetErrorString(rc) : "NCCL error " + std::to_string(int(rc));
  const char* last = a.GetLastError ? a.GetLastError(comm) : nullptr;
  if (last && *last) s += " (" + std::string(last) + ")";
  return s;
}

Clock::time_point deadline_after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// NCCL reads NCCL_HOSTID once per process (its host hash): the id of the first
// links formed here is the one NCCL keeps.
std::string& process_nccl_host() {
  static std::string host;
  return host;
}

std::string bus_id_of_current_device() {
  int device = 0;
  PB_CUDA(cudaGetDevice(&device));
  char bus[32] = {};
  PB_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus, device));
  return bus;
}

}  // namespace

const NcclApi& nccl_api() {
  const Loaded& l = loaded();
  PB_CHECK(l.problem.empty(), l.problem);
  return l.api;
}

void nccl_check(ncclResult_t rc, const std::string& what) {
  if (rc != ncclSuccess && rc != ncclInProgress) throw Error(what + ": " + nccl_error(rc, nullptr));
}

std::string nccl_runtime_version() {
  const Loaded& l = loaded();
  if (!l.problem.empty()) return "not loaded: " + l.problem;
  return version_text(l.api.version);
}

NcclLinks::NcclLinks(const Gang& gang, const FabricPlan& plan, double timeout_s)
    : rank_(gang.rank()), hosts_(plan.hosts), timeout_s_(timeout_s) {
  PB_CHECK(plan.cp() == gang.size(), "NcclLinks: the fabric plan is for " + std::to_string(plan.cp()) +
                                         " ranks, the gang has " + std::to_string(gang.size()));
  PB_CHECK(timeout_s_ > 0, "NcclLinks: the time-out must be positive");
  // Every rank, NCCL peers or not, takes part in the exchanges below.
  const std::vector<std::string> bus = all_gather(gang, bus_id_of_current_device());
  for (int p = 0; p < gang.size(); ++p) {
    if (p == rank_ || plan.between(rank_, p) != Transport::nccl) continue;
    PB_CHECK(!(hosts_[size_t(p)] == hosts_[size_t(rank_)] && bus[size_t(p)] == bus[size_t(rank_)]),
             "ranks " + std::to_string(rank_) + " and " + std::to_string(p) + " share GPU " + bus[size_t(rank_)] +
                 " and host " + hosts_[size_t(rank_)] +
                 ": NCCL cannot link two ranks of one GPU on one host (\"Duplicate GPU\"); on one GPU give every "
                 "rank its own emulated host (emulate_hosts: cp) or use fabric auto");
  }
  if (plan.uses_nccl(rank_)) {
    prepare_nccl_environment(plan, rank_, /*serialized=*/true);  // the NCCL variables (CUDA has started)
    const char* host_id = std::getenv("NCCL_HOSTID");
    const std::string want = plan.emulated_hosts > 0 ? hosts_[size_t(rank_)] : std::string();
    std::string& started = process_nccl_host();
    PB_CHECK(started.empty() || started == (host_id ? host_id : ""),
             "this process started NCCL as host '" + started + "', and NCCL reads NCCL_HOSTID once per process: "
             "a fabric with other emulated hosts needs a process of its own");
    PB_CHECK(want.empty() || (host_id && want == host_id),
             "NCCL_HOSTID is '" + std::string(host_id ? host_id : "") + "' but rank " + std::to_string(rank_) +
                 "'s emulated host is '" + want + "'");
    started = host_id ? host_id : "";
  }
  form(gang, plan);
  connect();
}

NcclLinks::~NcclLinks() {
  if (links_.empty()) return;
  const NcclApi& a = loaded().api;
  if (!aborted_) {  // (abort_all() has released the communicators already)
    // Finalize every communicator, then wait for all of them: one may need its peer's finalize to proceed.
    for (Link& l : links_) {
      const ncclResult_t rc = a.CommFinalize(l.comm);
      if (rc != ncclSuccess && rc != ncclInProgress) aborted_ = true;
    }
    const Clock::time_point deadline = deadline_after(timeout_s_);
    for (Link& l : links_) {
      ncclResult_t state = ncclInProgress;
      while (!aborted_ && state == ncclInProgress) {
        if (a.CommGetAsyncError(l.comm, &state) != ncclSuccess || Clock::now() > deadline) aborted_ = true;
        else if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      if (state != ncclSuccess) aborted_ = true;
    }
    if (aborted_) warn_error(__FILE__, __LINE__, "NCCL links did not finalize within the time-out: aborted");
  }
  for (Link& l : links_) {
    if (l.comm) (aborted_ ? a.CommAbort : a.CommDestroy)(l.comm);
    if (l.stream) PB_CUDA_NOTHROW(cudaStreamDestroy(l.stream));
  }
}

std::string NcclLinks::describe(const Link& l) const {
  const int from = l.outgoing ? rank_ : l.peer, to = l.outgoing ? l.peer : rank_;
  return "the NCCL link rank " + std::to_string(from) + " (host " + hosts_[size_t(from)] + ") -> rank " +
         std::to_string(to) + " (host " + hosts_[size_t(to)] + ")";
}

// One unique id per link, drawn by its sender and exchanged over the gang;
// then every communicator of this rank in one group, so that no rank waits
// for a peer that is forming another link first.
void NcclLinks::form(const Gang& gang, const FabricPlan& plan) {
  const int cp = gang.size();
  std::string mine;
  if (plan.uses_nccl(rank_)) {
    const NcclApi& a = nccl_api();
    for (int p = 0; p < cp; ++p) {
      if (p == rank_ || plan.between(rank_, p) != Transport::nccl) continue;
      ncclUniqueId id{};
      nccl_check(a.GetUniqueId(&id), "ncclGetUniqueId (rank " + std::to_string(rank_) + ")");
      mine += std::to_string(p) + ":" + std::string(reinterpret_cast<const char*>(&id), sizeof id);
    }
  }
  const std::vector<std::string> ids = all_gather(gang, mine);  // [sender]: "<receiver>:<id>" ...
  if (!plan.uses_nccl(rank_)) return;
  const NcclApi& a = nccl_api();
  std::vector<ncclUniqueId> link_ids;
  for (int s = 0; s < cp; ++s)
    for (size_t pos = 0; pos < ids[size_t(s)].size();) {
      const std::string& rec = ids[size_t(s)];
      const size_t colon = rec.find(':', pos);
      const int receiver = std::stoi(rec.substr(pos, colon - pos));
      ncclUniqueId id{};
      std::memcpy(&id, rec.data() + colon + 1, sizeof id);
      pos = colon + 1 + sizeof id;
      if (s != rank_ && receiver != rank_) continue;
      Link l;
      l.outgoing = s == rank_;
      l.peer = l.outgoing ? receiver : s;
      links_.push_back(l);
      link_ids.push_back(id);
    }
  for (Link& l : links_) PB_CUDA(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  // Ranks of emulated hosts share one GPU: a few CTAs per link keep the
  // links' kernels from crowding out the compute (real hosts: NCCL's default).
  if (plan.emulated_hosts > 0) config.maxCTAs = 2;
  nccl_check(a.GroupStart(), "ncclGroupStart");
  for (size_t i = 0; i < links_.size(); ++i) {
    Link& l = links_[i];
    const ncclResult_t rc = a.CommInitRankConfig(&l.comm, 2, link_ids[i], l.outgoing ? 0 : 1, &config);
    if (rc != ncclSuccess && rc != ncclInProgress) {
      a.GroupEnd();
      throw Error("rank " + std::to_string(rank_) + " on host " + gang.host() + ": " + describe(l) +
                  " did not form: ncclCommInitRankConfig: " + nccl_error(rc, nullptr));
    }
  }
  const ncclResult_t rc = a.GroupEnd();
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error("rank " + std::to_string(rank_) + " on host " + gang.host() +
                ": the NCCL links did not form: " + nccl_error(rc, nullptr));
  std::vector<const Link*> used;
  for (const Link& l : links_) used.push_back(&l);
  settle(used, "forming the NCCL links (rank " + std::to_string(rank_) + " on host " + gang.host() + ")");
}

// NCCL connects a pair at its first operation, with both ends present: one
// exchange on every link now, so that later sends never wait on a connection
// (under serialize_ranks the peer is not there to answer).
void NcclLinks::connect() {
  if (links_.empty()) return;
  const NcclApi& a = nccl_api();
  void* scratch = nullptr;
  PB_CUDA(cudaMalloc(&scratch, links_.size() * sizeof(uint64_t)));
  PB_CUDA(cudaMemset(scratch, 0, links_.size() * sizeof(uint64_t)));
  PB_CUDA(cudaDeviceSynchronize());
  group_start();
  std::vector<const Link*> used;
  for (size_t i = 0; i < links_.size(); ++i) {
    Link& l = links_[i];
    uint64_t* slot = static_cast<uint64_t*>(scratch) + i;
    const ncclResult_t rc = l.outgoing ? a.Send(slot, 1, ncclUint64, l.remote(), l.comm, l.stream)
                                       : a.Recv(slot, 1, ncclUint64, l.remote(), l.comm, l.stream);
    nccl_check(rc, "connecting " + describe(l));
    used.push_back(&l);
  }
  group_end(used, "connecting the NCCL links of rank " + std::to_string(rank_));
  const Clock::time_point deadline = deadline_after(timeout_s_);
  for (const Link& l : links_) {
    for (;;) {
      const cudaError_t rc = cudaStreamQuery(l.stream);
      if (rc == cudaSuccess) break;
      PB_CHECK(rc == cudaErrorNotReady, std::string("connecting ") + describe(l) + ": " + cudaGetErrorString(rc));
      const std::string err = async_error();
      if (!err.empty() || Clock::now() > deadline) {
        abort_all();
        throw Error("rank " + std::to_string(rank_) + ": " + describe(l) + " did not connect within " +
                    std::to_string(timeout_s_) + " s" + (err.empty() ? "" : ": " + err));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  PB_CUDA(cudaFree(scratch));
}

NcclLinks::Link& NcclLinks::to(int peer) {
  for (Link& l : links_)
    if (l.outgoing && l.peer == peer) return l;
  throw_error(__FILE__, __LINE__, "NcclLinks: no NCCL link to rank " + std::to_string(peer));
}

NcclLinks::Link& NcclLinks::from(int peer) {
  for (Link& l : links_)
    if (!l.outgoing && l.peer == peer) return l;
  throw_error(__FILE__, __LINE__, "NcclLinks: no NCCL link from rank " + std::to_string(peer));
}

bool NcclLinks::has(int peer) const {
  for (const Link& l : links_)
    if (l.peer == peer) return true;
  return false;
}

std::vector<NcclLinks::Link*> NcclLinks::all() {
  std::vector<Link*> out;
  for (Link& l : links_) out.push_back(&l);
  return out;
}

void NcclLinks::group_start() {
  PB_CHECK(!aborted_, "NcclLinks: the links were aborted");
  nccl_check(nccl_api().GroupStart(), "ncclGroupStart");
}

void NcclLinks::group_end(const std::vector<const Link*>& used, const std::string& what) {
  const ncclResult_t rc = nccl_api().GroupEnd();
  if (rc != ncclSuccess && rc != ncclInProgress) {
    abort_all();
    throw Error("rank " + std::to_string(rank_) + ": " + what + ": ncclGroupEnd: " + nccl_error(rc, nullptr));
  }
  settle(used, what);
}

// Polls the nonblocking communicators until their last call has been carried
// out (enqueued on the stream, or the communicator formed).
void NcclLinks::settle(const std::vector<const Link*>& used, const std::string& what) {
  const NcclApi& a = nccl_api();
  const Clock::time_point deadline = deadline_after(timeout_s_);
  for (const Link* l : used) {
    for (;;) {
      ncclResult_t state = ncclInProgress;
      const ncclResult_t rc = a.CommGetAsyncError(l->comm, &state);
      if (rc == ncclSuccess && state == ncclSuccess) break;
      if (rc != ncclSuccess || state != ncclInProgress) {
        const std::string err = nccl_error(rc != ncclSuccess ? rc : state, l->comm);
        abort_all();
        throw Error("rank " + std::to_string(rank_) + ": " + what + ": " + describe(*l) + ": " + err);
      }
      if (Clock::now() > deadline) {
        abort_all();
        throw Error("rank " + std::to_string(rank_) + ": " + what + ": " + describe(*l) + " still in progress after " +
                    std::to_string(timeout_s_) + " s");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

std::string NcclLinks::async_error() const {
  if (aborted_) return "";
  const NcclApi& a = nccl_api();
  for (const Link& l : links_) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = a.CommGetAsyncError(l.comm, &state);
    if (rc != ncclSuccess) return describe(l) + ": " + nccl_error(rc, l.comm);
    if (state != ncclSuccess && state != ncclInProgress) return describe(l) + ": " + nccl_error(state, l.comm);
  }
  return "";
}

void NcclLinks::abort_all() noexcept {
  if (aborted_) return;
  aborted_ = true;
  const NcclApi& a = loaded().api;
  for (Link& l : links_)
    if (l.comm) a.CommAbort(l.comm);
  for (Link& l : links_) l.comm = nullptr;
}

}  // namespace pb
