// The NCCL side of the fabric (fabric.h): one message = one group on the
// link's stream, the doorbell value first, then the pieces, each a byte
// array; the receiver posts the same group with the same sizes. The link
// stream waits for the compute stream's position when the message is posted
// (the sender's data is ready; the receiver is done with what it last read
// from the landing place), and the compute stream waits for the group's end
// event where it needs the data.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <thread>

#include "fabric.h"
#include "fabric_driver.h"
#include "nccl_comm.h"

namespace pb {

namespace {

constexpr int kRequestTag = 7411;  // MPI tag of a receiver's request under turns

// A message's identity on its link, as a request carries it.
std::vector<int64_t> message_key(Bell kind, uint64_t value, int64_t region_offset) {
  return {int64_t(kind), int64_t(value), region_offset};
}

}  // namespace

void Fabric::nccl_send(int peer, Bell kind, uint64_t value, int64_t region_offset,
                       const std::vector<std::pair<const void*, int64_t>>& pieces, cudaStream_t stream, int layer) {
  PB_CHECK(links_, "Fabric: no NCCL links");
  Transfer t;
  t.outgoing = true;
  t.peer = peer;
  t.kind = kind;
  t.value = value;
  t.layer = layer;
  t.region_offset = region_offset;
  t.src = pieces;
  for (const auto& piece : pieces) t.bytes += piece.second;
  t.ready = take_event();
  PB_CUDA(cudaEventRecord(t.ready, stream));  // the data is ready at this point of the compute stream
  ++stats_.nccl_messages_sent;
  stats_.nccl_bytes_sent += t.bytes;
  transfers_.push_back(std::move(t));
  if (!take_turns_) launch_send(transfers_.back());
  else serve_requests();  // a request may have come ahead of its send
}

// The group of a send on the link: the link stream waits for the data, then
// the doorbell value (from bells_out[receiver, kind]: the link's stream order
// keeps it until the send has read it) and the pieces.
void Fabric::launch_send(Transfer& t) {
  NcclLinks::Link& link = links_->to(t.peer);
  PB_CUDA(cudaStreamWaitEvent(link.stream, t.ready, 0));
  give_event(t.ready);  // the wait holds the record it saw
  t.ready = nullptr;
  char* bell = own_ + layout_.bells_out.offset + size_t(doorbell_index(cp(), t.peer, t.kind)) * sizeof(uint64_t);
  stream_write_u64(link.stream, bell, t.value);
  t.start = take_event();
  t.end = take_event();
  PB_CUDA(cudaEventRecord(t.start, link.stream));
  const std::string what = std::string("sending the ") + bell_name(t.kind) + " message to rank " + std::to_string(t.peer);
  const NcclApi& a = nccl_api();
  links_->group_start();
  nccl_check(a.Send(bell, 1, ncclUint64, link.remote(), link.comm, link.stream), what);
  for (const auto& [src, bytes] : t.src)
    nccl_check(a.Send(src, size_t(bytes), ncclUint8, link.remote(), link.comm, link.stream), what);
  links_->group_end({&link}, what);
  PB_CUDA(cudaEventRecord(t.end, link.stream));
  t.launched = true;
}

std::vector<void*> Fabric::nccl_landing(int sender, Bell kind, const std::vector<Piece>& pieces) const {
  std::vector<void*> at;
  for (const Piece& p : pieces) {
    PB_CHECK(p.bytes > 0 && p.bytes <= p.region.bytes, "Fabric: a piece larger than its region");
    at.push_back(own_ + (pulled(kind) ? layout_.inbox(sender, p.region).offset : p.region.offset));
  }
  return at;
}

Fabric::Transfer& Fabric::nccl_receive(int sender, Bell kind, uint64_t value, const std::vector<Piece>& pieces,
                                       cudaStream_t stream, int layer) {
  PB_CHECK(links_, "Fabric: no NCCL links");
  PB_CHECK(!pieces.empty(), "Fabric: an NCCL message without pieces");
  NcclLinks::Link& link = links_->from(sender);
  Transfer t;
  t.peer = sender;
  t.kind = kind;
  t.value = value;
  t.layer = layer;
  t.region_offset = pieces[0].region.offset;
  t.at = nccl_landing(sender, kind, pieces);
  cudaEvent_t ready = take_event();
  PB_CUDA(cudaEventRecord(ready, stream));
  PB_CUDA(cudaStreamWaitEvent(link.stream, ready, 0));
  give_event(ready);
  t.start = take_event();
  t.end = take_event();
  PB_CUDA(cudaEventRecord(t.start, link.stream));
  char* bell = own_ + layout_.doorbells.offset + size_t(doorbell_index(cp(), sender, kind)) * sizeof(uint64_t);
  const std::string what =
      std::string("receiving the ") + bell_name(kind) + " message of rank " + std::to_string(sender);
  const NcclApi& a = nccl_api();
  links_->group_start();
  nccl_check(a.Recv(bell, 1, ncclUint64, link.remote(), link.comm, link.stream), what);
  for (size_t i = 0; i < pieces.size(); ++i) {
    nccl_check(a.Recv(t.at[i], size_t(pieces[i].bytes), ncclUint8, link.remote(), link.comm, link.stream), what);
    t.bytes += pieces[i].bytes;
  }
  links_->group_end({&link}, what);
  PB_CUDA(cudaEventRecord(t.end, link.stream));
  t.launched = true;
  ++stats_.nccl_messages_received;
  stats_.nccl_bytes_received += t.bytes;
  transfers_.push_back(std::move(t));
  if (take_turns_) ask_sender(transfers_.back());
  return transfers_.back();
}

// Turns: the receive is posted; the sender, waiting in barrier(), launches the send.
void Fabric::ask_sender(const Transfer& receive) {
  asks_out_.push_back({MPI_REQUEST_NULL, message_key(receive.kind, receive.value, receive.region_offset)});
  auto& [request, key] = asks_out_.back();
  PB_CHECK(MPI_Isend(key.data(), int(key.size()), MPI_INT64_T, receive.peer, kRequestTag, gang_.comm(), &request) ==
               MPI_SUCCESS,
           "Fabric: MPI_Isend of a request to rank " + std::to_string(receive.peer));
}

// Takes the receivers' requests that have arrived and launches the sends they
// ask for; a request ahead of its send waits in requests_ for nccl_send().
void Fabric::serve_requests() {
  for (;;) {
    int flag = 0;
    MPI_Status status;
    PB_CHECK(MPI_Iprobe(MPI_ANY_SOURCE, kRequestTag, gang_.comm(), &flag, &status) == MPI_SUCCESS,
             "Fabric: MPI_Iprobe");
    if (!flag) break;
    std::vector<int64_t> key(3);
    PB_CHECK(MPI_Recv(key.data(), 3, MPI_INT64_T, status.MPI_SOURCE, kRequestTag, gang_.comm(), MPI_STATUS_IGNORE) ==
                 MPI_SUCCESS,
             "Fabric: MPI_Recv of a request");
    requests_.resize(size_t(cp()));
    requests_[size_t(status.MPI_SOURCE)].push_back(key);
  }
  for (int r = 0; r < int(requests_.size()); ++r)
    while (!requests_[size_t(r)].empty()) {
      Transfer* next = nullptr;  // this rank's oldest send to r not launched yet
      for (Transfer& t : transfers_)
        if (t.outgoing && t.peer == r && !t.launched) {
          next = &t;
          break;
        }
      if (!next) break;
      answer_request(r, requests_[size_t(r)].front());
      requests_[size_t(r)].erase(requests_[size_t(r)].begin());
      launch_send(*next);
    }
  // Requests this rank sent that MPI has carried: their buffers may go.
  for (size_t i = 0; i < asks_out_.size();) {
    int done = 0;
    PB_CHECK(MPI_Test(&asks_out_[i].first, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Fabric: MPI_Test");
    if (done) asks_out_.erase(asks_out_.begin() + long(i));
    else ++i;
  }
}

// A request must name the message this rank sends next on that link: the two
// ranks walk the same protocol, so a mismatch is a fault of the protocol.
void Fabric::answer_request(int receiver, const std::vector<int64_t>& key) {
  for (const Transfer& t : transfers_)
    if (t.outgoing && t.peer == receiver && !t.launched) {
      if (message_key(t.kind, t.value, t.region_offset) == key) return;
      fail("rank " + std::to_string(rank_) + ": NCCL message order: rank " + std::to_string(receiver) + " asks for the " +
           bell_name(Bell(key[0])) + " message of seq " + std::to_string(doorbell_seq(uint64_t(key[1]))) +
           ", but this rank's next message to it is the " + bell_name(t.kind) + " message of seq " +
           std::to_string(doorbell_seq(t.value)));
    }
}

void Fabric::barrier() {
  MPI_Request request;
  PB_CHECK(MPI_Ibarrier(gang_.comm(), &request) == MPI_SUCCESS, "Fabric: MPI_Ibarrier");
  for (;;) {
    if (links_ && take_turns_) serve_requests();
    int done = 0;
    PB_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS, "Fabric: MPI_Test(barrier)");
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// Finished transfers leave the list, their time to the stats.
void Fabric::retire_transfers() {
  std::vector<Transfer> open;
  for (Transfer& t : transfers_) {
    const cudaError_t rc = t.launched ? cudaEventQuery(t.end) : cudaErrorNotReady;
    if (rc == cudaErrorNotReady || (!t.outgoing && !t.waited)) {
      open.push_back(std::move(t));
      continue;
    }
    PB_CUDA(rc);
    float ms = 0;
    PB_CUDA(cudaEventElapsedTime(&ms, t.start, t.end));
    const double us = double(ms) * 1e3;
    stats_.nccl_us += us;
    give_event(t.start);
    give_event(t.end);
  }
  transfers_.swap(open);
}

// Every message carries its doorbell value into the receiver's doorbell: after
// the waits have passed, the doorbells must hold what the receives expected. A
// message out of order on its link (a protocol fault) shows here rather than
// as wrong numbers.
void Fabric::check_arrived_bells() {
  if (arrived_.empty()) return;
  std::vector<uint64_t> bells(size_t(layout_.n_doorbells()));
  PB_CUDA(cudaMemcpy(bells.data(), own_ + layout_.doorbells.offset, bells.size() * sizeof(uint64_t),
                     cudaMemcpyDeviceToHost));
  std::map<int, uint64_t> expected;  // flag -> the last value waited for
  for (const auto& [flag, value] : arrived_) expected[flag] = std::max(expected[flag], value);
  arrived_.clear();
  for (const auto& [flag, value] : expected) {
    bool more_posted = false;  // a later receive on the same doorbell may have landed already
    for (const Transfer& t : transfers_)
      more_posted |= !t.outgoing && !t.waited && doorbell_index(cp(), t.peer, t.kind) == flag;
    const uint64_t got = bells[size_t(flag)];
    if (got == value || (more_posted && got > value)) continue;
    fail("rank " + std::to_string(rank_) + ": NCCL message order: doorbell " + std::to_string(flag) + " (" +
         bell_name(Bell(flag / cp())) + " from rank " + std::to_string(flag % cp()) + ") holds seq " +
         std::to_string(doorbell_seq(got)) + ", window " + std::to_string(doorbell_window(got)) +
         " after the receive of seq " + std::to_string(doorbell_seq(value)) + ", window " +
         std::to_string(doorbell_window(value)));
  }
}

}  // namespace pb
