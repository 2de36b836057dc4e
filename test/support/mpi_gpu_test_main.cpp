#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include <unistd.h>

#include "mpi_gpu_test.h"

namespace {
pb::Gang* g_test_gang = nullptr;

// Prints a non-root rank's doctest report when its tests failed, then removes it.
void print_failed_report(const std::string& path, int rank, bool failed) {
  if (failed) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) std::printf("[rank %d] %s\n", rank, line.c_str());
    std::fflush(stdout);
  }
  std::remove(path.c_str());
}
}  // namespace

const pb::Gang& pb::test_gang() { return *g_test_gang; }

using namespace pb;

int main(int argc, char** argv) {
  int rc = 0;
  {
    Gang gang(&argc, &argv);
    g_test_gang = &gang;
    int devices = 0;
    cudaError_t err = cudaGetDeviceCount(&devices);
    int have = err == cudaSuccess && devices > 0, all_have = 0;
    MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, gang.comm());
    if (!all_have) {
      if (!have) std::printf("SKIPPED: no CUDA device visible on rank %d (%s)\n", gang.rank(),
                             err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
      rc = 77;
    } else {
      int device = gang.local_rank() % devices;
      if (cudaSetDevice(device) != cudaSuccess) gang.fail("cudaSetDevice failed");
      std::printf("%s -> device %d of %d\n", gang.describe().c_str(), device, devices);
      doctest::Context context(argc, argv);
      // Rank 0 reports; another rank's report is printed only when it failed.
      const std::string report = "/tmp/pb-doctest-" + std::to_string(getpid()) + ".txt";
      if (!gang.is_root()) context.setOption("out", report.c_str());
      int failed = 0;
      try {
        failed = context.run();
      } catch (const std::exception& e) {
        gang.fail(e.what());
      }
      if (!gang.is_root()) print_failed_report(report, gang.rank(), failed != 0);
      int any_failed = 0;
      MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, gang.comm());
      rc = any_failed ? 1 : 0;
    }
  }
  return rc;
}
