#include "superstep.h"

#include <cuda_runtime.h>

#include "attnres.h"
#include "block_common.h"
#include "check.h"
#include "elementwise.h"
#include "embed.h"
#include "ref_math.h"
#include "schedule.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
constexpr float kAttnResEps = 1e-5f;
constexpr int kSnapBlocks = kAttnResMaxBlocks;

// Synthetic token ids: a hash of (seed, global position), the same on every rank.
std::vector<int32_t> token_ids(uint64_t seed, const Segment& seg, int64_t rows, int64_t vocab) {
  std::vector<int32_t> ids(size_t(rows), 0);
  for (int64_t r = 0; r < seg.len; ++r) {
    uint64_t z = (seed + 0x9e3779b97f4a7c15ull) ^ uint64_t(seg.begin + r) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
    ids[size_t(r)] = int32_t((z ^ (z >> 29)) % uint64_t(vocab));
  }
  return ids;
}

bool any_layer(const ModelShape& m, bool (*pred)(const ModelShape&, int64_t)) {
  for (int64_t l = 0; l < m.layers; ++l)
    if (pred(m, l)) return true;
  return false;
}

}  // namespace

Superstep::Superstep(const Scenario& s, int rank, IpcFabric* fabric, const Blas& blas, cudaStream_t stream)
    : s_(s), m_(s.model), rank_(rank), cp_(s.cp), b_(s.bucket), blas_(blas),
      fmha_(fmha_engine_from_name(s.fmha)), moe_engine_(moe_gemm_engine_from_name(s.moe_gemm.c_str())) {
  const std::vector<Segment> segs = contiguous_segments(s.context, cp_);
  t_ = segs[rank_].len;
  const int64_t h = m_.hidden;
  const uint64_t seed = s.seed;
  embed_table_ = DeviceBuffer<bf16>(size_t(m_.vocab * h));
  fill_uniform_bf16(embed_table_.get(), m_.vocab * h, seed + 1, 1.0f, stream);
  sw_ = synthetic_f32((2 * m_.layers + 1) * h, seed + 2, 0.02f, stream);
  if (any_layer(m_, [](const ModelShape& m, int64_t l) { return m.is_mla(l); })) {
    mla_w_ = std::make_unique<MlaWeights>(m_, seed + 10, stream);
    mla_ = std::make_unique<MlaBlock>(m_, *mla_w_, MlaLane{rank_, cp_, segs, b_, fabric}, fmha_);
  }
  if (any_layer(m_, [](const ModelShape& m, int64_t l) { return !m.is_mla(l); })) {
    kda_w_ = std::make_unique<KdaWeights>(m_, seed + 20, stream);
    kda_ = std::make_unique<KdaBlock>(m_, *kda_w_, KdaLane{rank_, cp_, segs, b_, fabric});
  }
  if (any_layer(m_, [](const ModelShape& m, int64_t l) { return !m.is_dense_ffn(l); }))
    moe_ = std::make_unique<MoeBlock>(m_, b_, t_, seed + 30, stream);
  if (any_layer(m_, [](const ModelShape& m, int64_t l) { return m.is_dense_ffn(l); }))
    dense_ = std::make_unique<DenseFfn>(m_, b_, seed + 40, stream);
  if (rank_ == cp_ - 1) first_ = std::make_unique<FirstToken>(m_, seed + 50, stream);
  ids_ = DeviceBuffer<int32_t>(size_t(b_));
  ids_.upload(token_ids(seed, segs[rank_], b_, m_.vocab));
  hidden_ = DeviceBuffer<bf16>(size_t(b_ * h));
  mixed_ = DeviceBuffer<bf16>(size_t(b_ * h));
  prefix2_ = DeviceBuffer<bf16>(size_t(b_ * h));
  ffn_out_ = DeviceBuffer<bf16>(size_t(b_ * h));
  snap_ = DeviceBuffer<bf16>(size_t(b_ * kSnapBlocks * h));
  PB_CUDA(cudaMemsetAsync(snap_.get(), 0, snap_.bytes(), stream));
  last_mixed_ = DeviceBuffer<bf16>(size_t(h));
  scores_ = DeviceBuffer<float>(size_t(b_ * (kSnapBlocks + 1)));
  checksums_ = DeviceBuffer<unsigned long long>(size_t(m_.layers));
  PB_CUDA(cudaStreamSynchronize(stream));
}

Superstep::~Superstep() = default;

void Superstep::attnres_call(const CutSet& cuts, Timeline& tl, int64_t rows, int nb, const bf16* snap,
                             const bf16* partial, const float* sw, bf16* out) {
  cudaStream_t st = tl.stream();
  const AttnResShape shape{rows, m_.hidden, nb, kSnapBlocks};
  if (cuts[Cut::attnres]) {
    tl.launch("attnres", "attnres.fused",
              [&] { attnres(Variant::cut, snap, partial, sw, scores_.get(), out, shape, kAttnResEps, st); });
    return;
  }
  const AttnResStep step = [&](const char* name, const std::function<void()>& work) {
    tl.launch("attnres", std::string("attnres.") + name, work);
  };
  attnres_baseline(snap, partial, sw, scores_.get(), out, shape, kAttnResEps, st, &step);
}

