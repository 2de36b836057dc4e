#include "gang_device.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "check.h"

namespace pb {

int select_gang_device(const Gang& gang, const char* command, const std::string& more) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (gang.is_root())
      std::fprintf(stderr, "prefill-bench %s: no CUDA device is visible on %s%s\n", command, gang.host().c_str(),
                   more.c_str());
    return -1;
  }
  const int device = gang.local_rank() % devices;
  PB_CUDA(cudaSetDevice(device));
  return device;
}

void check_fabric(const Scenario& s, const Gang& gang, const char* command) {
  if (s.cp == 1) return;
  PB_CHECK(s.fabric != "nccl", s.source + ": key 'fabric': nccl is not built yet (cross-node ranks need it); "
                                         "allowed here: ipc, auto (all ranks on one node)");
  PB_CHECK(gang.local_size() == gang.size(), std::string("prefill-bench ") + command +
                                                 ": the IPC fabric needs every rank on one node (" +
                                                 std::to_string(gang.local_size()) + " of " +
                                                 std::to_string(gang.size()) + " ranks are local)");
}

}  // namespace pb
