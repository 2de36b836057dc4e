// The CP lane's fabric (docs/design.md §3 "Synchronisation", "Fabric", §10):
// every cross-rank transfer and doorbell of the MLA and KDA blocks, over CUDA
// IPC or NCCL per pair of ranks (fabric_plan.h), with one protocol.
//
// Each rank allocates one slab (slab_layout.h). CUDA IPC peers (ranks of one
// host) map each other's slabs: a reader reads a published window in place,
// a writer copies into the peer's slab, and doorbells are u64 stores into the
// peer's slab: ring() is cuStreamWriteValue64 (ordered after the stream's
// earlier work), wait() is cuStreamWaitValue64 (GEQ) on this rank's own
// doorbell; both driver calls are resolved at run time (fabric_driver.h), so
// nothing links libcuda. Several ranks may share one GPU: IPC only refuses a
// handle opened by the process that made it, and a rank never opens its own.
//
// NCCL peers (other hosts, or every peer under `fabric: nccl`) get the same
// messages as two-sided transfers: the sender's ncclSend and the receiver's
// ncclRecv, grouped per message, on the link's communication stream
// (nccl_comm.h), with CUDA events as the doorbells between that stream and
// the compute stream. What IPC readers read in place (windows, packages)
// arrives in an inbox of the reader's slab; what IPC writers store into the
// peer's slab (returns, halo rows) arrives at the same place of the
// receiver's slab, sent from an outbox of the sender's. Each message also
// carries its doorbell value into the receiver's doorbell, which drain()
// checks. The acknowledgements (released, consumed, halo_read, state_read)
// need no message over NCCL: the receiver's own stream order keeps its inbox
// until it has read it, and a send completes once its bytes have left the
// sender's buffer, so a writer that waits for an acknowledgement waits for
// its last send from the buffer it is about to overwrite instead.
//
// Why two-sided send/recv on streams: it is what NCCL 2.28 offers on every
// transport, and what the tests can run on one GPU (emulated hosts talk over
// NCCL's socket transport). Its GPU-initiated networking (GIN put/signal in
// nccl_device/) is carried by the InfiniBand plugin only, not by sockets, and
// the one-sided host calls (ncclPutSignal, ncclWaitSignal) arrive in 2.29. A
// one-sided path for IB fabrics can come later behind the same calls, with a
// test that can run.
//
// Deadlines: a stream wait cannot time out by itself, so every wait (an IPC
// doorbell, an NCCL arrival, a send that must complete before its buffer is
// reused) is bracketed by events on the compute stream and drain() polls them
// against a host deadline, and NCCL's asynchronous error; past it the NCCL
// communicators are aborted and the gang fails naming the rank, layer and
// window. NCCL transfers that no wait covers are watched by the destructor.
//
// The blocks' calls, by pattern (value: slab_layout.h's doorbell values):
//   pulled (windows kv, q; packages M, D: the sender's own slab)
//     sender    publish(reader, Bell::window, value, {{L.kv, bytes}}, tl, label)
//     reader    const void* kv = fetch(sender, Bell::window, value, {{L.kv, bytes}}, tl, label)[0]
//     reader    release(sender, Bell::released, value, tl)        after its last read
//     sender    await_free(reader, Bell::released, value, tl, label)  before overwriting
//   delivered (returns o, lse; halo rows: into the receiver's slab)
//     sender    deliver(receiver, Bell::returned, value, {{src, L.o[slab][slot], bytes}}, tl, label)
//     receiver  fetch(sender, Bell::returned, value, {{L.o[slab][slot], bytes}}, tl, label)
//     receiver  release(sender, Bell::consumed, value, tl); sender await_free(...) as above
//   expect(): an NCCL receive posted early (the transfer overlaps compute);
//   fetch() of the same message then only waits for it.
//
//   Fabric fab(gang, model_slab_layout(m, cp, rows), 60.0, plan);   // collective
//   ... blocks run ...
//   fab.drain();   // instead of cudaStreamSynchronize while waits are pending
//
// Serialized turns (turns.h, take_turns()): only one rank computes at a time,
// so a send posted in its sender's turn would wait, a kernel spinning on the
// GPU, for its receiver's later turn; and a device-wide synchronization in
// the sender's process meanwhile (a cudaFree, a module that cuDNN compiles and
// loads at a plan's first use) would wait for that kernel, which waits for a
// receiver that waits for the sender's turn to end: a hang no deadline can
// see, the host being inside CUDA. So under turns a send is deferred: the
// receiver, when it posts the receive, tells the sender over MPI, and the
// sender, waiting for the turn to pass in barrier(), launches it then. No
// NCCL kernel outlives the turn it serves.
//
// Call gang.barrier() after the last call and before the fabric goes out of
// scope: a peer must not store into a slab that is being freed. Run waits on
// non-blocking streams (cudaStreamNonBlocking): the legacy default stream
// (cudaMemcpy, cudaMemset) would otherwise queue behind a pending wait.
// Concurrent ranks share the IPC waits' hazard: a device-wide synchronization
// (a kernel's lazy load at its first launch, a cudaFree) waits for this
// rank's transfers, which may wait on a peer's host that is itself inside such
// a call. The commands set CUDA_MODULE_LOADING=EAGER (when unset) for
// concurrent NCCL ranks before CUDA starts; serialized turns defer the sends.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "fabric_plan.h"
#include "gang.h"
#include "results.h"
#include "slab_layout.h"
#include "timeline.h"

