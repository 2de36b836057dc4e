// The MoE FFN of layers 1..92 (docs/design.md §2.1 "MoE FFN"), on one rank.
//
//   x   [b, h] bf16   mixed2 (the AttnRes output before the FFN)
//   out [b, h] bf16   mlp_out = routed + shared (the layer adds the residual:
//                     hidden = add2(prefix2, mlp_out) is the layer's launch, not this block's)
//
// Norms, dense GEMMs, landings and elementwise run on the b bucket rows; the
// router top-k, the permutation and the expert GEMMs on the T live rows
// (T <= max_tokens <= b). Launches, in plan.cpp's moe_ffn() order and names:
//   rmsnorm.moe_in; gemm.router -> logits f32 [b, E]; moe.topk (T rows);
//   moe.plan (moe_permute_plan + the async copy of counts to the host);
//   gemm.lat_down + land.lat_down -> latent [b, lat]; moe.permute -> xp [T k, lat];
//   moe_gemm.gate_up (the host waits for the counts here) -> bf16 gate [V, I] and
//   up [V, I] (one grouped call: two problems per expert); situ; moe.weight (in
//   place); moe_gemm.down -> bf16 [V, lat]; moe.combine -> routed_latent
//   [T, lat] (rows T..b-1 zeroed in the same span); rmsnorm.routed_latent;
//   gemm.lat_up + land.lat_up -> routed [b, h]; gemm.shared -> f32 [b, 2 S];
//   land.shared_gate, land.shared_up; situ; gemm.shared_down + land.shared_down
//   -> shared [b, h]; add2 -> out.
// The expert GEMMs write bf16 themselves (cuBLAS rounds its f32 accumulator
// once, moe_gemm.h), so no landing follows them, with either engine.
// V = valid assignments = T k (router_topk never drops one). The cut switches
// pick the land (cut 1) and situ / add2 (cut 5) variants; everything else is
// the same launch either way, so cut on and off give the same bits.
// fp8 (docs/design.md §12): the dense projections' inputs are quantized after
// their producers (quant.moe_in after rmsnorm.moe_in, whose bf16 rows the
// router still reads; quant.routed_latent; quant.shared_act after the shared
// situ), under cut quant_fuse by the producers themselves (rmsnorm_fp8,
// situ_fp8); fp8 experts quantize their rows after the permutation
// (quant.moe_rows) and the weighted activations (quant.moe_act), K-major;
// under quant_fuse the latent rows once before it (quant.moe_latent: a token's
// rows are copies), and moe.permute and moe.weight write e4m3 themselves
// (moe_permute_fp8, moe_weight_fp8).
//
// Weights: one seeded synthetic set (block_common.h's synthetic_weight), shared
// by every MoE layer; the RMSNorm gains are 1 (gamma = nullptr). Expert weights
// are [E, 2 I, lat] (gate rows 0..I-1, up rows I..2I-1) and [E, lat, I]: at K3
// 9.9 + 4.9 GB bf16. The router bias is synthetic_router_bias(E, seed): a
// skewed, reproducible expert load (max/mean ~3 at T = 16384, E = 224, k = 16).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "block_common.h"
#include "cuts.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "gemm.h"
#include "model.h"
#include "moe_gemm.h"
#include "moe_route.h"
#include "timeline.h"

namespace pb {

struct MoeWeights {
  DeviceBuffer<__nv_bfloat16> router;  // [E, h], bf16 in every precision
  DeviceBuffer<float> router_bias;     // [E]
  ProjWeight lat_down;                 // [lat, h]
  ProjWeight expert_gate_up;           // [E, 2 I, lat]
  ProjWeight expert_down;              // [E, lat, I]
  ProjWeight lat_up;                   // [h, lat]
  ProjWeight shared_gate_up;           // [2 S, h]
  ProjWeight shared_down;              // [h, S]
};

// Takes the weight set from `mem` (Home::weights) and fills it on `stream`
// when mem.fills_weights() (seeded: same seed, same bits): the dense
// projections in `gemm`'s format, the routed experts' in `experts`' (fp8:
// scales at block-row stride k/128, what the fp8 expert engine reads).
MoeWeights make_moe_weights(const ModelShape& m, uint64_t seed, cudaStream_t stream,
                            DeviceMemory& mem = DeviceMemory::standalone(), Format gemm = Format::bf16,
                            Format experts = Format::bf16);

// The block's buffers for b = bucket rows and up to max_tokens live rows, all
// in the ffn lane (device_memory.h): the block runs within one turn. With fp8
// experts on the loop engine (moe_gemm: loop), the expert GEMMs' inputs and
// outputs get that engine's kMoeFp8LoopSlackRows and its scale blocks
// (moe_gemm.h); other runs take neither.
struct MoeBlockBuffers {
  static MoeBlockBuffers take(DeviceMemory& mem, const ModelShape& m, int64_t bucket, int64_t max_tokens,
                              Format gemm = Format::bf16, Format experts = Format::bf16, bool loop_engine = false);
  DeviceBuffer<__nv_bfloat16> normed_, latent_, xp_, gate_, up_, act_, yd_, routed_latent_, routed_norm_, routed_,
      sh_gate_, sh_up_, sh_act_, shared_;
  DeviceBuffer<float> partial_, logits_, topw_, loop_scales_;
  DeviceBuffer<int32_t> ids_, plan_counts_, plan_offsets_, perm_src_, perm_dst_, plan_ws_;
  // The GEMM inputs' fp8 twins: the dense projections' (fp8 gemm) and the
  // experts' (fp8 experts; K-major scales).
  Fp8Act normed_q_, routed_norm_q_, sh_act_q_, latent_q_, xp_q_, act_q_;
};

class MoeBlock : private MoeBlockBuffers {
 public:
  MoeBlock(const ModelShape& m, int64_t bucket, int64_t max_tokens, MoeWeights w, MoeBlockBuffers buffers);
  // Standalone: buffers and weights of its own, filled on `stream`.
  MoeBlock(const ModelShape& m, int64_t bucket, int64_t max_tokens, uint64_t seed, cudaStream_t stream)
      : MoeBlock(m, bucket, max_tokens, make_moe_weights(m, seed, stream),
                 take(DeviceMemory::standalone(), m, bucket, max_tokens)) {}

  // Every launch through tl (on tl.stream()); x and out are [b, h], distinct.
  // `engine` runs both expert GEMMs (the scenario's moe_gemm key); grouped
  // throws when this cuBLAS refuses it (grouped_gemm_supported), no fallback.
  void run(Timeline& tl, const Blas& blas, const CutSet& cuts, MoeGemmEngine engine, const __nv_bfloat16* x,
           int64_t tokens, __nv_bfloat16* out);

  const ModelShape& shape() const { return m_; }
  int64_t bucket() const { return b_; }
  const MoeWeights& weights() const { return w_; }
  // After run() and a stream sync: the last run's routing.
  const float* logits() const { return logits_.get(); }       // [b, E]
  const int32_t* ids() const { return ids_.get(); }            // [T, k]
  const float* topk_weights() const { return topw_.get(); }   // [T, k]
  const std::vector<int32_t>& counts() const { return counts_; }  // [E], host
  double load_imbalance() const;                               // max / mean of counts()

 private:
  ModelShape m_;
  int64_t b_, max_tokens_;
  MoeWeights w_;
  MoeGroupSizes sizes_;
  MoeGemm gemm_gate_up_, gemm_down_;
  std::vector<int32_t> counts_;
};

}  // namespace pb
