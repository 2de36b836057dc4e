// The KDA mixer of one rank (docs/design.md §2.1 "KDA mixer", §3 "KDA across
// ranks"), launch by launch in plan.cpp's order and names:
//
//   rmsnorm.kda_in  gemm.kda_g  gemm.kda_small  land.beta  land.f_a  land.out_gate
//   gemm.kda_f_b
//   per piece, per rank reading its tail:  [fabric.wait_halo_free  fabric.publish_halo]
//   per piece with a carry from a peer:    [fabric.wait_halo  gemm.halo_qkv  land.halo_q/k/v  fabric.release_halo]
//   per stream q, k, v: gemm.kda_<s>, then per piece conv.chunk_<s> (cut 2) or the
//     retired path conv.land_<s>, conv.window_copy x <= 6, conv.decode_<s>, conv.carry_copy
//   land.forget  kda.prepare (per piece)
//   per piece with a package:  [fabric.wait_state_free]  kda.package  [fabric.publish_state]
//   per piece:  [fabric.wait_state]  [kda.fold]  [fabric.release_state]  kda.forward
//   o_norm_gate  gemm.kda_o  land.kda_o
//
// With fp8 projections (precision.gemm: fp8, docs/design.md §12) each GEMM's
// input is quantized first: quant.kda_in after the RMSNorm (under cut
// quant_fuse the RMSNorm writes it, rmsnorm_fp8), quant.f_a after land.f_a,
// quant.halo after fabric.wait_halo, quant.kda_o after o_norm_gate (under
// quant_fuse o_norm_gate writes it, o_norm_gate_fp8).
//
// Under cut 8 (overlap) the projections launch what needs no halo before the
// wait for it; the walk is unchanged (a piece's package is already published
// before its folds wait, and everything after a fold reads its S_in):
//
//   rmsnorm.kda_in  [fabric.wait_halo_free  fabric.publish_halo]
//   gemm.kda_g  gemm.kda_small  land.beta  land.f_a  land.out_gate  gemm.kda_f_b
//   gemm.kda_q  gemm.kda_k  gemm.kda_v  land.forget
//   [fabric.wait_halo  gemm.halo_qkv  land.halo_q/k/v  fabric.release_halo]
//   per stream q, k, v, per piece: its conv launches;  kda.prepare (per piece)
//
// The same launches, each on the same inputs (the halo rows are the normed
// rows; the stream GEMMs write their own columns of the partial, the halo
// GEMM its own buffer; the convs read both), so the same bits. A rank's
// halo goes out before its own projections, so the downstream piece's wait
// ends sooner.
//
// A rank's rows are one or two pieces (schedule.h kda_pieces): contiguous,
// one; layout zigzag, its two chunks (one on rank cp - 1, whose chunks
// touch). Each piece is its own conv and state walk:
//   - its conv carry is the last 3 normed rows of the piece before it in token
//     order, delivered by that piece's rank into this rank's halo slot of the
//     piece (slab_layout.h halo_slot) and projected here through the q/k/v
//     bands at 4 rows; zeros at the sequence start;
//   - its S_in is the fold of the (M, D) packages of every piece before it, in
//     token order: packages are written into the packaging rank's slab
//     (M_slot, D_slot of the piece) and read in place over IPC, from a copy
//     over NCCL (fabric.h); a later piece continues the earlier piece's fold
//     (S = S_in of the earlier piece, then S = S·M + D for each further package).
// The partial of the big projection is [b, 4·inner] f32 (bands q | k | v | g,
// DESIGN's wbig), each band GEMM writing its columns.
// Doorbells (kinds halo, halo_read, state, state_read; value (seq + 1)·4096 +
// window): halo and halo_read window 0 (a rank sends at most one halo to a
// peer); state window = the package's piece index; a reader acknowledges a
// sender once (state_read, window 0), after the fold that reads that sender's
// packages last. Each parity slot is guarded: a writer waits for its readers'
// acknowledgement of call seq - 2 before overwriting. seq = the KDA call's
// sequence number, the same on every rank. Pieces must hold >= 3 tokens.
// Under zigzag a piece's carry may come from a later rank (rank r + 1 for
// r's part 1): ranks that take turns (serialize_ranks) cannot run it.
#pragma once