namespace pb {

class NcclLinks;

// What a wait is for, named in its time-out message.
struct WaitLabel {
  int layer = 0;
  int window = 0;
  std::string what;  // e.g. "q of rank 5 for helped window (5, 3)"
};

// Per-rank counters, reported with the rank's results. Bytes count once
// gang-wide: an IPC write at the writer, an IPC read in place at the reader,
// an NCCL message at its receiver.
struct FabricStats {
  int64_t waits = 0;           // stream waits completed (drained), every transport
  double wait_us_total = 0;    // GPU time streams stalled on them (events around each wait)
  double wait_us_max = 0;
  int64_t rings = 0;           // IPC flags stored into peers' doorbells
  int64_t bytes_written = 0;   // IPC: copies and in-place writes into peers' slabs
  int64_t bytes_read = 0;      // IPC: kernels reading peers' slabs in place
  double ipc_wait_us = 0;      // of wait_us_total: waits on IPC doorbells
  double nccl_wait_us = 0;     //   waits on NCCL arrivals and sends
  int64_t nccl_messages_sent = 0, nccl_messages_received = 0;
  int64_t nccl_bytes_sent = 0, nccl_bytes_received = 0;
  double nccl_us = 0;          // GPU time of this rank's NCCL transfers on the link streams (retired:
                               // sends and receives, each between events around its group)
  int64_t ipc_bytes() const { return bytes_written + bytes_read; }
};

// `bytes` from the start of a region of the slab layout.
struct Piece {
  Region region;
  int64_t bytes = 0;
};

// What a sender delivers: `bytes` from `src` into `region` of the receiver's slab.
struct Delivery {
  const void* src = nullptr;
  Region region;
  int64_t bytes = 0;
};

// The fabric's share of a rank's record: the stats between two snapshots.
void add_fabric_stats(RankRep& rr, const FabricStats& before, const FabricStats& after);
// "fabric by transport, rep N: rank r: IPC x MB, waits y ms; NCCL x MB in, waits y ms, link streams z ms"
// for the ranks' records of one rep (printed by run under a fabric with NCCL pairs).
std::string format_fabric_by_transport(const std::vector<RankRep>& reps, int32_t rep, int cp);

class Fabric {
 public:
  // Collective over the gang: every rank constructs with the same shared
  // layout (cp == gang.size()) after selecting its CUDA device. With no plan
  // every pair is IPC and the gang must share one host.
  Fabric(const Gang& gang, const SlabLayout& shared, double timeout_s);
  Fabric(const Gang& gang, const SlabLayout& shared, double timeout_s, const FabricPlan& plan);
  ~Fabric();
  Fabric(const Fabric&) = delete;
  Fabric& operator=(const Fabric&) = delete;

