// The CP lane's fabric over CUDA IPC (docs/design.md §3 "Synchronisation", "Fabric").
//
// Each rank allocates one slab (slab_layout.h) and maps every node-local
// peer's slab with cudaIpcOpenMemHandle; the handles cross ranks over the
// gang (gather to rank 0, broadcast). Several ranks may share one GPU: IPC only
// refuses a handle opened by the process that made it, and a rank never opens
// its own. All ranks must be on one node for now; cross-node ranks need NCCL.
//
// Doorbells: ring() stores a u64 into a peer's doorbell (cuStreamWriteValue64,
// which orders the store after the stream's earlier writes); wait() makes a
// stream wait on this rank's own doorbell (cuStreamWaitValue64, GEQ). Both
// driver calls come from cudaGetDriverEntryPointByVersion at run time: nothing
// links libcuda. A stream wait cannot time out by itself, so wait() records
// events around it and drain() polls them on the host against a deadline; a
// wait that misses it fails the gang with the rank, layer and window.
//
//   IpcFabric fab(gang, slab_layout(cp, seg, 96), /*timeout_s=*/60);
//   fab.copy_to_peer(peer, fab.layout().kv.offset, src, bytes, stream);
//   fab.ring(peer, doorbell_index(cp, me, Bell::window), doorbell_value(seq, w), stream);
//   ... on the peer:
//   fab.wait(doorbell_index(cp, sender, Bell::window), doorbell_value(seq, w), stream, {layer, w, "kv"});
//   fab.drain();   // instead of cudaStreamSynchronize while waits are pending
//
// Call gang.barrier() after the last ring/wait and before the fabric goes out
// of scope: a peer must not store into a slab that is being freed. Run waits on
// non-blocking streams (cudaStreamNonBlocking): the legacy default stream
// (cudaMemcpy, cudaMemset) would otherwise queue behind a pending wait.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "check.h"
#include "gang.h"
#include "slab_layout.h"

namespace pb {

// What a wait is for, named in its time-out message.
struct WaitLabel {
  int layer = 0;
  int window = 0;
  std::string what;  // e.g. "q of rank 5 for helped window (5, 3)"
};

// Per-rank counters, reported with the rank's results.
struct FabricStats {
  int64_t waits = 0;           // stream waits completed (drained)
  double wait_us_total = 0;    // GPU time streams stalled on doorbells (events around each wait)
  double wait_us_max = 0;
  int64_t rings = 0;           // flags stored into peers' doorbells
  int64_t bytes_written = 0;   // copy_to_peer bytes + note_peer_write
  int64_t bytes_read = 0;      // note_peer_read (kernels reading peer slabs in place)
};

// Polls `done` until it completes; past `deadline` fails the gang with
// "wait timed out after ... : <what>". Returns the event's error otherwise.
cudaError_t wait_or_abort(const Gang& gang, cudaEvent_t done, std::chrono::steady_clock::time_point deadline,
                          double timeout_s, const std::string& what);

class IpcFabric {
 public:
  // Collective over the gang: every rank constructs with the same layout
  // (cp == gang.size()) after selecting its CUDA device.
  IpcFabric(const Gang& gang, const SlabLayout& layout, double timeout_s);
  ~IpcFabric();
  IpcFabric(const IpcFabric&) = delete;
  IpcFabric& operator=(const IpcFabric&) = delete;

  const SlabLayout& layout() const { return layout_; }
  int rank() const { return rank_; }
  int cp() const { return layout_.cp; }

  // Slab base of `rank`: this rank's own allocation, or the peer's IPC mapping.
  char* peer_base(int rank) const;
  char* own_base() const { return own_; }
  // A region of rank `r`'s slab, e.g. at(r, layout().q) or at(r, layout().o[slab][slot]).
  void* at(int r, const Region& region) const { return peer_base(r) + region.offset; }

  // Stores `value` into doorbell `flag` of `peer` on `stream`, after the
  // stream's earlier work (its copies into the peer's slab included).
  void ring(int peer, int flag, uint64_t value, cudaStream_t stream);
  // `stream` waits until this rank's doorbell `flag` >= value. The host
  // deadline (now + timeout) is checked in drain().
  void wait(int flag, uint64_t value, cudaStream_t stream, WaitLabel label);
  // Blocks until every pending wait has passed, accumulating wait times;
  // fails the gang when one misses its deadline.
  void drain();
  int pending_waits() const { return int(pending_.size()); }

  // cudaMemcpyAsync into `peer`'s slab at byte `offset`, counted.
  void copy_to_peer(int peer, int64_t offset, const void* src, int64_t bytes, cudaStream_t stream);
  // Counters for kernels that store into / load from peer slabs in place.
  void note_peer_write(int64_t bytes) { stats_.bytes_written += bytes; }
  void note_peer_read(int64_t bytes) { stats_.bytes_read += bytes; }
  const FabricStats& stats() const { return stats_; }

  // Host read of this rank's doorbell (a blocking cudaMemcpy: for tests, with
  // no wait pending).
  uint64_t doorbell(int flag) const;

 private:
  struct Pending {
    cudaEvent_t before = nullptr, after = nullptr;
    std::chrono::steady_clock::time_point deadline;
    int flag = 0;
    uint64_t value = 0;
    WaitLabel label;
  };
  std::string describe_wait(const Pending& p) const;
  void check_flag(int flag) const;

  const Gang& gang_;
  SlabLayout layout_;
  double timeout_s_ = 0;
  int rank_ = 0;
  char* own_ = nullptr;
  std::vector<char*> peers_;  // [rank]; peers_[rank_] == own_, opened via IPC otherwise
  std::vector<Pending> pending_;
  FabricStats stats_;
};

}  // namespace pb