#include <cuda_bf16.h>

#include "block_common.h"
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
struct Piece;
struct WaitLabel;

// One weight set shared by every KDA layer (seeded).
struct KdaWeights {
  // Taken from `mem` (Home::weights) and filled when mem.fills_weights(); the
  // projections in `gemm`'s format.
  KdaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem = DeviceMemory::standalone(),
             Format gemm = Format::bf16);
  ProjWeight wbig;   // [4·inner, hidden]: q | k | v | g rows
  ProjWeight wsm;    // [256, hidden]: beta (heads) | f_a (f_rank) | pad
  ProjWeight w_f_b;  // [inner, f_rank]
  ProjWeight w_o;    // [hidden, inner]
  DeviceBuffer<float> conv_taps;      // [3 streams, 4, inner]
  DeviceBuffer<float> dt_bias;        // [inner]
  DeviceBuffer<float> A_log;          // [heads]
  DeviceBuffer<float> gamma_o;        // [head_dim]
  DeviceBuffer<float> gain_in;        // RMSNorm gain [hidden]
};

struct KdaLane {
  int rank = 0, cp = 1;
  std::vector<Segment> segments;  // lane_segments(layout, context, cp): every rank's rows (lengths used)
  int64_t rows = 0;  // b
  Fabric* fabric = nullptr;  // null at cp 1
  Layout layout = Layout::contiguous;  // where the tokens lie (schedule.h)
  Format gemm = Format::bf16;          // the projections' format (precision.h)
};

// The block's buffers and where they live (device_memory.h): the mixer lane
// for what one turn writes and reads, the rank for what crosses turns
// (out_gate and the prepared chunks from the projections to the walk and the
// output, the core's output, the conv carry).
struct KdaBlockBuffers {
  static KdaBlockBuffers take(DeviceMemory& mem, const ModelShape& m, const KdaLane& lane);
  DeviceBuffer<__nv_bfloat16> normed_, small_, out_gate_, forget_, qkv_[3], next_[3], carry_, core_, gated_,
      attn_out_;
  // carry_ [piece][stream][4 rows][inner]; s_in_ [piece][heads, d, d]
  DeviceBuffer<float> partial_, small_partial_, forget_partial_, halo_partial_, o_partial_, s_in_, fold_scratch_;
  DeviceBuffer<unsigned char> conv_scratch_;
  Fp8Act normed_q_, f_a_q_, halo_q_, gated_q_;  // the GEMM inputs' fp8 twins (fp8 projections only)
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
  void publish_halos(Timeline& tl);
  void receive_halos(Timeline& tl, const Blas& blas);
  void conv_piece(int i, size_t piece, Timeline& tl);
  void prepare_piece(size_t piece, Timeline& tl);
  void package_piece(size_t piece, Timeline& tl);
  // The fold of piece `piece` (continuing the previous piece's) into its
  // S_in; null when nothing comes before it.
  const float* fold_piece(size_t piece, Timeline& tl, const Blas& blas);
  // Per rank, the index of this rank's piece whose fold (past the previous
  // piece's) reads that rank's packages last; -1: none, and for this rank
  // (its own packages are read in place, never acknowledged).
  std::vector<int> last_fold_of_rank() const;
  // The KDA slots of a piece (slab_layout.h) this call's parity.
  std::vector<Piece> package_pieces(int piece) const;
  float* s_in(size_t piece) const;
  WaitLabel label(const Timeline& tl, const std::string& what) const;

  ModelShape m_;
  const KdaWeights& w_;
  KdaLane lane_;
  int64_t b_, inner_;
  int64_t seq_ = 0;
  CutSet cuts_;
  std::vector<KdaPiece> pieces_;  // kda_pieces(layout, cp, rank)
  std::vector<RowRange> piece_rows_;  // each piece's local rows
  std::vector<KdaWorkspace> ws_;  // per piece
  KdaWalk forward_walk_ = kda_default_forward_walk();  // the forward's walk; the package takes kKdaPackageWalk
};

}  // namespace pb