  // This rank's layout: the shared regions and its NCCL staging.
  const SlabLayout& layout() const { return layout_; }
  const FabricPlan& plan() const { return plan_; }
  int rank() const { return rank_; }
  int cp() const { return layout_.cp; }
  Transport transport(int peer) const { return plan_.between(rank_, peer); }

  // ---- the protocol (header comment) ----
  // On tl's stream, inside a launch of tl (expect() may come outside one):
  // each call notes on the launch the doorbell it rings or waits on
  // (Timeline::note_bell), so that the gang projection can replay it. Over
  // NCCL a message is its sender's ring and its receiver's wait, and an
  // acknowledgement is noted as over IPC (the send's completion stands for it).
  void publish(int reader, Bell kind, uint64_t value, const std::vector<Piece>& pieces, Timeline& tl,
               const WaitLabel& label);
  void deliver(int receiver, Bell kind, uint64_t value, const std::vector<Delivery>& parts, Timeline& tl,
               const WaitLabel& label);
  std::vector<const void*> fetch(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces,
                                 Timeline& tl, WaitLabel label);
  void expect(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces, Timeline& tl,
              const WaitLabel& label);
  void release(int peer, Bell ack, uint64_t value, Timeline& tl);
  void await_free(int peer, Bell ack, uint64_t value, Timeline& tl, WaitLabel label);
  // Windows and packages stay in the sender's slab (pulled: IPC readers read
  // them in place); returns and halo rows are delivered into the receiver's.
  static bool pulled(Bell kind);
  // Where a sender produces what it will deliver into `region` of `receiver`'s
  // slab so that deliver() moves nothing locally: the receiver's slab itself
  // (IPC, the in-place form) or this rank's outbox (NCCL).
  void* delivery_buffer(int receiver, const Region& region) const;

  // Blocks until every pending wait has passed, accumulating wait times;
  // fails the gang when one misses its deadline. Retires finished NCCL transfers.
  void drain();
  int pending_waits() const { return int(pending_.size()); }
  const FabricStats& stats() const { return stats_; }
  // Serialized turns (header comment): NCCL sends wait for their receiver's
  // request. Every rank of the gang must agree.
  void take_turns(bool on) { take_turns_ = on; }
  // gang.barrier() that serves receivers' requests while it waits (turns.h).
  void barrier();
  // Waits (against the deadline) for every NCCL transfer in flight and retires
  // it. Only when every peer has posted the receives for this rank's sends,
  // e.g. at the end of a superstep (under serialize_ranks, not at a turn's
  // end: a send completes when its receiver's turn posts the receive).
  void settle_transfers();

  // ---- IPC primitives (this rank and its IPC peers; tests and the protocol) ----
  // Slab base of `rank`: this rank's own allocation, or the peer's IPC mapping.
  char* peer_base(int rank) const;
  char* own_base() const { return own_; }
  void* at(int r, const Region& region) const { return peer_base(r) + region.offset; }
  // Stores `value` into doorbell `flag` of IPC `peer` on `stream`, after the
  // stream's earlier work (its copies into the peer's slab included).
  void ring(int peer, int flag, uint64_t value, cudaStream_t stream);
  // `stream` waits until this rank's doorbell `flag` (stored by an IPC peer) >= value.
  void wait(int flag, uint64_t value, cudaStream_t stream, WaitLabel label);
  // cudaMemcpyAsync into IPC `peer`'s slab at byte `offset`, counted.
  void copy_to_peer(int peer, int64_t offset, const void* src, int64_t bytes, cudaStream_t stream);
  // Host read of this rank's doorbell (a blocking copy: for tests, with no wait pending).
  uint64_t doorbell(int flag) const;

