// The KDA mixer of one rank (docs/design.md §2.1 "KDA mixer", §3 "KDA across
// ranks"), launch by launch in plan.cpp's order and names:
//
//   rmsnorm.kda_in  gemm.kda_g  gemm.kda_small  land.beta  land.f_a  land.out_gate
//   gemm.kda_f_b
//   [fabric.wait_halo_free  fabric.publish_halo]                  (rank < cp - 1)
//   [fabric.wait_halo  gemm.halo_qkv  land.halo_q/k/v  fabric.release_halo]  (rank > 0)
//   per stream q, k, v: gemm.kda_<s>, then conv.chunk_<s> (cut 2) or the
//     retired path conv.land_<s>, conv.window_copy x <= 6, conv.decode_<s>, conv.carry_copy
//   land.forget  kda.prepare
//   [fabric.wait_state_free  kda.package  fabric.publish_state]   (rank < cp - 1)
//   [fabric.wait_state  kda.fold  fabric.release_state]           (rank > 0)
//   kda.forward  o_norm_gate  gemm.kda_o  land.kda_o
//
// The partial of the big projection is [b, 4·inner] f32 (bands q | k | v | g,
// DESIGN's wbig), each band GEMM writing its columns. The conv carry of rank
// r > 0 is the upstream rank's last 3 normed rows, delivered into this rank's
// slab (halo[parity]) and projected here through the q/k/v bands at 4 rows;
// rank 0's carry is zeros. Packages (M, D) are written into the own slab
// (M[parity], D[parity]) and folded by every downstream rank: in place over
// IPC, from its copy over NCCL (fabric.h).
// Doorbells (kinds halo, halo_read, state, state_read; value (seq + 1)·4096)
// guard each parity slot: a writer waits for its readers' acknowledgement of
// call seq - 2 before overwriting. seq = the KDA call's sequence number, the
// same on every rank. Segments must hold >= 3 tokens.
#pragma once

#include <cuda_bf16.h>

#include "conv_silu_chunk.h"
#include "cuts.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "gemm.h"
#include "kda.h"
#include "model.h"
#include "schedule.h"
#include "slab_layout.h"
#include "timeline.h"

namespace pb {

class Fabric;
struct WaitLabel;

// One weight set shared by every KDA layer (seeded).
struct KdaWeights {
  // Taken from `mem` (Home::weights) and filled when mem.fills_weights().
  KdaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem = DeviceMemory::standalone());
  DeviceBuffer<__nv_bfloat16> wbig;   // [4·inner, hidden]: q | k | v | g rows
  DeviceBuffer<__nv_bfloat16> wsm;    // [256, hidden]: beta (heads) | f_a (f_rank) | pad
  DeviceBuffer<__nv_bfloat16> w_f_b;  // [inner, f_rank]
  DeviceBuffer<__nv_bfloat16> w_o;    // [hidden, inner]
  DeviceBuffer<float> conv_taps;      // [3 streams, 4, inner]
  DeviceBuffer<float> dt_bias;        // [inner]
  DeviceBuffer<float> A_log;          // [heads]
  DeviceBuffer<float> gamma_o;        // [head_dim]
  DeviceBuffer<float> gain_in;        // RMSNorm gain [hidden]
};

struct KdaLane {
  int rank = 0, cp = 1;
  std::vector<Segment> segments;
  int64_t rows = 0;  // b
  Fabric* fabric = nullptr;  // null at cp 1
};

// The block's buffers and where they live (device_memory.h): the mixer lane
// for what one turn writes and reads, the rank for what crosses turns
// (out_gate and the prepared chunks from the projections to the walk and the
// output, the core's output, the conv carry).
struct KdaBlockBuffers {
  static KdaBlockBuffers take(DeviceMemory& mem, const ModelShape& m, const KdaLane& lane);
  DeviceBuffer<__nv_bfloat16> normed_, small_, out_gate_, forget_, qkv_[3], next_[3], carry_, core_, gated_,
      attn_out_;
  DeviceBuffer<float> partial_, small_partial_, forget_partial_, halo_partial_, o_partial_, s_in_, fold_scratch_;
  DeviceBuffer<unsigned char> conv_scratch_;
};

class KdaBlock : private KdaBlockBuffers {
 public:
  KdaBlock(const ModelShape& m, const KdaWeights& w, const KdaLane& lane, KdaBlockBuffers buffers);
  KdaBlock(const ModelShape& m, const KdaWeights& w, const KdaLane& lane)
      : KdaBlock(m, w, lane, take(DeviceMemory::standalone(), m, lane)) {}
  ~KdaBlock();

  // mixed [b, hidden] bf16 -> attn_out() [b, hidden] bf16 (rows >= T of the
  // core's output are zero, so every row is defined).
  void run(const __nv_bfloat16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas);
  // run() in three phases for ranks taking turns (serialize_ranks):
  // projections, halo, conv and prepare; package, fold and walk; the output.
  void project(const __nv_bfloat16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas);
  void recur(Timeline& tl, const Blas& blas);
  void finish(Timeline& tl, const Blas& blas);

  const __nv_bfloat16* attn_out() const { return attn_out_.get(); }
  const __nv_bfloat16* core_out() const { return core_.get(); }  // [b, inner], rows >= T zero
  int64_t live_rows() const { return lane_.segments[lane_.rank].len; }
  // The state walk the forward runs on this device ("wgmma" on sm_90, else "head").
  const char* forward_walk_name() const;

 private:
  void halo(Timeline& tl, const Blas& blas);
  void conv_stream(int i, Timeline& tl, const Blas& blas);
  WaitLabel label(const Timeline& tl, const std::string& what) const;

  ModelShape m_;
  const KdaWeights& w_;
  KdaLane lane_;
  int64_t b_, inner_;
  int64_t seq_ = 0;
  CutSet cuts_;
  KdaWorkspace ws_;
  KdaWalk forward_walk_ = kda_default_forward_walk();  // the forward's walk; the package takes kKdaPackageWalk
};

}  // namespace pb
