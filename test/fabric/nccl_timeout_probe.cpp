// Exercised by mpi_gpu.nccl_timeout: over fabric nccl (every rank its own
// emulated host, so the ranks may share one GPU), rank 1 waits for a window
// from rank 0 that rank 0 never sends (a stalled peer). The host watchdog must
// abort the NCCL links and fail the job within the time-out (2 s) with a
// message naming the rank, layer and window, while the other ranks wait in a
// barrier. Without a CUDA device every rank prints "SKIPPED: no CUDA device"
// (the test's regex accepts it; PASS_REGULAR_EXPRESSION ignores exit codes).
#include <cuda_runtime_api.h>

#include <cstdio>

#include "fabric.h"

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  try {
    const int cp = gang.size();
    const pb::FabricPlan plan = pb::plan_fabric("nccl", pb::gang_hosts(gang), cp, "nccl_timeout_probe");
    pb::prepare_nccl_environment(plan, gang.rank(), /*serialized=*/false);  // before CUDA starts
    int devices = 0;
    const cudaError_t err = cudaGetDeviceCount(&devices);
    int have = err == cudaSuccess && devices > 0, all_have = 0;
    MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, gang.comm());
    if (!all_have) {
      if (gang.is_root()) std::printf("SKIPPED: no CUDA device visible on every rank\n");
      return 0;
    }
    PB_CUDA(cudaSetDevice(gang.local_rank() % devices));
    pb::Fabric fab(gang, pb::slab_layout(cp, 16, 2), 2.0, plan);
    gang.barrier();
    if (gang.rank() == 1) {
      cudaStream_t stream;
      PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      pb::Timeline tl(stream, false);
      tl.set_layer(3);
      const pb::SlabLayout& L = fab.layout();
      tl.launch("fabric", "fabric.wait_window", [&] {
        fab.fetch(0, pb::Bell::window, pb::doorbell_value(7, 0), {{L.kv, 64}}, tl,
                  {3, 5, "planted: a message its sender never sends"});
      });
      fab.drain();  // must fail the gang, not return
      gang.fail("the planted wait passed without a message");
    }
    gang.barrier();  // never completes: rank 1 ends the job
  } catch (const std::exception& e) {
    gang.fail(e.what());
  }
  return 0;
}
