// Device memory shared by the ranks of one GPU (harness/platform/shared_region.h)
// under mpirun -np 4, in both modes: the first rank of each GPU allocates a
// region and writes a pattern, every rank reads it through its own mapping,
// each writes its slot (a copy and a memset kernel), and the first rank sees
// every slot. Under vmm the mapping is at least 2 MiB-granular and aligned.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "check.h"
#include "mpi_gpu_test.h"
#include "shared_region.h"

using namespace pb;

namespace {

// The ranks of this node that share this rank's device.
MPI_Comm gpu_comm(const Gang& gang, int device) {
  MPI_Comm node, gpu;
  MPI_Comm_split_type(gang.comm(), MPI_COMM_TYPE_SHARED, gang.rank(), MPI_INFO_NULL, &node);
  MPI_Comm_split(node, device, gang.rank(), &gpu);
  MPI_Comm_free(&node);
  return gpu;
}

uint32_t pattern(size_t i) { return uint32_t(i * 2654435761u) ^ 0x5eed; }

void check_region(ShareMode mode) {
  const Gang& gang = test_gang();
  int device = 0;
  PB_CUDA(cudaGetDevice(&device));
  MPI_Comm comm = gpu_comm(gang, device);
  int me = 0, size = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &size);
  const int64_t asked = 5 * (int64_t(1) << 20) + 4096 + 12;  // not a multiple of any granularity
  const size_t words = size_t(asked / 4) - 64;                // the pattern; 64 words of slots after it
  {
    SharedRegion region = SharedRegion::share(mode, asked, comm, device, "the test region", 30.0);
    REQUIRE(region.base() != nullptr);
    CHECK(region.allocated_here() == (me == 0));
    if (mode == ShareMode::vmm) {
      CHECK(region.granularity() >= kLargePage);
      CHECK(region.bytes() % region.granularity() == 0);
      CHECK(region.bytes() >= asked);
      CHECK(reinterpret_cast<uintptr_t>(region.base()) % uint64_t(region.granularity()) == 0);
    } else {
      CHECK(region.granularity() == 0);
      CHECK(region.bytes() == asked);
    }
    auto* data = reinterpret_cast<uint32_t*>(region.base());
    std::vector<uint32_t> host(words);
    if (me == 0) {
      for (size_t i = 0; i < words; ++i) host[i] = pattern(i);
      PB_CUDA(cudaMemcpy(data, host.data(), words * 4, cudaMemcpyHostToDevice));
      PB_CUDA(cudaMemset(data + words, 0, 64 * 4));
      PB_CUDA(cudaDeviceSynchronize());
    }
    MPI_Barrier(comm);
    std::vector<uint32_t> back(words);
    PB_CUDA(cudaMemcpy(back.data(), data, words * 4, cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < words; ++i) wrong += back[i] != pattern(i);
    CHECK(wrong == 0);
    // Each rank's slot: byte value 1 + rank in every byte of its word (a memset kernel).
    PB_CUDA(cudaMemset(data + words + me, 1 + me, 4));
    PB_CUDA(cudaDeviceSynchronize());
    MPI_Barrier(comm);
    if (me == 0) {
      const size_t ranks = size_t(size);
      std::vector<uint32_t> slots(ranks);
      PB_CUDA(cudaMemcpy(slots.data(), data + words, slots.size() * 4, cudaMemcpyDeviceToHost));
      for (int r = 0; r < size; ++r) CHECK(slots[size_t(r)] == 0x01010101u * uint32_t(1 + r));
    }
    // Importers release first (legacy IPC needs the order), then the first rank.
    if (me != 0) region.release();
    MPI_Barrier(comm);
  }
  MPI_Comm_free(&comm);
}

}  // namespace

TEST_CASE("share_memory vmm: one allocation, mapped by every rank of the GPU at a large granularity") {
  check_region(ShareMode::vmm);
}

TEST_CASE("share_memory ipc: one allocation, mapped by every rank of the GPU over legacy CUDA IPC") {
  check_region(ShareMode::ipc);
}
