#include "grouped_staging.h"

#include "check.h"

namespace pb {

GroupedStaging::GroupedStaging(size_t bytes, int slots) : bytes_(bytes), slots_(size_t(slots)) {
  PB_CHECK(slots >= 1 && bytes >= 1, "GroupedStaging: needs at least one slot of at least one byte");
  for (Slot& s : slots_) {
    PB_CUDA(cudaMallocHost(reinterpret_cast<void**>(&s.host), bytes_));
    PB_CUDA(cudaMalloc(reinterpret_cast<void**>(&s.device), bytes_));
    PB_CUDA(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  }
}

GroupedStaging::~GroupedStaging() {
  for (Slot& s : slots_) {
    if (s.done) PB_CUDA_NOTHROW(cudaEventDestroy(s.done));
    if (s.workspace) PB_CUDA_NOTHROW(cudaFree(s.workspace));
    if (s.device) PB_CUDA_NOTHROW(cudaFree(s.device));
    if (s.host) PB_CUDA_NOTHROW(cudaFreeHost(s.host));
  }
}

GroupedStaging::Slot& GroupedStaging::take() {
  Slot& s = slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  if (s.used) PB_CUDA(cudaEventSynchronize(s.done));  // the device is done reading this slot
  return s;
}

void GroupedStaging::upload(Slot& s, cudaStream_t stream) const {
  PB_CUDA(cudaMemcpyAsync(s.device, s.host, bytes_, cudaMemcpyHostToDevice, stream));
}

void* GroupedStaging::workspace(Slot& s, size_t bytes) {
  if (bytes > s.workspace_bytes) {
    if (s.workspace) PB_CUDA(cudaFree(s.workspace));
    s.workspace = nullptr;
    PB_CUDA(cudaMalloc(&s.workspace, bytes));
    s.workspace_bytes = bytes;
  }
  return s.workspace;
}

void GroupedStaging::launched(Slot& s, cudaStream_t stream) {
  PB_CUDA(cudaEventRecord(s.done, stream));
  s.used = true;
}

bool sm90_device() {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
  if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return false;
  return major == 9 && minor == 0;
}

}  // namespace pb
