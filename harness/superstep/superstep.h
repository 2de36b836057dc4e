// The K3 CP prefill superstep of one rank (docs/design.md §2.1), launch by launch
// in plan.cpp's order and names: the embedding gather; per layer AttnRes
// before the mixer (from layer 1), the snapshot on every 12th layer, the mixer
// (KDA or MLA, across the CP lane), the residual add2 (snapshot layers restart
// the partial sum from the mixer's output), AttnRes before the FFN, the FFN
// (dense at layer 0, MoE elsewhere) and the residual add2; on the rank holding
// the context's last token (last_token_rank: the last rank, rank 0 under
// zigzag) the first token (AttnRes of its last row over every block, final
// norm, lm head, argmax). A rank's rows are its token ranges in order
// (rank_tokens: one segment, or zigzag's two chunks). Weights are one seeded set per layer kind; activations are
// sized by the bucket and reused across layers.
//
// `turn` runs each phase of a layer: the caller makes ranks of one GPU take
// turns through it (serialize_ranks) or just calls the phase. Phases: the
// mixer's projections (with the AttnRes before it), its cross-rank part, and
// the rest of the layer.
#pragma once

#include <cuda_bf16.h>

#include <functional>
#include <map>
#include <string>
#include <memory>
#include <vector>

#include "cuts.h"
#include "dense_ffn.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "first_token.h"
#include "fmha.h"
#include "gemm.h"
#include "kda_block.h"
#include "mla_block.h"
#include "moe_block.h"
#include "moe_gemm.h"
#include "scenario.h"
#include "timeline.h"
#include "turns.h"

namespace pb {

class Gang;
class Fabric;


class Superstep {
 public:
  // Every buffer from `mem` (device_memory.h): weights, the rank's own, the
  // turn-local lanes. Weights are filled when mem.fills_weights().
  Superstep(const Scenario& s, int rank, Fabric* fabric, const Blas& blas, cudaStream_t stream,
            DeviceMemory& mem = DeviceMemory::standalone());
  ~Superstep();
  // What rank `rank` of `s` takes under a placement, by home, the fabric's
  // slab included: the same takes as the constructor, with no device.
  static MemoryNeeds memory_needs(const Scenario& s, int rank, const Placement& p);

  // One superstep under `cuts`. With checksums, also fingerprints every
  // layer's output rows [0, T) (extra launches outside the timeline).
  // layers < the model's: a warm-up of layers [0, layers) only, no first token
  // (every rank of the gang must pass the same count).
  void run(const CutSet& cuts, Timeline& tl, const Turn& turn, bool checksums, int64_t layers = -1);
  // After run() and a stream sync: the first token (last_token_rank only, else -1),
  // the layer fingerprints, the final hidden rows.
  int64_t first_token() const;
  std::vector<uint64_t> layer_checksums() const;
  const __nv_bfloat16* hidden() const { return p_.hidden.get(); }  // [b, hidden]
  // After run(): `rows` live rows, evenly spaced with the first and the last
  // (row i = i * (T - 1) / (rows - 1)), times the first `cols` columns of the
  // final hidden state, as f32 [rows, cols].
  std::vector<float> hidden_samples(int rows, int cols) const;
  // After run(), on last_token_rank: the lm head's logits [vocab] as f32; else empty.
  std::vector<float> last_logits() const;
  int64_t live_rows() const { return t_; }
  // What the scenario's `auto` engines resolved to on this device: fmha,
  // moe_gemm, kda_forward_walk (absent when the model has no such layer).
  std::map<std::string, std::string> engines() const;

 private:
  // Everything the superstep takes, in the constructor's order.
  struct Parts {
    DeviceBuffer<__nv_bfloat16> embed_table;
    DeviceBuffer<float> sw;  // [2 * layers + 1, hidden]: sw_attn, sw_mlp per layer, then sw_out
    std::unique_ptr<MlaWeights> mla_w;
    std::unique_ptr<MlaBlockBuffers> mla;
    std::unique_ptr<KdaWeights> kda_w;
    std::unique_ptr<KdaBlockBuffers> kda;
    std::unique_ptr<MoeWeights> moe_w;
    std::unique_ptr<MoeBlockBuffers> moe;
    std::unique_ptr<DenseFfn> dense;
    std::unique_ptr<FirstToken> first;
    DeviceBuffer<int32_t> ids;
    DeviceBuffer<__nv_bfloat16> hidden, mixed, prefix2, ffn_out, snap, last_mixed;
    DeviceBuffer<float> scores;
    DeviceBuffer<unsigned long long> checksums;
  };
  static Parts take_parts(DeviceMemory& mem, const Scenario& s, int rank, cudaStream_t stream);
  void attnres_call(const CutSet& cuts, Timeline& tl, int64_t rows, int nb, const __nv_bfloat16* snap,
                    const __nv_bfloat16* partial, const float* sw, __nv_bfloat16* out);
  void add2_call(const CutSet& cuts, Timeline& tl, const __nv_bfloat16* a, const __nv_bfloat16* b,
                 __nv_bfloat16* out);

  const Scenario& s_;
  ModelShape m_;
  int rank_, cp_;
  int64_t b_, t_;
  const Blas& blas_;
  FmhaEngine fmha_;
  MoeGemmEngine moe_engine_;
  int64_t mla_seq_ = 0, kda_seq_ = 0;
  Parts p_;
  // blocks
  std::unique_ptr<MlaBlock> mla_;
  std::unique_ptr<KdaBlock> kda_;
  std::unique_ptr<MoeBlock> moe_;
  bool have_first_token_ = false;
};

// The gang's device memory for supersteps of `s` (device_memory.h): counts
// this rank's needs under the placement its GPU's ranks form, refuses a
// scenario that does not fit, shares weights and the turn-local arena.
// Collective over the gang.
// Refuses (pb::Error) a precision this device or build cannot run, before allocating.
GangMemory superstep_memory(const Gang& gang, int device, const Scenario& s);
// "" when this device and build run the scenario's precision; else why, naming the key.
std::string precision_device_problem(const Scenario& s);

// plan's memory table for `s` under a placement (ranks r*k .. r*k+k-1 on GPU r,
// k = ranks_per_gpu): each rank's needs by home, and the fullest GPU's budget.
struct MemoryBudget {
  std::vector<MemoryNeeds> ranks;  // [cp]
  GpuBudget fullest;               // the GPU that needs the most
  int fullest_processes = 0;       // its ranks (one process each)
  std::string table;               // printable
};
MemoryBudget superstep_memory_budget(const Scenario& s, const Placement& p);

}  // namespace pb
