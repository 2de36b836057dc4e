#include "turns.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "check.h"
#include "device_memory.h"
#include "fabric.h"

namespace pb {

namespace {
// PB_TRACE_TURNS=1: every serialized turn prints when this rank starts its
// phase and when it has drained and synchronized it (finding a stuck turn).
bool trace_turns() {
  const char* e = std::getenv("PB_TRACE_TURNS");
  return e && std::string(e) == "1";
}
}  // namespace

Turn make_turn(const Gang& gang, bool serial, Fabric* fab, cudaStream_t stream, int settle_ms,
               const DeviceMemory* poison) {
  if (!serial) return [](const std::function<void()>& phase) { phase(); };
  if (fab) fab->take_turns(true);  // NCCL sends wait for their receiver's turn (fabric.h)
  auto count = std::make_shared<long>(0);
  const bool trace = trace_turns();
  return [&gang, fab, stream, count, trace, settle_ms, poison](const std::function<void()>& phase) {
    const long n = (*count)++;
    for (int r = 0; r < gang.size(); ++r) {
      if (r == gang.rank()) {
        if (settle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
        if (trace) std::fprintf(stderr, "rank %d: turn %ld starts\n", r, n);
        phase();
        if (fab) fab->drain();
        if (poison) poison->poison_arena(stream);
        PB_CUDA(cudaStreamSynchronize(stream));
        if (trace) std::fprintf(stderr, "rank %d: turn %ld done\n", r, n);
      }
      if (fab) fab->barrier();  // serves the turn's receivers' requests while it waits
      else gang.barrier();
    }
  };
}

}  // namespace pb
