// A test-only slow-down (scenario keys debug.delay_family / debug.delay_us):
// one thread spins on the GPU's global timer for `us` microseconds, so a
// regression check can be shown to fail on a deliberately slowed family.
#pragma once

#include <cuda_runtime_api.h>

namespace pb {

void gpu_delay(double us, cudaStream_t stream);

}  // namespace pb
