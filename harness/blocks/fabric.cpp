#include "fabric.h"

#include <cuda.h>  // driver types and enums only: nothing here links libcuda

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "launch.h"

namespace pb {

namespace {

// The two stream memory operations and the attribute query, from the driver
// at run time (driver_entry_point, launch.h; CUDA 12 ABI: the _v2 calls).
using StreamValue64Fn = CUresult(CUDAAPI*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using DeviceAttributeFn = CUresult(CUDAAPI*)(int*, CUdevice_attribute, CUdevice);

struct StreamMemOps {
  StreamValue64Fn write64 = nullptr;
  StreamValue64Fn wait64 = nullptr;
};

void cu_check(CUresult rc, const char* what) {
  PB_CHECK(rc == CUDA_SUCCESS, std::string(what) + " failed: CUresult " + std::to_string(int(rc)));
}

// Looked up once per process; the attribute is checked for the current device.
const StreamMemOps& stream_mem_ops() {
  static const StreamMemOps ops = [] {
    StreamMemOps o;
    o.write64 = reinterpret_cast<StreamValue64Fn>(driver_entry_point("cuStreamWriteValue64", "the fabric"));
    o.wait64 = reinterpret_cast<StreamValue64Fn>(driver_entry_point("cuStreamWaitValue64", "the fabric"));
    return o;
  }();
  return ops;
}

void require_stream_mem_ops(int device) {
  auto get_attribute = reinterpret_cast<DeviceAttributeFn>(driver_entry_point("cuDeviceGetAttribute", "the fabric"));
  int can64 = 0;
  cu_check(get_attribute(&can64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, CUdevice(device)),
           "cuDeviceGetAttribute(CAN_USE_64_BIT_STREAM_MEM_OPS)");
  PB_CHECK(can64 == 1, "device " + std::to_string(device) +
                           " does not support 64-bit stream memory operations (cuStreamWaitValue64): the "
                           "IPC fabric's doorbells need them (driver / platform without stream mem ops)");
  stream_mem_ops();
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", s);
  return buf;
}

}  // namespace

cudaError_t wait_or_abort(const Gang& gang, cudaEvent_t done, std::chrono::steady_clock::time_point deadline,
                          double timeout_s, const std::string& what) {
  for (;;) {
    cudaError_t rc = cudaEventQuery(done);
    if (rc != cudaErrorNotReady) return rc;
    if (std::chrono::steady_clock::now() > deadline)
      gang.fail("wait timed out after " + fmt_seconds(timeout_s) + ": " + what);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

IpcFabric::IpcFabric(const Gang& gang, const SlabLayout& layout, double timeout_s)
    : gang_(gang), layout_(layout), timeout_s_(timeout_s), rank_(gang.rank()) {
  PB_CHECK(layout_.cp == gang.size(), "IpcFabric: the slab layout is for cp " + std::to_string(layout_.cp) +
                                          " but the gang has " + std::to_string(gang.size()) + " ranks");
  PB_CHECK(timeout_s_ > 0, "IpcFabric: the wait time-out must be positive");
  PB_CHECK(gang.local_size() == gang.size(),
           "IpcFabric maps peers over CUDA IPC and needs every rank on one node, but only " +
               std::to_string(gang.local_size()) + " of " + std::to_string(gang.size()) +
               " ranks share this node: cross-node CP needs the NCCL fabric (not implemented yet)");
  int device = 0;
  PB_CUDA(cudaGetDevice(&device));
  require_stream_mem_ops(device);

  void* slab = nullptr;
  PB_CUDA(cudaMalloc(&slab, size_t(layout_.total_bytes)));
  own_ = static_cast<char*>(slab);
  PB_CUDA(cudaMemset(own_, 0, size_t(layout_.total_bytes)));  // doorbells start at 0; no wait passes on 0
  PB_CUDA(cudaDeviceSynchronize());

  // Every rank's handle on every rank: gather to rank 0, broadcast back. The
  // exchange also orders every rank's zeroed doorbells before any peer rings.
  cudaIpcMemHandle_t mine;
  PB_CUDA(cudaIpcGetMemHandle(&mine, own_));
  std::vector<std::string> parts = gang.gather(std::string(reinterpret_cast<const char*>(&mine), sizeof mine));
  std::string all;
  for (const auto& p : parts) all += p;
  all = gang.broadcast(all);
  PB_CHECK(all.size() == sizeof(cudaIpcMemHandle_t) * size_t(gang.size()), "IpcFabric: bad IPC handle exchange");

  peers_.assign(size_t(gang.size()), nullptr);
  peers_[rank_] = own_;
  for (int r = 0; r < gang.size(); ++r) {
    if (r == rank_) continue;  // IPC refuses a process's own handle; use the allocation itself
    cudaIpcMemHandle_t h;
    std::memcpy(&h, all.data() + size_t(r) * sizeof h, sizeof h);
    void* p = nullptr;
    cudaError_t rc = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    PB_CHECK(rc == cudaSuccess, "cudaIpcOpenMemHandle(slab of rank " + std::to_string(r) + "): " +
                                    cudaGetErrorName(rc) + " (" + cudaGetErrorString(rc) +
                                    "); ranks on different GPUs need peer access between them");
    peers_[r] = static_cast<char*>(p);
  }
}

IpcFabric::~IpcFabric() {
  for (auto& p : pending_) {
    if (p.before) PB_CUDA_NOTHROW(cudaEventDestroy(p.before));
    if (p.after) PB_CUDA_NOTHROW(cudaEventDestroy(p.after));
  }
  for (int r = 0; r < int(peers_.size()); ++r)
    if (r != rank_ && peers_[r]) PB_CUDA_NOTHROW(cudaIpcCloseMemHandle(peers_[r]));
  if (own_) PB_CUDA_NOTHROW(cudaFree(own_));
}

char* IpcFabric::peer_base(int r) const {
  PB_CHECK(r >= 0 && r < int(peers_.size()), "IpcFabric: rank " + std::to_string(r) + " outside the gang");
  return peers_[r];
}

void IpcFabric::check_flag(int flag) const {
  PB_CHECK(flag >= 0 && flag < layout_.n_doorbells(),
           "IpcFabric: doorbell " + std::to_string(flag) + " outside [0, " +
               std::to_string(layout_.n_doorbells()) + ")");
}

void IpcFabric::ring(int peer, int flag, uint64_t value, cudaStream_t stream) {
  check_flag(flag);
  PB_CHECK(peer != rank_, "IpcFabric::ring: a rank rings its peers, not itself");
  auto addr = CUdeviceptr(at(peer, layout_.doorbells)) + CUdeviceptr(flag) * sizeof(uint64_t);
  cu_check(stream_mem_ops().write64(CUstream(stream), addr, value, CU_STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue64 (ring)");
  ++stats_.rings;
}

void IpcFabric::wait(int flag, uint64_t value, cudaStream_t stream, WaitLabel label) {
  check_flag(flag);
  Pending p;
  p.flag = flag;
  p.value = value;
  p.label = std::move(label);
  PB_CUDA(cudaEventCreate(&p.before));
  PB_CUDA(cudaEventCreate(&p.after));
  PB_CUDA(cudaEventRecord(p.before, stream));
  auto addr = CUdeviceptr(own_ + layout_.doorbells.offset) + CUdeviceptr(flag) * sizeof(uint64_t);
  cu_check(stream_mem_ops().wait64(CUstream(stream), addr, value, CU_STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue64 (wait)");
  PB_CUDA(cudaEventRecord(p.after, stream));
  p.deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(timeout_s_));
  pending_.push_back(std::move(p));
}

std::string IpcFabric::describe_wait(const Pending& p) const {
  int sender = p.flag % layout_.cp;
  auto kind = Bell(p.flag / layout_.cp);
  return "rank " + std::to_string(rank_) + ", layer " + std::to_string(p.label.layer) + ", window " +
         std::to_string(p.label.window) + " (" + p.label.what + "): doorbell " + std::to_string(p.flag) + " (" +
         bell_name(kind) + " from rank " + std::to_string(sender) + ") never reached " + std::to_string(p.value) +
         " = seq " + std::to_string(doorbell_seq(p.value)) + ", window " +
         std::to_string(doorbell_window(p.value));
}

void IpcFabric::drain() {
  for (auto& p : pending_) {
    PB_CUDA(wait_or_abort(gang_, p.after, p.deadline, timeout_s_, describe_wait(p)));
    float ms = 0;
    PB_CUDA(cudaEventElapsedTime(&ms, p.before, p.after));
    double us = double(ms) * 1e3;
    ++stats_.waits;
    stats_.wait_us_total += us;
    if (us > stats_.wait_us_max) stats_.wait_us_max = us;
    PB_CUDA(cudaEventDestroy(p.before));
    PB_CUDA(cudaEventDestroy(p.after));
    p.before = p.after = nullptr;
  }
  pending_.clear();
}

void IpcFabric::copy_to_peer(int peer, int64_t offset, const void* src, int64_t bytes, cudaStream_t stream) {
  PB_CHECK(offset >= 0 && bytes >= 0 && offset + bytes <= layout_.total_bytes,
           "IpcFabric::copy_to_peer: [offset, offset + bytes) outside the slab");
  PB_CUDA(cudaMemcpyAsync(peer_base(peer) + offset, src, size_t(bytes), cudaMemcpyDefault, stream));
  stats_.bytes_written += bytes;
}

uint64_t IpcFabric::doorbell(int flag) const {
  check_flag(flag);
  uint64_t v = 0;
  PB_CUDA(cudaMemcpy(&v, own_ + layout_.doorbells.offset + flag * sizeof(uint64_t), sizeof v,
                     cudaMemcpyDeviceToHost));
  return v;
}

}  // namespace pb
