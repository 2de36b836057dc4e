#include "turns.h"

#include "check.h"
#include "fabric.h"

namespace pb {

Turn make_turn(const Gang& gang, bool serial, IpcFabric* fab, cudaStream_t stream) {
  if (!serial) return [](const std::function<void()>& phase) { phase(); };
  return [&gang, fab, stream](const std::function<void()>& phase) {
    for (int r = 0; r < gang.size(); ++r) {
      if (r == gang.rank()) {
        phase();
        if (fab) fab->drain();
        PB_CUDA(cudaStreamSynchronize(stream));
      }
      gang.barrier();
    }
  };
}

}  // namespace pb
