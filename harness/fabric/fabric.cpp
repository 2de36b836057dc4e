#include "fabric.h"

#include <cuda.h>  // driver types and enums only: nothing here links libcuda

#include <cstdio>
#include <cstring>
#include <thread>

#include "device_buffer.h"
#include "fabric_driver.h"
#include "nccl_comm.h"

namespace pb {

namespace {

using Clock = std::chrono::steady_clock;

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

bool is_message(Bell kind) { return Fabric::pulled(kind) || kind == Bell::returned || kind == Bell::halo; }

}  // namespace

bool Fabric::pulled(Bell kind) { return kind == Bell::window || kind == Bell::state; }

Fabric::Fabric(const Gang& gang, const SlabLayout& shared, double timeout_s)
    : Fabric(gang, shared, timeout_s, plan_fabric("ipc", gang_hosts(gang), 0, "the IPC fabric")) {}

Fabric::Fabric(const Gang& gang, const SlabLayout& shared, double timeout_s, const FabricPlan& plan)
    : gang_(gang), plan_(plan), timeout_s_(timeout_s), rank_(gang.rank()) {
  PB_CHECK(shared.cp == gang.size() && plan.cp() == gang.size(),
           "Fabric: the slab layout is for cp " + std::to_string(shared.cp) + " and the plan for " +
               std::to_string(plan.cp()) + " ranks, but the gang has " + std::to_string(gang.size()));
  PB_CHECK(timeout_s_ > 0, "Fabric: the wait time-out must be positive");
  layout_ = with_nccl_staging(shared, rank_, plan_.nccl_peers(rank_));
  int device = 0;
  PB_CUDA(cudaGetDevice(&device));
  require_stream_mem_ops(device);

  own_ = static_cast<char*>(device_allocate(size_t(layout_.total_bytes), "the fabric slab"));
  PB_CUDA(cudaMemset(own_, 0, size_t(layout_.total_bytes)));  // doorbells start at 0; no wait passes on 0
  PB_CUDA(cudaDeviceSynchronize());
  map_ipc_peers(gang);
  if (plan_.any_nccl()) links_ = std::make_unique<NcclLinks>(gang, plan_, timeout_s_);
}

// Every rank's handle on every rank; each rank opens its IPC peers'. The
// exchange also orders every rank's zeroed doorbells before any peer rings.
void Fabric::map_ipc_peers(const Gang& gang) {
  cudaIpcMemHandle_t mine;
  PB_CUDA(cudaIpcGetMemHandle(&mine, own_));
  const std::vector<std::string> all =
      all_gather(gang, std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
  peers_.assign(size_t(gang.size()), nullptr);
  peers_[size_t(rank_)] = own_;
  for (int r = 0; r < gang.size(); ++r) {
    if (r == rank_ || transport(r) != Transport::ipc) continue;  // IPC refuses a process's own handle
    PB_CHECK(all[size_t(r)].size() == sizeof(cudaIpcMemHandle_t), "Fabric: bad IPC handle exchange");
    cudaIpcMemHandle_t h;
    std::memcpy(&h, all[size_t(r)].data(), sizeof h);
    void* p = nullptr;
    const cudaError_t rc = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    PB_CHECK(rc == cudaSuccess, "cudaIpcOpenMemHandle(slab of rank " + std::to_string(r) + " on host " +
                                    plan_.hosts[size_t(r)] + "): " + cudaGetErrorName(rc) + " (" +
                                    cudaGetErrorString(rc) +
                                    "); ranks on different GPUs need peer access between them");
    peers_[size_t(r)] = static_cast<char*>(p);
  }
}

Fabric::~Fabric() {
  // NCCL transfers still in flight read or write the slab: let them finish first.
  if (links_ && !links_->aborted()) {
    const Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
    for (const Transfer& t : transfers_)
      while (t.launched && cudaEventQuery(t.end) == cudaErrorNotReady) {
        if (Clock::now() > deadline) {
          warn_error(__FILE__, __LINE__, "Fabric: NCCL transfers still in flight after " + fmt_seconds(timeout_s_) +
                                             " at teardown (a send without its receive?): aborting the links");
          links_->abort_all();
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
  }
  links_.reset();
  // Requests to senders: all taken by now; small messages complete on the sending side anyway.
  for (auto& ask : asks_out_) MPI_Wait(&ask.first, MPI_STATUS_IGNORE);
  for (Pending& p : pending_) {
    give_event(p.before);
    give_event(p.after);
  }
  for (Transfer& t : transfers_) {
    give_event(t.ready);
    give_event(t.start);
    give_event(t.end);
  }
  for (cudaEvent_t e : free_events_) PB_CUDA_NOTHROW(cudaEventDestroy(e));
  for (int r = 0; r < int(peers_.size()); ++r)
    if (r != rank_ && peers_[size_t(r)]) PB_CUDA_NOTHROW(cudaIpcCloseMemHandle(peers_[size_t(r)]));
  if (own_) PB_CUDA_NOTHROW(cudaFree(own_));
}

char* Fabric::peer_base(int r) const {
  PB_CHECK(r >= 0 && r < int(peers_.size()), "Fabric: rank " + std::to_string(r) + " outside the gang");
  PB_CHECK(peers_[size_t(r)] != nullptr, "Fabric: rank " + std::to_string(r) + " (host " + plan_.hosts[size_t(r)] +
                                             ") is reached over NCCL: its slab is not mapped here");
  return peers_[size_t(r)];
}

void Fabric::check_flag(int flag) const {
  PB_CHECK(flag >= 0 && flag < layout_.n_doorbells(),
           "Fabric: doorbell " + std::to_string(flag) + " outside [0, " + std::to_string(layout_.n_doorbells()) + ")");
}

void Fabric::check_transport(int peer, Transport t, const char* what) const {
  PB_CHECK(peer >= 0 && peer < cp() && peer != rank_,
           std::string("Fabric::") + what + ": peer " + std::to_string(peer) + " is not another rank of the gang");
  PB_CHECK(transport(peer) == t, std::string("Fabric::") + what + ": rank " + std::to_string(peer) + " is reached over " +
                                     transport_name(transport(peer)) + ", not " + transport_name(t));
}

cudaEvent_t Fabric::take_event() {
  if (free_events_.empty()) {
    cudaEvent_t e;
    PB_CUDA(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = free_events_.back();
  free_events_.pop_back();
  return e;
}

void Fabric::give_event(cudaEvent_t e) {
  if (e) free_events_.push_back(e);
}

// ---- IPC primitives ----

void Fabric::ring(int peer, int flag, uint64_t value, cudaStream_t stream) {
  check_flag(flag);
  check_transport(peer, Transport::ipc, "ring");
  stream_write_u64(stream, peer_base(peer) + layout_.doorbells.offset + size_t(flag) * sizeof(uint64_t), value);
  ++stats_.rings;
}

void Fabric::wait(int flag, uint64_t value, cudaStream_t stream, WaitLabel label) {
  check_flag(flag);
  check_transport(flag % cp(), Transport::ipc, "wait");
  Pending p;
  p.before = take_event();
  p.after = take_event();
  PB_CUDA(cudaEventRecord(p.before, stream));
  stream_wait_u64_geq(stream, own_ + layout_.doorbells.offset + size_t(flag) * sizeof(uint64_t), value);
  PB_CUDA(cudaEventRecord(p.after, stream));
  p.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  p.transport = Transport::ipc;
  p.what = describe_ipc_wait(flag, value, label);
  pending_.push_back(std::move(p));
}

void Fabric::copy_to_peer(int peer, int64_t offset, const void* src, int64_t bytes, cudaStream_t stream) {
  PB_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= layout_.shared_bytes,
           "Fabric::copy_to_peer: [offset, offset + bytes) outside the shared slab");
  check_transport(peer, Transport::ipc, "copy_to_peer");
  PB_CUDA(cudaMemcpyAsync(peer_base(peer) + offset, src, size_t(bytes), cudaMemcpyDefault, stream));
  stats_.bytes_written += bytes;
}

uint64_t Fabric::doorbell(int flag) const {
  check_flag(flag);
  uint64_t v = 0;
  PB_CUDA(cudaMemcpy(&v, own_ + layout_.doorbells.offset + flag * sizeof(uint64_t), sizeof v,
                     cudaMemcpyDeviceToHost));
  return v;
}

std::string Fabric::describe_label(const WaitLabel& label) const {
  return "rank " + std::to_string(rank_) + ", layer " + std::to_string(label.layer) + ", window " +
         std::to_string(label.window) + " (" + label.what + ")";
}

std::string Fabric::describe_ipc_wait(int flag, uint64_t value, const WaitLabel& label) const {
  const int sender = flag % cp();
  const auto kind = Bell(flag / cp());
  return describe_label(label) + ": doorbell " + std::to_string(flag) + " (" + bell_name(kind) + " from rank " +
         std::to_string(sender) + ") never reached " + std::to_string(value) + " = seq " +
         std::to_string(doorbell_seq(value)) + ", window " + std::to_string(doorbell_window(value));
}

// ---- the protocol ----

void Fabric::publish(int reader, Bell kind, uint64_t value, const std::vector<Piece>& pieces, Timeline& tl,
                     const WaitLabel& label) {
  PB_CHECK(pulled(kind), std::string("Fabric::publish: ") + bell_name(kind) + " is not published in place");
  const int flag = doorbell_index(cp(), rank_, kind);
  tl.note_bell({true, reader, flag, value});
  if (transport(reader) == Transport::ipc) {
    ring(reader, flag, value, tl.stream());  // the reader reads in place
    return;
  }
  if (pieces.empty()) return;  // an NCCL reader that reads nothing of this call gets nothing
  std::vector<std::pair<const void*, int64_t>> src;
  for (const Piece& p : pieces) {
    PB_CHECK(p.bytes > 0 && p.bytes <= p.region.bytes, "Fabric::publish: a piece larger than its region");
    src.push_back({own_ + p.region.offset, p.bytes});
  }
  nccl_send(reader, kind, value, pieces[0].region.offset, src, tl.stream(), label.layer);
}

void Fabric::deliver(int receiver, Bell kind, uint64_t value, const std::vector<Delivery>& parts, Timeline& tl,
                     const WaitLabel& label) {
  PB_CHECK(is_message(kind) && !pulled(kind), std::string("Fabric::deliver: ") + bell_name(kind) +
                                                  " is not delivered into the receiver's slab");
  cudaStream_t stream = tl.stream();
  const int flag = doorbell_index(cp(), rank_, kind);
  tl.note_bell({true, receiver, flag, value});
  const bool ipc = transport(receiver) == Transport::ipc;
  std::vector<std::pair<const void*, int64_t>> src;
  for (const Delivery& d : parts) {
    PB_CHECK(d.bytes > 0 && d.bytes <= d.region.bytes, "Fabric::deliver: a part larger than its region");
    void* dst = delivery_buffer(receiver, d.region);
    if (d.src != dst) PB_CUDA(cudaMemcpyAsync(dst, d.src, size_t(d.bytes), cudaMemcpyDefault, stream));
    if (ipc) stats_.bytes_written += d.bytes;
    src.push_back({dst, d.bytes});
  }
  if (ipc) ring(receiver, flag, value, stream);
  else nccl_send(receiver, kind, value, parts.at(0).region.offset, src, stream, label.layer);
}

void* Fabric::delivery_buffer(int receiver, const Region& region) const {
  if (transport(receiver) == Transport::ipc) return at(receiver, region);
  return own_ + layout_.outbox(region).offset;
}

std::vector<const void*> Fabric::fetch(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces,
                                       Timeline& tl, WaitLabel label) {
  PB_CHECK(is_message(kind), std::string("Fabric::fetch: ") + bell_name(kind) + " carries no data");
  cudaStream_t stream = tl.stream();
  const int flag = doorbell_index(cp(), sender, kind);
  tl.note_bell({false, sender, flag, value});
  std::vector<const void*> out;
  if (transport(sender) == Transport::ipc) {
    wait(flag, value, stream, std::move(label));
    for (const Piece& p : pieces) {
      out.push_back(at(pulled(kind) ? sender : rank_, p.region));
      if (pulled(kind)) stats_.bytes_read += p.bytes;
    }
    return out;
  }
  Transfer* t = posted_receive(sender, kind, value, pieces);
  if (!t) t = &nccl_receive(sender, kind, value, pieces, stream, label.layer);
  t->waited = true;
  arrived_.push_back({flag, value});
  for (void* p : t->at) out.push_back(p);
  watch_event(t->end, stream, Transport::nccl,
              describe_label(label) + ": the " + bell_name(kind) + " message of rank " + std::to_string(sender) +
                  " (seq " + std::to_string(doorbell_seq(value)) + ", window " + std::to_string(doorbell_window(value)) +
                  ") did not arrive over NCCL");
  return out;
}

Fabric::Transfer* Fabric::posted_receive(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces) {
  for (Transfer& x : transfers_)
    if (!x.outgoing && !x.waited && x.peer == sender && x.kind == kind && x.value == value &&
        x.region_offset == pieces.at(0).region.offset)
      return &x;
  return nullptr;
}

void Fabric::expect(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces, Timeline& tl,
                    const WaitLabel& label) {
  PB_CHECK(is_message(kind), std::string("Fabric::expect: ") + bell_name(kind) + " carries no data");
  if (transport(sender) == Transport::ipc || posted_receive(sender, kind, value, pieces)) return;
  nccl_receive(sender, kind, value, pieces, tl.stream(), label.layer);
}

void Fabric::release(int peer, Bell ack, uint64_t value, Timeline& tl) {
  PB_CHECK(!is_message(ack), std::string("Fabric::release: ") + bell_name(ack) + " is not an acknowledgement");
  const int flag = doorbell_index(cp(), rank_, ack);
  tl.note_bell({true, peer, flag, value});
  if (transport(peer) == Transport::ipc) ring(peer, flag, value, tl.stream());
}

void Fabric::await_free(int peer, Bell ack, uint64_t value, Timeline& tl, WaitLabel label) {
  const int flag = doorbell_index(cp(), peer, ack);
  tl.note_bell({false, peer, flag, value});
  if (transport(peer) == Transport::ipc) {
    wait(flag, value, tl.stream(), std::move(label));
    return;
  }
  const Bell kind = acknowledged(ack);
  const int64_t seq = doorbell_seq(value);
  if (seq < 0) return;
  const Transfer* last = nullptr;  // sends on one link complete in order: the latest one covers the earlier
  for (const Transfer& t : transfers_)
    if (t.outgoing && t.peer == peer && t.kind == kind && doorbell_seq(t.value) <= seq) last = &t;
  if (!last) return;  // retired: complete
  PB_CHECK(last->launched, "rank " + std::to_string(rank_) + ": under turns, the " + bell_name(kind) +
                               " message to rank " + std::to_string(peer) + " of seq " +
                               std::to_string(doorbell_seq(last->value)) +
                               " was never asked for before this rank overwrites its buffer (protocol fault)");
  watch_event(last->end, tl.stream(), Transport::nccl,
              describe_label(label) + ": the " + bell_name(kind) + " message to rank " + std::to_string(peer) +
                  " (seq " + std::to_string(doorbell_seq(last->value)) + ") was not taken: its NCCL send did not "
                  "complete");
}

void Fabric::watch_event(cudaEvent_t done, cudaStream_t stream, Transport t, std::string what) {
  Pending p;
  p.before = take_event();
  p.after = take_event();
  PB_CUDA(cudaEventRecord(p.before, stream));
  PB_CUDA(cudaStreamWaitEvent(stream, done, 0));
  PB_CUDA(cudaEventRecord(p.after, stream));
  p.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  p.transport = t;
  p.what = std::move(what);
  pending_.push_back(std::move(p));
}

// ---- deadlines ----

void Fabric::fail(const std::string& message) {
  if (links_) links_->abort_all();
  gang_.fail(message);
}

void Fabric::poll_until(cudaEvent_t done, Clock::time_point deadline, const std::string& what) {
  for (long n = 0;; ++n) {
    const cudaError_t rc = cudaEventQuery(done);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) fail(std::string("CUDA error while waiting: ") + cudaGetErrorString(rc) + ": " + what);
    if (links_ && n % 64 == 0) {
      const std::string err = links_->async_error();
      if (!err.empty()) fail("NCCL error while waiting: " + err + ": " + what);
      if (take_turns_) serve_requests();
    }
    if (Clock::now() > deadline) fail("wait timed out after " + fmt_seconds(timeout_s_) + ": " + what);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void Fabric::drain() {
  for (Pending& p : pending_) {
    poll_until(p.after, p.deadline, p.what);
    float ms = 0;
    PB_CUDA(cudaEventElapsedTime(&ms, p.before, p.after));
    const double us = double(ms) * 1e3;
    ++stats_.waits;
    stats_.wait_us_total += us;
    (p.transport == Transport::ipc ? stats_.ipc_wait_us : stats_.nccl_wait_us) += us;
    if (us > stats_.wait_us_max) stats_.wait_us_max = us;
    give_event(p.before);
    give_event(p.after);
  }
  pending_.clear();
  if (links_) {
    check_arrived_bells();
    retire_transfers();
  }
}

void Fabric::settle_transfers() {
  if (!links_) return;
  for (const Transfer& t : transfers_)
    if (!t.launched)
      fail("rank " + std::to_string(rank_) + ": the " + bell_name(t.kind) + " message to rank " +
           std::to_string(t.peer) + " (layer " + std::to_string(t.layer) + ", seq " +
           std::to_string(doorbell_seq(t.value)) + ") was never asked for by its receiver (protocol fault)");
  const Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_));
  for (const Transfer& t : transfers_)
    poll_until(t.end, deadline,
               "rank " + std::to_string(rank_) + ": the NCCL " + (t.outgoing ? "send of the " : "receive of the ") +
                   bell_name(t.kind) + " message " + (t.outgoing ? "to" : "from") + " rank " + std::to_string(t.peer) +
                   " (layer " + std::to_string(t.layer) + ", seq " + std::to_string(doorbell_seq(t.value)) +
                   ") did not complete");
  retire_transfers();
}

std::string format_fabric_by_transport(const std::vector<RankRep>& reps, int32_t rep, int cp) {
  std::string out = "fabric by transport, rep " + std::to_string(rep) +
                    " (NCCL link streams overlap the compute; loopback sockets are not a fabric's speed):\n";
  char line[256];
  for (int r = 0; r < cp; ++r)
    for (const RankRep& x : reps)
      if (x.rep == rep && x.rank == r) {
        std::snprintf(line, sizeof line,
                      "  rank %d: IPC %.1f MB, waits %.2f ms; NCCL %.1f MB in, waits %.2f ms, link streams %.2f ms\n", r,
                      x.ipc_bytes / 1e6, x.ipc_wait_us / 1e3, x.nccl_bytes / 1e6, x.nccl_wait_us / 1e3, x.nccl_us / 1e3);
        out += line;
      }
  return out;
}

void add_fabric_stats(RankRep& rr, const FabricStats& before, const FabricStats& after) {
  rr.ipc_bytes += double(after.ipc_bytes() - before.ipc_bytes());
  rr.nccl_bytes += double(after.nccl_bytes_received - before.nccl_bytes_received);
  rr.fabric_bytes = rr.ipc_bytes + rr.nccl_bytes;
  rr.ipc_wait_us += after.ipc_wait_us - before.ipc_wait_us;
  rr.nccl_wait_us += after.nccl_wait_us - before.nccl_wait_us;
  rr.nccl_us += after.nccl_us - before.nccl_us;
}

}  // namespace pb
