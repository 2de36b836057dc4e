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


}  // namespace

KdaWeights::KdaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream)
    : wbig(synthetic_weight(4 * m.kda_inner(), m.hidden, seed + 11, stream)),
      wsm(synthetic_weight(kSmallWidth, m.hidden, seed + 12, stream)),
      w_f_b(synthetic_weight(m.kda_inner(), m.f_rank, seed + 13, stream)),
      w_o(synthetic_weight(m.hidden, m.kda_inner(), seed + 14, stream)),
      conv_taps(synthetic_f32(3 * 4 * m.kda_inner(), seed + 15, 0.5f, stream)),
      dt_bias(synthetic_f32(m.kda_inner(), seed + 16, 1.0f, stream)),
      A_log(synthetic_f32(m.kda_heads, seed + 17, 0.5f, stream)),
      gamma_o(ones_f32(m.kda_head_dim, stream)),
      gain_in(ones_f32(m.hidden, stream)) {
  PB_CHECK(m.kda_heads + m.f_rank <= kSmallWidth, "KDA: kda_heads + f_rank must fit the 256-wide small projection");
}

KdaBlock::KdaBlock(const ModelShape& m, const KdaWeights& w, const KdaLane& lane)
    : m_(m), w_(w), lane_(lane), b_(lane.rows), inner_(m.kda_inner()) {
  PB_CHECK(lane_.cp >= 1 && lane_.rank >= 0 && lane_.rank < lane_.cp && int(lane_.segments.size()) == lane_.cp,
           "KdaBlock: the lane's rank, cp and segments disagree");
  PB_CHECK((lane_.cp == 1) == (lane_.fabric == nullptr), "KdaBlock: a fabric is needed exactly when cp > 1");
  PB_CHECK(m.kda_head_dim == kKdaHeadDim, "KdaBlock: the KDA core needs head_dim 128");
  for (const Segment& s : lane_.segments)
    PB_CHECK(s.len <= b_ && (lane_.cp == 1 || s.len >= 3), "KdaBlock: segments must fit the bucket and hold >= 3 tokens");
  if (lane_.fabric) PB_CHECK(lane_.fabric->layout().hidden == m.hidden && lane_.fabric->layout().kda_heads == m.kda_heads,
                             "KdaBlock: the fabric's slab has no KDA regions for this model (model_slab_layout)");
  const int64_t t = live_rows(), h = m.hidden, heads = m.kda_heads, d = m.kda_head_dim;
  normed_ = DeviceBuffer<bf16>(size_t(b_ * h));
  partial_ = DeviceBuffer<float>(size_t(b_ * 4 * inner_));
  small_partial_ = DeviceBuffer<float>(size_t(b_ * kSmallWidth));
  small_ = DeviceBuffer<bf16>(size_t(b_ * (heads + m.f_rank)));  // beta [b, heads] then f_a [b, f_rank]
  out_gate_ = DeviceBuffer<bf16>(size_t(b_ * inner_));
  forget_partial_ = DeviceBuffer<float>(size_t(b_ * inner_));
  forget_ = DeviceBuffer<bf16>(size_t(b_ * inner_));
  for (int i = 0; i < 3; ++i) {
    qkv_[i] = DeviceBuffer<bf16>(size_t(t * inner_));
    next_[i] = DeviceBuffer<bf16>(size_t(3 * inner_));
  }
  carry_ = DeviceBuffer<bf16>(size_t(3 * 4 * inner_));  // [stream][4 rows][inner]; zeros on rank 0
  PB_CUDA(cudaMemset(carry_.get(), 0, carry_.bytes()));
  halo_partial_ = DeviceBuffer<float>(size_t(4 * 3 * inner_));
  core_ = DeviceBuffer<bf16>(size_t(b_ * inner_));
  PB_CUDA(cudaMemset(core_.get(), 0, core_.bytes()));  // rows >= T stay zero
  gated_ = DeviceBuffer<bf16>(size_t(b_ * inner_));
  o_partial_ = DeviceBuffer<float>(size_t(b_ * h));
  attn_out_ = DeviceBuffer<bf16>(size_t(b_ * h));
  s_in_ = DeviceBuffer<float>(size_t(heads * d * d));
  fold_scratch_ = DeviceBuffer<float>(size_t(heads * d * d));
  conv_scratch_ = DeviceBuffer<unsigned char>(conv_baseline_scratch_bytes({t, inner_, 4 * inner_, t}));
  ws_ = KdaWorkspace(t, int(heads));
  if (lane_.fabric) {  // the halo rows' unused fourth row stays zero
    const SlabLayout& L = lane_.fabric->layout();
    for (int p = 0; p < 2; ++p) PB_CUDA(cudaMemset(lane_.fabric->at(lane_.rank, L.halo[p]), 0, L.halo[p].bytes));
  }
}

