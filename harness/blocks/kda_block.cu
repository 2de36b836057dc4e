#include "kda_block.h"

#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "block_common.h"
#include "check.h"
#include "elementwise.h"
#include "fabric.h"
#include "rmsnorm.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
constexpr int64_t kSmallWidth = 256;  // wsm rows: beta | f_a | pad
const char* const kStreams[3] = {"q", "k", "v"};
// The halo: the upstream rank delivers its last kHaloRows normed rows into the
// first rows of this rank's halo slot; the slot's last row is padding (the
// projection runs at 4 rows) that no peer writes.
constexpr int64_t kHaloRows = 3;

}  // namespace

KdaWeights::KdaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem) {
  PB_CHECK(m.kda_heads + m.f_rank <= kSmallWidth, "KDA: kda_heads + f_rank must fit the 256-wide small projection");
  const WeightFill fill{mem, stream};
  wbig = fill.weight("kda.wbig", 4 * m.kda_inner(), m.hidden, seed + 11);
  wsm = fill.weight("kda.wsm", kSmallWidth, m.hidden, seed + 12);
  w_f_b = fill.weight("kda.w_f_b", m.kda_inner(), m.f_rank, seed + 13);
  w_o = fill.weight("kda.w_o", m.hidden, m.kda_inner(), seed + 14);
  conv_taps = fill.uniform_f32("kda.conv_taps", 3 * 4 * m.kda_inner(), seed + 15, 0.5f);
  dt_bias = fill.uniform_f32("kda.dt_bias", m.kda_inner(), seed + 16, 1.0f);
  A_log = fill.uniform_f32("kda.A_log", m.kda_heads, seed + 17, 0.5f);
  gamma_o = fill.ones_f32("kda.gamma_o", m.kda_head_dim);
  gain_in = fill.ones_f32("kda.gain_in", m.hidden);
}

KdaBlockBuffers KdaBlockBuffers::take(DeviceMemory& mem, const ModelShape& m, const KdaLane& lane) {
  mem.begin_block("kda");
  const int64_t b = lane.rows, t = lane.segments.at(size_t(lane.rank)).len, h = m.hidden, inner = m.kda_inner();
  const int64_t heads = m.kda_heads, d = m.kda_head_dim;
  KdaBlockBuffers k;
  // The projections' turn: normed rows, f32 partials, landed streams, the prepare's inputs.
  k.normed_ = mem.take<bf16>("normed", b * h, Home::mixer);
  k.partial_ = mem.take<float>("partial", b * 4 * inner, Home::mixer);
  k.small_partial_ = mem.take<float>("small_partial", b * kSmallWidth, Home::mixer);
  k.small_ = mem.take<bf16>("beta_f_a", b * (heads + m.f_rank), Home::mixer);  // beta [b, heads] then f_a [b, f_rank]
  k.forget_partial_ = mem.take<float>("forget_partial", b * inner, Home::mixer);
  k.forget_ = mem.take<bf16>("forget", b * inner, Home::mixer);
  for (int i = 0; i < 3; ++i) k.qkv_[i] = mem.take<bf16>(std::string("conv_") + kStreams[i], t * inner, Home::mixer);
  k.halo_partial_ = mem.take<float>("halo_partial", 4 * 3 * inner, Home::mixer);
  k.conv_scratch_ = mem.take<unsigned char>("conv_scratch", int64_t(conv_baseline_scratch_bytes({t, inner, 4 * inner, t})),
                                            Home::mixer);
  // The walk's turn, and the output's.
  k.s_in_ = mem.take<float>("s_in", heads * d * d, Home::mixer);
  k.fold_scratch_ = mem.take<float>("fold_scratch", heads * d * d, Home::mixer);
  k.gated_ = mem.take<bf16>("gated", b * inner, Home::mixer);
  k.o_partial_ = mem.take<float>("o_partial", b * h, Home::mixer);
  k.attn_out_ = mem.take<bf16>("attn_out", b * h, Home::mixer);
  // Across turns: out_gate (projections -> output), the core's output (walk ->
  // output; rows >= T zeroed once), the conv carries (zeros on rank 0) and sinks.
  k.out_gate_ = mem.take<bf16>("out_gate", b * inner, Home::rank);
  k.core_ = mem.take<bf16>("core", b * inner, Home::rank);
  k.carry_ = mem.take<bf16>("carry", 3 * 4 * inner, Home::rank);  // [stream][4 rows][inner]
  for (int i = 0; i < 3; ++i) k.next_[i] = mem.take<bf16>(std::string("next_") + kStreams[i], 3 * inner, Home::rank);
  mem.note("prepared_chunks", int64_t(KdaWorkspace::bytes_for(t, int(heads))));  // kda_prepare -> the walks
  return k;
}

