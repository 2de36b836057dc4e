// The MLA mixer of one rank (docs/design.md §2.1 "MLA mixer", §3 "MLA attention
// across ranks"), launch by launch in plan.cpp's order and names:
//
//   rmsnorm.mla_in  gemm.wfu  land.q_a  rmsnorm.q_a
//   [fabric.wait_released]  land.kv_a  land.mla_gate  rmsnorm.kv_latent
//   gemm.q_b  land.q_b  [fabric.publish_window]
//   per schedule step:    window: [fabric.wait_window  gemm.kv_b  mla.expand_k]
//                                 (the keys, before their first window)
//                                 [fabric.wait_queries  fabric.stage_queries]  fmha.*
//                                 [fabric.publish_return]
//                                 (stage_queries: unless helped_in_place)
//                         merge:  [fabric.wait_return]  lse_merge  [fabric.release_return]
//   [fabric.release_window]  o_finalize  mul_sigmoid  gemm.mla_o  land.mla_o
//
// With fp8 projections (precision.gemm: fp8, docs/design.md §12) each GEMM's
// input is quantized first (quant.mla_in, quant.q_a, quant.mla_o after
// mul_sigmoid); under cut quant_fuse the producers write it (rmsnorm_fp8,
// mul_sigmoid_fp8).
//
// Under cut 8 (overlap), launch for launch the same work on the same inputs,
// in another order: land.mla_gate (the gate is this rank's own buffer) moves
// before fabric.wait_released, and the attention's steps run in
// schedule.h's overlap_order: the own causal window first (its keys
// expanded first; held in o_held_/lse_held_ when merges come before its own),
// then the helped windows, then the rest. The merges keep the schedule's
// order, so each accumulator row gets the same merges in the same order and
// the outputs are bit for bit those without the cut. Over NCCL the receives
// are posted in the schedule's order either way.
//
// The window is written in place: land.kv_a lands [kv latent | rope] into the
// slab's kv region (rmsnorm.kv_latent then normalizes the latent half in
// place) and land.q_b lands the queries into its q region, so peers read both
// where they lie. At cp 1 the same regions are local buffers.
//
// Doorbells (fabric.h; values (seq + 1)·4096 + window, GEQ), seq = the call's
// sequence number, the same on every rank:
//   window   k -> each reader of k's window, (seq, 0), after land.q_b
//   released reader -> k, (seq, 0), after its last read of k's window;
//            k waits for all its readers at (seq - 1) before land.kv_a.
//            Readers and windows read are taken over every schedule of the
//            contiguous protocol (schedule.h protocol_schedules, *_any:
//            prefix, stripe, balance), so consecutive calls may switch cuts 3 and 7;
//            under layout zigzag, those of the zigzag schedule alone.
//   returned helper -> owner, (seq, slot), after the helped FMHA wrote the slot
//   consumed owner -> helper, (seq, 0), after merging that slot, and at the
//            end of a call for every helper of the protocol whose slot it did
//            not merge (schedule.h unmerged_helpers); return slabs alternate
//            by seq parity, so a helper waits for (seq - 2) first
// Helped windows are the stripe's (cut 3) and, under balance (cut 7, even
// cp), the moved half: rank o - 1 runs rows [t/2, t) of odd rank o's queries
// over its own keys into o's balance slot, and o merges its kept pair
// (o, o - 1) as two row ranges (schedule.h). Merge order is the schedule's;
// cut 4 switches lse_merge, cut 5 mul_sigmoid, cut 1 every land, cuts 3 and 7
// the schedule (attention_schedule).
//
// Layout zigzag (MlaLane::layout, schedule.h): a rank's rows are its two
// chunks in token order, so its own window is one causal window; it runs
// every window itself (nothing helped, no return slots) and expands of a
// peer's keys only the rows its windows read (key_parts: chunk k alone for
// k < rank), which are all that peer publishes to it.
#pragma once

#include <cuda_bf16.h>

#include <memory>
#include <vector>

#include "block_common.h"
#include "cuts.h"
#include "device_buffer.h"
#include "device_memory.h"
#include "fmha.h"
#include "gemm.h"
#include "model.h"
#include "schedule.h"
#include "slab_layout.h"
#include "timeline.h"
#include "variant.h"

namespace pb {

class Fabric;
struct Piece;
struct WaitLabel;

// One weight set, shared by every MLA layer (seeded uniform, scaled by
// sqrt(3 / fan_in) so that activations stay O(1)).
struct MlaWeights {
  // Taken from `mem` (Home::weights) and filled when mem.fills_weights(); the
  // projections in `gemm`'s format, the kv_b expansion bf16 always.
  MlaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem = DeviceMemory::standalone(),
             Format gemm = Format::bf16);
  ProjWeight wfu;                      // [q_lora + kv_lora + rope + heads·v, hidden]
  ProjWeight w_q_b;                    // [heads·(nope + rope), q_lora]
  DeviceBuffer<__nv_bfloat16> w_kv_b;  // [heads·(nope + v), kv_lora]
  ProjWeight w_o;                      // [hidden, heads·v]
  DeviceBuffer<float> gain_in, gain_q_a, gain_kv;  // RMSNorm gains
};

