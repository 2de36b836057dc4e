// The per-call staging of a grouped GEMM's problem arrays, shared by the
// CUTLASS expert engines (moe_gemm_cutlass.h, moe_gemm_fp8_cutlass.h): a ring
// of slots, each a pinned host block mirrored on the device plus the kernel's
// workspace, guarded by an event recorded after the launch that reads it, so
// the host never rewrites a slot the device still reads.
//
//   Slot& s = staging.take();           // waits for the slot's last launch
//   ... fill s.host ...; staging.upload(s, stream);
//   launch(kernel args in s.device, GroupedStaging::workspace(s, bytes));
//   GroupedStaging::launched(s, stream);
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace pb {

class GroupedStaging {
 public:
  struct Slot {
    char* host = nullptr;    // pinned [bytes]
    char* device = nullptr;  // [bytes]
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    cudaEvent_t done = nullptr;
    bool used = false;
  };

  GroupedStaging(size_t bytes, int slots);
  ~GroupedStaging();
  GroupedStaging(const GroupedStaging&) = delete;
  GroupedStaging& operator=(const GroupedStaging&) = delete;

  size_t bytes() const { return bytes_; }
  // The next slot of the ring, once the device has finished its last launch.
  Slot& take();
  // The slot's host block copied to its device block on `stream`.
  void upload(Slot& s, cudaStream_t stream) const;
  // The slot's workspace, grown to at least `bytes`.
  static void* workspace(Slot& s, size_t bytes);
  // Marks the slot in use until the work enqueued on `stream` so far is done.
  static void launched(Slot& s, cudaStream_t stream);

 private:
  size_t bytes_;
  std::vector<Slot> slots_;
  size_t next_ = 0;
};

// Whether the current device is compute capability 9.0, the sm_90a kernels' chip.
bool sm90_device();

}  // namespace pb
