// Exercised by mpi_gpu.fabric_timeout: rank 1 waits on a doorbell nobody rings.
// The host watchdog must fail the job within the time-out (2 s) with a message
// naming the rank, layer and window, while the other ranks wait in a barrier.
// Without a CUDA device every rank prints "SKIPPED: no CUDA device" (the
// test's regex accepts it; PASS_REGULAR_EXPRESSION ignores exit codes).
#include <cuda_runtime_api.h>

#include <cstdio>

#include "fabric.h"

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  int devices = 0;
  cudaError_t err = cudaGetDeviceCount(&devices);
  int have = err == cudaSuccess && devices > 0, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, gang.comm());
  if (!all_have) {
    if (gang.is_root()) std::printf("SKIPPED: no CUDA device visible on every rank\n");
    return 0;
  }
  try {
    PB_CUDA(cudaSetDevice(gang.local_rank() % devices));
    const int cp = gang.size();
    pb::Fabric fab(gang, pb::slab_layout(cp, 16, 2), 2.0);
    gang.barrier();
    if (gang.rank() == 1) {
      cudaStream_t stream;
      PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      fab.wait(pb::doorbell_index(cp, 2 % cp, pb::Bell::returned), pb::doorbell_value(7, 5), stream,
               {3, 5, "planted: a doorbell nobody rings"});
      fab.drain();  // must fail the gang, not return
      gang.fail("the planted wait passed without a ring");
    }
    gang.barrier();  // never completes: rank 1 ends the job
  } catch (const std::exception& e) {
    gang.fail(e.what());
  }
  return 0;
}
