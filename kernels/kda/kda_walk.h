// The state walks outside kda.cu (internal; kda.cu's launch_state dispatches to them).
#pragma once

#include <cuda_runtime_api.h>

#include "kda_state_params.h"

namespace pb {

// KdaWalk::kWgmma (kda_walk_wgmma.cu): the forward walk on warpgroup MMA, one CTA per head.
// p.package must be false. Checks that the current device is sm_90 (wgmma).
void launch_walk_wgmma(const StateParams& p, int heads, cudaStream_t stream);

}  // namespace pb