void Superstep::add2_call(const CutSet& cuts, Timeline& tl, const bf16* a, const bf16* b, bf16* out) {
  cudaStream_t st = tl.stream();
  tl.launch("elementwise", "add2", [&] { add2(elementwise_variant(cuts), a, b, out, b_ * m_.hidden, st); });
}

void Superstep::run(const CutSet& cuts, Timeline& tl, const Turn& turn, bool checksums) {
  cudaStream_t st = tl.stream();
  const int64_t h = m_.hidden;
  tl.set_layer(-1);
  turn([&] { tl.launch("embed", "embed.gather", [&] { embed_gather(embed_table_.get(), ids_.get(), hidden_.get(), b_, h, st); }); });
  for (int64_t layer = 0; layer < m_.layers; ++layer) {
    tl.set_layer(int32_t(layer));
    const bool mla = m_.is_mla(layer), snapshot = m_.is_snapshot_layer(layer);
    const float* sw_attn = sw_.get() + 2 * layer * h;
    const float* sw_mlp = sw_attn + h;
    turn([&] {
      const bf16* mixer_in = hidden_.get();
      if (layer > 0) {
        attnres_call(cuts, tl, b_, int(m_.nb_in(layer)), snap_.get(), hidden_.get(), sw_attn, mixed_.get());
        mixer_in = mixed_.get();
      }
      if (snapshot)
        tl.launch("attnres", "attnres.snapshot", [&] {
          const int64_t block = layer / m_.attnres_period;
          PB_CUDA(cudaMemcpy2DAsync(snap_.get() + block * h, size_t(kSnapBlocks * h) * 2, hidden_.get(), size_t(h) * 2,
                                    size_t(h) * 2, size_t(b_), cudaMemcpyDeviceToDevice, st));
        });
      if (mla) mla_->project(mixer_in, mla_seq_, cuts, tl, blas_);
      else kda_->project(mixer_in, kda_seq_, cuts, tl, blas_);
    });
    turn([&] {
      if (mla) mla_->attend(tl, blas_);
      else kda_->recur(tl, blas_);
    });
    turn([&] {
      if (mla) mla_->finish(tl, blas_);
      else kda_->finish(tl, blas_);
      const bf16* attn_out = mla ? mla_->attn_out() : kda_->attn_out();
      const bf16* prefix2 = attn_out;  // snapshot layers restart the partial sum
      if (!snapshot) {
        add2_call(cuts, tl, hidden_.get(), attn_out, prefix2_.get());
        prefix2 = prefix2_.get();
      }
      attnres_call(cuts, tl, b_, int(m_.nb_mlp(layer)), snap_.get(), prefix2, sw_mlp, mixed_.get());
      if (m_.is_dense_ffn(layer)) dense_->run(tl, blas_, cuts, mixed_.get(), ffn_out_.get());
      else moe_->run(tl, blas_, cuts, moe_engine_, mixed_.get(), t_, ffn_out_.get());
      add2_call(cuts, tl, prefix2, ffn_out_.get(), hidden_.get());
      if (checksums) checksum_bf16(hidden_.get(), t_ * h, checksums_.get() + layer, st);
    });
    if (mla) ++mla_seq_;
    else ++kda_seq_;
  }
  tl.set_layer(-1);
  turn([&] {
    if (!first_) return;
    const int64_t last = t_ - 1;
    attnres_call(cuts, tl, 1, int(m_.nb_final()), snap_.get() + last * kSnapBlocks * h, hidden_.get() + last * h,
                 sw_.get() + 2 * m_.layers * h, last_mixed_.get());
    first_->run(tl, blas_, cuts, last_mixed_.get());
  });
  have_first_token_ = first_ != nullptr;
}

int64_t Superstep::first_token() const { return have_first_token_ ? first_->token() : -1; }

std::vector<uint64_t> Superstep::layer_checksums() const { return checksums_.download<uint64_t>(); }

namespace {
std::vector<float> widen(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = ref::bf16_to_f32(bits[i]);
  return out;
}
}  // namespace

std::vector<float> Superstep::hidden_samples(int rows, int cols) const {
  PB_CHECK(rows >= 1 && cols >= 1 && cols <= m_.hidden, "hidden_samples: rows >= 1 and 1 <= cols <= hidden");
  std::vector<uint16_t> bits(size_t(rows) * size_t(cols));
  for (int i = 0; i < rows; ++i) {
    const int64_t r = rows == 1 ? 0 : int64_t(i) * (t_ - 1) / (rows - 1);
    PB_CUDA(cudaMemcpy(bits.data() + size_t(i) * size_t(cols), hidden_.get() + r * m_.hidden, size_t(cols) * 2,
                       cudaMemcpyDeviceToHost));
  }
  return widen(bits);
}

std::vector<float> Superstep::last_logits() const {
  if (!have_first_token_) return {};
  std::vector<uint16_t> bits(size_t(m_.vocab));
  PB_CUDA(cudaMemcpy(bits.data(), first_->logits(), bits.size() * 2, cudaMemcpyDeviceToHost));
  return widen(bits);
}

}  // namespace pb