// Who this rank is in the CP lane. fabric is null at cp 1.
struct MlaLane {
  int rank = 0, cp = 1;
  std::vector<Segment> segments;  // lane_segments(layout, context, cp): every rank's rows (lengths used)
  int64_t rows = 0;               // b: the bucket's rows (>= every segment)
  Fabric* fabric = nullptr;
  // Helped windows (cut 3) read the owner's queries and write its return slot
  // in the owner's slab in place, instead of staging them through this rank's
  // memory inside the fabric spans (scenario key helped_in_place; docs/lane.md
  // measures both on one shared GPU). Owners over NCCL are always staged:
  // their queries arrive in this rank's slab.
  bool helped_in_place = false;
  Layout layout = Layout::contiguous;  // where the tokens lie (schedule.h)
  // Calls may run with cut 8 (overlap) on: the block takes the held window's
  // buffers (schedule.h overlap_order), [t, heads·v] bf16 and [heads, t] f32.
  bool overlap = false;
  Format gemm = Format::bf16;  // the projections' format (precision.h)
};

// The block's buffers and where they live (device_memory.h): the mixer lane for
// what one turn writes and reads, the rank for what crosses turns (the gate,
// projections -> output; the attention, whose rows >= T are zeroed once; the
// window at cp 1, projections -> attention).
struct MlaBlockBuffers {
  static MlaBlockBuffers take(DeviceMemory& mem, const ModelShape& m, const MlaLane& lane);
  DeviceBuffer<__nv_bfloat16> normed_, q_a_, q_norm_, gate_, attn_, gated_, attn_out_, o_win_;
  DeviceBuffer<float> partial_, lse_win_, o_acc_, lse_acc_;
  DeviceBuffer<__nv_bfloat16> local_kv_, local_q_;  // the window at cp 1
  DeviceBuffer<__nv_bfloat16> staged_q_;            // a helped window's queries (cp > 1, staged)
  DeviceBuffer<__nv_bfloat16> o_held_;              // the held window's o (lane.overlap)
  DeviceBuffer<float> lse_held_;                    // and its lse
  // Expanded keys: [0] the own segment's, [1] the foreign segment of the
  // current window (reused: windows run in stream order).
  DeviceBuffer<__nv_bfloat16> keys_[2], kvb_[2];
  Fp8Act normed_q_, q_norm_q_, gated_q_;  // the GEMM inputs' fp8 twins (fp8 projections only)
};

class MlaBlock : private MlaBlockBuffers {
 public:
  MlaBlock(const ModelShape& m, const MlaWeights& w, const MlaLane& lane, FmhaEngine engine, MlaBlockBuffers buffers);
  MlaBlock(const ModelShape& m, const MlaWeights& w, const MlaLane& lane, FmhaEngine engine)
      : MlaBlock(m, w, lane, engine, take(DeviceMemory::standalone(), m, lane)) {}
  ~MlaBlock();

  // mixed [b, hidden] bf16 -> attn_out() [b, hidden] bf16. Rows >= T of
  // the attention output are zero, so every row of attn_out is defined.
  void run(const __nv_bfloat16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas);
  // run() in three phases, for ranks of one GPU that take turns (scenario
  // key serialize_ranks): projections up to the published window; the key
  // expansions, FMHA windows, merges and o_finalize; the gate to attn_out. Taking turns
  // phase by phase in rank order never deadlocks: a rank's attention needs
  // only windows published in the first phase and returns from lower ranks.
  void project(const __nv_bfloat16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas);
  void attend(Timeline& tl, const Blas& blas);
  void finish(Timeline& tl, const Blas& blas);
  const __nv_bfloat16* attn_out() const { return attn_out_.get(); }
  // The pre-o_proj attention [b, heads·v] (after o_finalize), for tests.
  const __nv_bfloat16* attention() const { return attn_.get(); }
  int64_t live_rows() const { return lane_.segments[lane_.rank].len; }

 private:
  struct Window {  // [kv latent normed | rope] and the queries of one rank
    __nv_bfloat16* kv = nullptr;  // [seg, kv_lora + rope]
    __nv_bfloat16* q = nullptr;   // [seg, heads, nope + rope]
  };
  Window own_window() const;
  // The fabric's pieces (fabric.h): the rows `parts` of rank k's keys (parts
  // from part 0: a prefix of its kv region), rank q's queries, a return slot of this call.
  Piece keys_piece(int k, Parts parts) const;
  Piece queries_piece(int q) const;
  // `rows` rows of return slot `slot` of this call's return slab.
  std::vector<Piece> return_pieces(int slot, int64_t rows) const;
  std::vector<int64_t> rows_of_ranks() const;  // every rank's segment length
  std::vector<Piece> window_pieces_for(int reader) const;
  WaitLabel label(const Timeline& tl, const std::string& what) const;
  void expect_arrivals(const RankAttention& a, Timeline& tl);
  void expand_keys(int k, Timeline& tl, const Blas& blas);
  void run_window(const FmhaWindow& w, Timeline& tl);
  void merge(const MergeStep& step, Variant v, Timeline& tl);

  ModelShape m_;
  const MlaWeights& w_;
  int64_t seq_ = 0;                      // this call's sequence number
  CutSet cuts_;                          // this call's cut switches
  Schedule sched_ = Schedule::prefix;    // this call's schedule (cuts 3 and 7, the layout)
  RankAttention attention_;              // this call's steps on this rank
  MlaLane lane_;
  FmhaEngine engine_;
  int64_t b_;
  std::vector<int> expanded_;  // [k]: the keys_ buffer holding segment k this call, -1 when not expanded yet
};

}  // namespace pb