 private:
  struct Pending {  // a compute-stream wait, watched by drain()
    cudaEvent_t before = nullptr, after = nullptr;
    std::chrono::steady_clock::time_point deadline;
    Transport transport = Transport::ipc;
    std::string what;  // the time-out message after "wait timed out after ...: "
  };
  struct Transfer {  // an NCCL message on a link stream
    bool outgoing = false;
    bool launched = false;      // sends deferred under turns: false until the receiver asks
    cudaEvent_t ready = nullptr;  // sends: the compute stream's position when posted (data ready)
    std::vector<std::pair<const void*, int64_t>> src;  // sends: the pieces
    int peer = 0;
    Bell kind = Bell::window;
    uint64_t value = 0;
    int64_t region_offset = 0;  // the first piece's region: tells a window's kv from its q
    std::vector<void*> at;      // receives: where the pieces land
    int64_t bytes = 0;
    int layer = -1;
    bool waited = false;        // receives: a fetch() has made the compute stream wait for it
    cudaEvent_t start = nullptr, end = nullptr;
  };

  void map_ipc_peers(const Gang& gang);
  void check_flag(int flag) const;
  void check_transport(int peer, Transport t, const char* what) const;
  std::string describe_ipc_wait(int flag, uint64_t value, const WaitLabel& label) const;
  std::string describe_label(const WaitLabel& label) const;
  // Brackets a compute-stream wait on `done` (recorded elsewhere) with events, for drain().
  void watch_event(cudaEvent_t done, cudaStream_t stream, Transport t, std::string what);
  cudaEvent_t take_event();
  void give_event(cudaEvent_t e);
  void poll_until(cudaEvent_t done, std::chrono::steady_clock::time_point deadline, const std::string& what);
  [[noreturn]] void fail(const std::string& message);
  // NCCL messages (fabric_nccl.cpp).
  void nccl_send(int peer, Bell kind, uint64_t value, int64_t region_offset,
                 const std::vector<std::pair<const void*, int64_t>>& pieces, cudaStream_t stream, int layer);
  void launch_send(Transfer& t);
  // Turns: a receiver's request to `sender` for the message it has just posted; the sender's side.
  void ask_sender(const Transfer& receive);
  void serve_requests();
  void answer_request(int receiver, const std::vector<int64_t>& key);
  Transfer& nccl_receive(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces,
                         cudaStream_t stream, int layer);
  // A receive posted by expect() and not waited for yet, or null.
  Transfer* posted_receive(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces);
  std::vector<void*> nccl_landing(int sender, Bell kind, const std::vector<Piece>& pieces) const;
  void retire_transfers();
  void check_arrived_bells();

  const Gang& gang_;
  FabricPlan plan_;
  SlabLayout layout_;
  double timeout_s_ = 0;
  int rank_ = 0;
  char* own_ = nullptr;
  std::vector<char*> peers_;  // [rank]; peers_[rank_] == own_, IPC mappings, null for NCCL peers
  std::vector<Pending> pending_;
  std::unique_ptr<NcclLinks> links_;
  std::vector<Transfer> transfers_;         // NCCL messages not retired yet, in posting order
  std::vector<std::pair<int, uint64_t>> arrived_;  // (flag, value) of receives waited for since the last check
  std::vector<cudaEvent_t> free_events_;
  bool take_turns_ = false;
  std::vector<std::vector<std::vector<int64_t>>> requests_;  // [receiver]: requests ahead of their sends
  std::vector<std::pair<MPI_Request, std::vector<int64_t>>> asks_out_;  // requests this rank sent, in flight
  FabricStats stats_;
};

}  // namespace pb
