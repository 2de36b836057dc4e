// NCCL for the CP lane's fabric (fabric.h): the library, loaded at run time,
// and this rank's links to the peers the fabric plan puts on NCCL.
//
// The library is dlopen()ed ("libnccl.so.2"), so the binary starts, and the
// IPC fabric runs, on machines without NCCL; the NCCL fabric then stops with
// what is missing. nccl.h gives the types only.
//
// A link is one direction of one pair: a two-rank communicator (the sender is
// its rank 0, the receiver its rank 1) with a stream of its own. NCCL runs the
// operations of one communicator one after another, whichever stream they are
// on, so a pair's two directions and each rank's several peers get separate
// communicators: a send that waits for its receiver never holds up another
// link. Communicators are nonblocking (config.blocking = 0): every NCCL host
// call returns at once and the host polls its state against the deadline, so
// a peer that never joins fails the gang instead of hanging it.
//
//   NcclLinks links(gang, plan, /*timeout_s=*/60);   // collective over the gang
//   links.group_start();
//   nccl_api().Send(buf, n, ncclUint8, links.to(p).remote(), links.to(p).comm, links.to(p).stream);
//   links.group_end({&links.to(p)}, "the window to rank p");
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "fabric_plan.h"
#include "gang.h"

namespace pb {

// The NCCL calls the fabric makes, resolved from the library at run time.
struct NcclApi {
  ncclResult_t (*GetVersion)(int*) = nullptr;
  ncclResult_t (*GetUniqueId)(ncclUniqueId*) = nullptr;
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*CommFinalize)(ncclComm_t) = nullptr;
  ncclResult_t (*CommDestroy)(ncclComm_t) = nullptr;
  ncclResult_t (*CommAbort)(ncclComm_t) = nullptr;
  ncclResult_t (*GroupStart)() = nullptr;
  ncclResult_t (*GroupEnd)() = nullptr;
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  const char* (*GetErrorString)(ncclResult_t) = nullptr;
  const char* (*GetLastError)(ncclComm_t) = nullptr;
  int version = 0;  // NCCL_VERSION_CODE of the loaded library, e.g. 22809
};

// Loads the library once; throws pb::Error naming what is missing (the
// library, a symbol, or a version older than kMinNcclVersion).
constexpr int kMinNcclVersion = 21900;  // nonblocking communicators with CTA limits in their config
const NcclApi& nccl_api();
// "2.28.9", or "not loaded: <why>". Never throws (run records).
std::string nccl_runtime_version();
// Throws pb::Error "<what>: <NCCL's error string> (<its last error>)" unless
// rc is ncclSuccess or ncclInProgress (a nonblocking call under way).
void nccl_check(ncclResult_t rc, const std::string& what);

class NcclLinks {
 public:
  struct Link {
    int peer = -1;
    bool outgoing = false;  // this rank sends on it
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
    int remote() const { return outgoing ? 1 : 0; }  // the peer's rank in the communicator
  };

  // Collective over the gang (every rank, NCCL peers or not, with the same
  // plan, each on its CUDA device): sets this process's NCCL environment
  // (fabric_plan.h), forms both links of every NCCL pair of this rank and
  // connects them, all within timeout_s. Throws pb::Error naming the rank,
  // both hosts and NCCL's error string when a link does not form.
  NcclLinks(const Gang& gang, const FabricPlan& plan, double timeout_s);
  // Finalizes and destroys the communicators; aborts them when that misses
  // the deadline. Every rank's sends and receives must be complete.
  ~NcclLinks();
  NcclLinks(const NcclLinks&) = delete;
  NcclLinks& operator=(const NcclLinks&) = delete;

  Link& to(int peer);
  Link& from(int peer);
  bool has(int peer) const;
  std::vector<Link*> all();

  // A group of sends or receives: group_start(), the calls, group_end() with
  // the links they used, which returns once NCCL has put them on the links'
  // streams (or throws with `what` and NCCL's error past the deadline).
  void group_start();
  void group_end(const std::vector<const Link*>& used, const std::string& what);
  // NCCL's asynchronous error on any link, "" when none.
  std::string async_error() const;
  // Aborts every communicator (their kernels return); the links are unusable after.
  void abort_all() noexcept;
  bool aborted() const { return aborted_; }
  double timeout_s() const { return timeout_s_; }

 private:
  void form(const Gang& gang, const FabricPlan& plan);
  void connect();
  void settle(const std::vector<const Link*>& used, const std::string& what);
  std::string describe(const Link& l) const;

  int rank_ = 0;
  std::vector<std::string> hosts_;  // [rank], as the plan names them
  double timeout_s_ = 0;
  std::vector<Link> links_;  // outgoing and incoming, by peer
  bool aborted_ = false;
};

}  // namespace pb