KdaBlock::KdaBlock(const ModelShape& m, const KdaWeights& w, const KdaLane& lane, KdaBlockBuffers buffers)
    : KdaBlockBuffers(std::move(buffers)), m_(m), w_(w), lane_(lane), b_(lane.rows), inner_(m.kda_inner()) {
  PB_CHECK(lane_.cp >= 1 && lane_.rank >= 0 && lane_.rank < lane_.cp && int(lane_.segments.size()) == lane_.cp,
           "KdaBlock: the lane's rank, cp and segments disagree");
  PB_CHECK((lane_.cp == 1) == (lane_.fabric == nullptr), "KdaBlock: a fabric is needed exactly when cp > 1");
  PB_CHECK(m.kda_head_dim == kKdaHeadDim, "KdaBlock: the KDA core needs head_dim 128");
  for (const Segment& s : lane_.segments)
    PB_CHECK(s.len <= b_ && (lane_.cp == 1 || s.len >= 3), "KdaBlock: segments must fit the bucket and hold >= 3 tokens");
  if (lane_.fabric) PB_CHECK(lane_.fabric->layout().hidden == m.hidden && lane_.fabric->layout().kda_heads == m.kda_heads,
                             "KdaBlock: the fabric's slab has no KDA regions for this model (model_slab_layout)");
  PB_CUDA(cudaMemset(carry_.get(), 0, carry_.bytes()));  // rank 0's carry: zeros
  PB_CUDA(cudaMemset(core_.get(), 0, core_.bytes()));    // rows >= T stay zero
  ws_ = KdaWorkspace(live_rows(), int(m.kda_heads));
  // The halo slots' padding row stays zero. Only that row: over IPC the
  // upstream rank may deliver call 0's rows as soon as the fabric is up, before
  // this constructor runs (no collective between them), and clearing them here
  // would erase them after their doorbell has rung.
  if (lane_.fabric) {
    const SlabLayout& L = lane_.fabric->layout();
    const int64_t row_bytes = m.hidden * int64_t(sizeof(bf16)), rows_bytes = kHaloRows * row_bytes;
    for (int p = 0; p < 2; ++p) {
      PB_CHECK(L.halo[p].bytes == rows_bytes + row_bytes,
               "KdaBlock: a halo slot must hold the delivered rows and one padding row (slab_layout_with_kda)");
      char* slot = static_cast<char*>(lane_.fabric->at(lane_.rank, L.halo[p]));
      PB_CUDA(cudaMemset(slot + rows_bytes, 0, size_t(row_bytes)));
    }
  }
  PB_CUDA(cudaDeviceSynchronize());  // the clears ran on the legacy stream, which the block's streams do not wait for
}

KdaBlock::~KdaBlock() = default;

const char* KdaBlock::forward_walk_name() const {
  if (forward_walk_ == KdaWalk::kWgmma) return "wgmma";
  if (forward_walk_ == KdaWalk::kHalves) return "halves";
  return "head";
}

void KdaBlock::run(const bf16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas) {
  project(mixed, seq, cuts, tl, blas);
  recur(tl, blas);
  finish(tl, blas);
}

WaitLabel KdaBlock::label(const Timeline& tl, const std::string& what) const { return {int(tl.layer()), int(seq_), what}; }

