// Device memory that the ranks of one GPU share (the weights and the
// turn-local arena, device_memory.h): the first rank of the GPU's communicator
// allocates a region, the others map it. Two ways, picked by the scenario key
// share_memory:
//
//   vmm  the CUDA virtual memory API. The first rank cuMemCreates the region at
//        a large granularity (the device's recommended one, at least 2 MiB),
//        exports it as a POSIX file descriptor and hands that to the others
//        over a Unix domain socket (fd_share.h). Every rank, the first
//        included, reserves its own address range and maps the allocation
//        there, read-write for the device.
//   ipc  legacy CUDA IPC: cudaMalloc, cudaIpcGetMemHandle, the handle broadcast
//        over MPI, cudaIpcOpenMemHandle.
//
// Why vmm is the default: an importer maps a legacy IPC allocation with small
// pages and pays in TLB misses, worst on strided access, where a VMM
// allocation is mapped at its own granularity in every process
// (docs/results-h200.md has the A/B, results/h200/shared-memory-cp4-4layers*).
// `ipc` stays as that A/B.
//
// Every driver call goes through the runtime's entry-point lookup
// (driver_entry_point, launch.h): nothing links libcuda. Every call is checked
// with a message naming it; the socket steps have deadlines (fd_share.h).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

namespace pb {

enum class ShareMode { vmm, ipc };
const char* share_mode_name(ShareMode m);
// "vmm" or "ipc" (the scenario's spelling); anything else throws naming the allowed values.
ShareMode share_mode_from_name(const std::string& name);

// The VMM allocation granularity: the recommended one, raised to at least
// kLargePage and rounded up to a multiple of the minimum.
constexpr int64_t kLargePage = int64_t(2) << 20;
int64_t region_granularity(int64_t minimum, int64_t recommended);
// bytes rounded up to a multiple of granularity (> 0).
int64_t round_up(int64_t bytes, int64_t granularity);

class SharedRegion {
 public:
  SharedRegion() = default;
  // Collective over comm, whose ranks have `device` current: comm's rank 0
  // allocates `bytes` (vmm: rounded up to the granularity), the others map
  // it. `what` names the region in messages ("the weights"); timeout_s bounds
  // each socket step. Zero bytes: an empty region, nothing allocated.
  static SharedRegion share(ShareMode mode, int64_t bytes, MPI_Comm comm, int device, const std::string& what,
                            double timeout_s);
  ~SharedRegion() { release(); }
  SharedRegion(SharedRegion&& o) noexcept;
  SharedRegion& operator=(SharedRegion&& o) noexcept;
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  char* base() const { return base_; }
  int64_t bytes() const { return bytes_; }              // mapped (vmm: rounded up)
  int64_t granularity() const { return granularity_; }  // vmm: the mapping's; ipc: 0
  bool allocated_here() const { return exporter_; }     // this rank allocated the region

  // Unmaps and drops this process's reference (no-throw; a failure prints a
  // warning). Under legacy IPC the allocating rank must release last.
  void release() noexcept;
  // Forgets the region without releasing it: the process's exit frees it
  // (unwinding from an error, when the other ranks may still use it).
  void abandon() noexcept;

 private:
  static SharedRegion share_vmm(int64_t bytes, MPI_Comm comm, int device, const std::string& what,
                                double timeout_s);
  static SharedRegion share_ipc(int64_t bytes, MPI_Comm comm, const std::string& what);
  // vmm: reserves an address range of bytes_ and maps handle_ there, read-write for `device`.
  void map_vmm(int device, const std::string& what);

  ShareMode mode_ = ShareMode::vmm;
  bool exporter_ = false;
  char* base_ = nullptr;
  int64_t bytes_ = 0, granularity_ = 0;
  unsigned long long handle_ = 0;  // vmm: the CUmemGenericAllocationHandle; 0 = none
  bool mapped_ = false;            // vmm: base_ maps handle_
};

}  // namespace pb
