// The state walk's launch parameters (internal to kda.cu and kda_walk_wgmma.cu):
// the workspace's chunk products of one segment and the walk's inputs and outputs.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace pb {

struct StateParams {
  const __nv_bfloat16 *w, *u, *khat, *qg, *aqk;  // [H, ws_chunks, 64, 128] (aqk: [.., 64, 64])
  const float* gamma;                            // [H, ws_chunks, 128]
  int64_t ws_chunks, tokens;
  int chunks;
  bool package;         // rows [D (dv); M (dk)]: grid.y = 8; else S: grid.y = 4
  const float* s_in;    // forward: S_in or null
  __nv_bfloat16* o;     // forward: o or null
  int64_t o_ld;
  float* s_out;  // forward: S_out or null; package: D
  float* m_out;  // package: M
};

}  // namespace pb