void KdaBlock::project(const bf16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas) {
  PB_CHECK(seq >= 0, "KdaBlock: negative sequence number");
  seq_ = seq;
  cuts_ = cuts;
  cudaStream_t s = tl.stream();
  const int64_t h = m_.hidden, heads = m_.kda_heads, wide = 4 * inner_;
  const Variant land_v = land_variant(cuts);
  tl.launch("rmsnorm", "rmsnorm.kda_in",
            [&] { rmsnorm(mixed, w_.gain_in.get(), normed_.get(), {b_, h}, float(m_.rms_eps), s); });
  tl.launch("gemm", "gemm.kda_g", [&] {
    gemm_f32out(blas, normed_.get(), w_.wbig.get() + 3 * inner_ * h, partial_.get() + 3 * inner_,
                {b_, inner_, h, h, h, wide}, s);
  });
  tl.launch("gemm", "gemm.kda_small",
            [&] { gemm_f32out(blas, normed_.get(), w_.wsm.get(), small_partial_.get(), {b_, kSmallWidth, h}, s); });
  bf16* beta = small_.get();
  bf16* f_a = small_.get() + b_ * heads;
  land_band(tl, land_v, "beta", small_partial_.get(), beta, b_, kSmallWidth, 0, heads);
  land_band(tl, land_v, "f_a", small_partial_.get(), f_a, b_, kSmallWidth, heads, m_.f_rank);
  land_band(tl, land_v, "out_gate", partial_.get(), out_gate_.get(), b_, wide, 3 * inner_, inner_);
  tl.launch("gemm", "gemm.kda_f_b",
            [&] { gemm_f32out(blas, f_a, w_.w_f_b.get(), forget_partial_.get(), {b_, inner_, m_.f_rank}, s); });
  halo(tl, blas);
  for (int i = 0; i < 3; ++i) {
    tl.launch("gemm", std::string("gemm.kda_") + kStreams[i], [&] {
      gemm_f32out(blas, normed_.get(), w_.wbig.get() + i * inner_ * h, partial_.get() + i * inner_,
                  {b_, inner_, h, h, h, wide}, s);
    });
    conv_stream(i, tl, blas);
  }
  land_band(tl, land_v, "forget", forget_partial_.get(), forget_.get(), b_, inner_, 0, inner_);
  tl.launch("kda", "kda.prepare", [&] {
    KdaInputs in;
    in.q = qkv_[0].get();
    in.k = qkv_[1].get();
    in.v = qkv_[2].get();
    in.g = forget_.get();
    in.beta_pre = beta;
    in.q_ld = in.k_ld = in.v_ld = in.g_ld = inner_;
    in.beta_ld = heads;
    in.A_log = w_.A_log.get();
    in.dt_bias = w_.dt_bias.get();
    kda_prepare(in, live_rows(), int(heads), ws_, s);
  });
}

// Rank r sends its last 3 normed rows downstream; rank r > 0 projects the
// ones it received through the q/k/v bands into its conv carries.
void KdaBlock::halo(Timeline& tl, const Blas& blas) {
  if (lane_.cp == 1) return;
  cudaStream_t s = tl.stream();
  const int me = lane_.rank, cp = lane_.cp, par = kda_parity(seq_);
  const int64_t h = m_.hidden, t = live_rows();
  const SlabLayout& L = lane_.fabric->layout();
  if (me < cp - 1) {
    tl.launch("fabric", "fabric.wait_halo_free", [&] {
      lane_.fabric->await_free(me + 1, Bell::halo_read, doorbell_value_done(seq_, 2), tl,
                               label(tl, "rank " + std::to_string(me + 1) + " to free its halo slot"));
    });
    tl.launch("fabric", "fabric.publish_halo", [&] {
      lane_.fabric->deliver(me + 1, Bell::halo, doorbell_value(seq_, 0),
                            {{normed_.get() + (t - kHaloRows) * h, L.halo[par], kHaloRows * h * 2}}, tl,
                            label(tl, "the halo rows for rank " + std::to_string(me + 1)));
    });
  }
  if (me > 0) {
    const bf16* rows = nullptr;  // 4 rows: the upstream rank's last kHaloRows, then the zero padding row
    tl.launch("fabric", "fabric.wait_halo", [&] {
      rows = static_cast<const bf16*>(lane_.fabric->fetch(me - 1, Bell::halo, doorbell_value(seq_, 0),
                                                          {{L.halo[par], kHaloRows * h * 2}}, tl,
                                                          label(tl, "the halo rows of rank " + std::to_string(me - 1)))[0]);
    });
    tl.launch("gemm", "gemm.halo_qkv", [&] {
      gemm_f32out(blas, rows, w_.wbig.get(), halo_partial_.get(), {4, 3 * inner_, h}, s);
    });
    for (int i = 0; i < 3; ++i)
      land_band(tl, land_variant(cuts_), std::string("halo_") + kStreams[i], halo_partial_.get(),
                carry_.get() + i * 4 * inner_, 4, 3 * inner_, i * inner_, inner_);
    tl.launch("fabric", "fabric.release_halo",
              [&] { lane_.fabric->release(me - 1, Bell::halo_read, doorbell_value(seq_, 0), tl); });
  }
}