KdaBlock::~KdaBlock() = default;

void KdaBlock::run(const bf16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas) {
  project(mixed, seq, cuts, tl, blas);
  recur(tl, blas);
  finish(tl, blas);
}

void KdaBlock::wait(int sender, Bell kind, uint64_t value, const std::string& what, Timeline& tl) {
  lane_.fabric->wait(doorbell_index(lane_.cp, sender, kind), value, tl.stream(), {int(tl.layer()), int(seq_), what});
}

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
      wait(me + 1, Bell::halo_read, doorbell_value_done(seq_, 2), "rank " + std::to_string(me + 1) + " to free its halo slot", tl);
    });
    tl.launch("fabric", "fabric.publish_halo", [&] {
      lane_.fabric->copy_to_peer(me + 1, L.halo[par].offset, normed_.get() + (t - 3) * h, 3 * h * 2, s);
      lane_.fabric->ring(me + 1, doorbell_index(cp, me, Bell::halo), doorbell_value(seq_, 0), s);
    });
  }
  if (me > 0) {
    tl.launch("fabric", "fabric.wait_halo",
              [&] { wait(me - 1, Bell::halo, doorbell_value(seq_, 0), "the halo rows of rank " + std::to_string(me - 1), tl); });
    const bf16* rows = static_cast<const bf16*>(lane_.fabric->at(me, L.halo[par]));
    tl.launch("gemm", "gemm.halo_qkv", [&] {
      gemm_f32out(blas, rows, w_.wbig.get(), halo_partial_.get(), {4, 3 * inner_, h}, s);
    });
    for (int i = 0; i < 3; ++i)
      land_band(tl, land_variant(cuts_), std::string("halo_") + kStreams[i], halo_partial_.get(),
                carry_.get() + i * 4 * inner_, 4, 3 * inner_, i * inner_, inner_);
    tl.launch("fabric", "fabric.release_halo", [&] {
      lane_.fabric->ring(me - 1, doorbell_index(cp, me, Bell::halo_read), doorbell_value(seq_, 0), s);
    });
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
        wait(r, Bell::state_read, doorbell_value_done(seq_, 2), "rank " + std::to_string(r) + " to fold this rank's package", tl);
    });
    tl.launch("kda", "kda.package", [&] {
      kda_package(ws_, live_rows(), static_cast<float*>(lane_.fabric->at(me, L.M[par])),
                  static_cast<float*>(lane_.fabric->at(me, L.D[par])), s, kKdaPackageWalk);
    });
    tl.launch("fabric", "fabric.publish_state", [&] {
      for (int r = me + 1; r < cp; ++r)
        lane_.fabric->ring(r, doorbell_index(cp, me, Bell::state), doorbell_value(seq_, 0), s);
    });
  }
  if (me > 0) {
    const SlabLayout& L = lane_.fabric->layout();
    tl.launch("fabric", "fabric.wait_state", [&] {
      for (int j = 0; j < me; ++j)
        wait(j, Bell::state, doorbell_value(seq_, 0), "the state package of rank " + std::to_string(j), tl);
    });
    std::vector<const float*> M(me), D(me);
    for (int j = 0; j < me; ++j) {
      M[j] = static_cast<const float*>(lane_.fabric->at(j, L.M[par]));
      D[j] = static_cast<const float*>(lane_.fabric->at(j, L.D[par]));
      if (j != me) lane_.fabric->note_peer_read(2 * L.M[par].bytes);
    }
    tl.launch("kda", "kda.fold",
              [&] { kda_fold(blas, M.data(), D.data(), me, heads, s_in_.get(), fold_scratch_.get(), s); });
    tl.launch("fabric", "fabric.release_state", [&] {
      for (int j = 0; j < me; ++j)
        lane_.fabric->ring(j, doorbell_index(cp, me, Bell::state_read), doorbell_value(seq_, 0), s);
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