// Cut 2: one fused launch, or the retired path launch by launch.
void KdaBlock::conv_stream(int i, Timeline& tl, const Blas&) {
  cudaStream_t s = tl.stream();
  const int64_t t = live_rows();
  const ConvShape shape{t, inner_, 4 * inner_, t};
  const float* p = partial_.get() + i * inner_;
  const float* taps = w_.conv_taps.get() + i * 4 * inner_;
  const bf16* carry = carry_.get() + i * 4 * inner_;
  const std::string stream = kStreams[i];
  if (cuts_[Cut::conv]) {
    tl.launch("conv", "conv.chunk_" + stream,
              [&] { conv_silu_chunk_cut(p, taps, carry, qkv_[i].get(), next_[i].get(), shape, s); });
    return;
  }
  const ConvStep step = [&](const char* name, const std::function<void()>& work) {
    const std::string n = name;
    const bool per_stream = n == "land" || n == "decode";
    tl.launch("conv", "conv." + n + (per_stream ? "_" + stream : ""), work);
  };
  conv_silu_chunk_baseline(p, taps, carry, qkv_[i].get(), next_[i].get(), shape,
                           conv_baseline_scratch_from(conv_scratch_.get(), shape), land_variant(cuts_), s, &step);
}

void KdaBlock::recur(Timeline& tl, const Blas& blas) {
  cudaStream_t s = tl.stream();
  const int me = lane_.rank, cp = lane_.cp, par = kda_parity(seq_);
  const int heads = int(m_.kda_heads);
  if (me < cp - 1) {
    const SlabLayout& L = lane_.fabric->layout();
    tl.launch("fabric", "fabric.wait_state_free", [&] {
      for (int r = me + 1; r < cp; ++r)
        lane_.fabric->await_free(r, Bell::state_read, doorbell_value_done(seq_, 2), tl,
                                 label(tl, "rank " + std::to_string(r) + " to fold this rank's package"));
    });
    tl.launch("kda", "kda.package", [&] {
      kda_package(ws_, live_rows(), static_cast<float*>(lane_.fabric->at(me, L.M[par])),
                  static_cast<float*>(lane_.fabric->at(me, L.D[par])), s, kKdaPackageWalk);
    });
    tl.launch("fabric", "fabric.publish_state", [&] {
      for (int r = me + 1; r < cp; ++r)
        lane_.fabric->publish(r, Bell::state, doorbell_value(seq_, 0), {{L.M[par], L.M[par].bytes}, {L.D[par], L.D[par].bytes}},
                              tl, label(tl, "this rank's package for rank " + std::to_string(r)));
    });
  }
  if (me > 0) {
    const SlabLayout& L = lane_.fabric->layout();
    std::vector<const float*> M(me), D(me);
    tl.launch("fabric", "fabric.wait_state", [&] {
      for (int j = 0; j < me; ++j) {
        const std::vector<const void*> at =
            lane_.fabric->fetch(j, Bell::state, doorbell_value(seq_, 0), {{L.M[par], L.M[par].bytes}, {L.D[par], L.D[par].bytes}},
                                tl, label(tl, "the state package of rank " + std::to_string(j)));
        M[j] = static_cast<const float*>(at[0]);
        D[j] = static_cast<const float*>(at[1]);
      }
    });
    tl.launch("kda", "kda.fold",
              [&] { kda_fold(blas, M.data(), D.data(), me, heads, s_in_.get(), fold_scratch_.get(), s); });
    tl.launch("fabric", "fabric.release_state", [&] {
      for (int j = 0; j < me; ++j) lane_.fabric->release(j, Bell::state_read, doorbell_value(seq_, 0), tl);
    });
  }
  tl.launch("kda", "kda.forward", [&] {
    kda_forward_state(ws_, live_rows(), me > 0 ? s_in_.get() : nullptr, core_.get(), inner_, nullptr, s,
                      forward_walk_);
  });
}

void KdaBlock::finish(Timeline& tl, const Blas& blas) {
  cudaStream_t s = tl.stream();
  tl.launch("elementwise", "o_norm_gate", [&] {
    o_norm_gate(elementwise_variant(cuts_), core_.get(), out_gate_.get(), w_.gamma_o.get(), gated_.get(),
                b_ * m_.kda_heads, float(m_.rms_eps), s);
  });
  gemm_land(tl, blas, land_variant(cuts_), "kda_o", gated_.get(), w_.w_o.get(), o_partial_.get(), attn_out_.get(), b_,
            m_.hidden, inner_);
}

}  // namespace pb
