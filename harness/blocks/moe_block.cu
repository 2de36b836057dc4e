#include "moe_block.h"

#include <algorithm>

#include "block_common.h"
#include "check.h"
#include "elementwise.h"
#include "rmsnorm.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

// Per-tensor seeds: the block's seed plus a fixed tag, so tensors differ.
uint64_t tensor_seed(uint64_t seed, uint64_t tag) { return seed * 1000003ull + tag; }

MoeRouteShape route_shape(const ModelShape& m, int64_t tokens) {
  return MoeRouteShape{tokens, int(m.experts), int(m.top_k)};
}

}  // namespace

MoeWeights make_moe_weights(const ModelShape& m, uint64_t seed, cudaStream_t stream) {
  const int64_t h = m.hidden, E = m.experts, lat = m.moe_latent, I = m.expert_inter, S = m.shared_inter;
  MoeWeights w;
  w.router = synthetic_weight(E, h, tensor_seed(seed, 1), stream);
  w.lat_down = synthetic_weight(lat, h, tensor_seed(seed, 2), stream);
  w.expert_gate_up = synthetic_weight(E * 2 * I, lat, tensor_seed(seed, 3), stream);
  w.expert_down = synthetic_weight(E * lat, I, tensor_seed(seed, 4), stream);
  w.lat_up = synthetic_weight(h, lat, tensor_seed(seed, 5), stream);
  w.shared_gate_up = synthetic_weight(2 * S, h, tensor_seed(seed, 6), stream);
  w.shared_down = synthetic_weight(h, S, tensor_seed(seed, 7), stream);
  const std::vector<float> bias = synthetic_router_bias(int(E), tensor_seed(seed, 8));
  w.router_bias = DeviceBuffer<float>(size_t(E));
  PB_CUDA(cudaMemcpyAsync(w.router_bias.get(), bias.data(), bias.size() * sizeof(float), cudaMemcpyHostToDevice,
                          stream));
  PB_CUDA(cudaStreamSynchronize(stream));  // `bias` is pageable host memory
  return w;
}

MoeBlock::MoeBlock(const ModelShape& m, int64_t bucket, int64_t max_tokens, uint64_t seed, cudaStream_t stream)
    : m_(m), b_(bucket), max_tokens_(max_tokens), w_(make_moe_weights(m, seed, stream)),
      sizes_(int(m.experts)), gemm_gate_up_(int(m.experts)), gemm_down_(int(m.experts)) {
  PB_CHECK(max_tokens >= 1 && max_tokens <= bucket, "MoeBlock: need 1 <= max_tokens <= bucket");
  const int64_t h = m.hidden, E = m.experts, k = m.top_k, lat = m.moe_latent, I = m.expert_inter,
                S = m.shared_inter;
  const int64_t b = bucket, routed = max_tokens * k;
  check_moe_route_shape(route_shape(m, max_tokens));
  auto bf = [](int64_t n) { return DeviceBuffer<bf16>(size_t(n)); };
  normed_ = bf(b * h);
  latent_ = bf(b * lat);
  xp_ = bf(routed * lat);
  gate_ = bf(routed * I);
  up_ = bf(routed * I);
  act_ = bf(routed * I);
  yd_ = bf(routed * lat);
  routed_latent_ = bf(b * lat);
  routed_norm_ = bf(b * lat);
  routed_ = bf(b * h);
  sh_gate_ = bf(b * S);
  sh_up_ = bf(b * S);
  sh_act_ = bf(b * S);
  shared_ = bf(b * h);
  // One f32 scratch for every dense GEMM's partial: each is landed before the
  // next GEMM writes. The expert GEMMs write bf16 directly (moe_gemm.h).
  const int64_t partial = std::max({b * lat, b * h, b * 2 * S});
  partial_ = DeviceBuffer<float>(size_t(partial));
  logits_ = DeviceBuffer<float>(size_t(b * E));
  topw_ = DeviceBuffer<float>(size_t(routed));
  ids_ = DeviceBuffer<int32_t>(size_t(routed));
  plan_counts_ = DeviceBuffer<int32_t>(size_t(E));
  plan_offsets_ = DeviceBuffer<int32_t>(size_t(E + 1));
  perm_src_ = DeviceBuffer<int32_t>(size_t(routed));
  perm_dst_ = DeviceBuffer<int32_t>(size_t(routed));
  const size_t ws = moe_permute_plan_workspace_bytes(route_shape(m, max_tokens));
  plan_ws_ = DeviceBuffer<int32_t>(std::max<size_t>(1, (ws + 3) / 4));
  counts_.assign(size_t(E), 0);
  PB_CUDA(cudaStreamSynchronize(stream));
}

double MoeBlock::load_imbalance() const { return moe_load_imbalance(counts_.data(), int(m_.experts)); }

void MoeBlock::run(Timeline& tl, const Blas& blas, const CutSet& cuts, MoeGemmEngine engine, const bf16* x,
                   int64_t tokens, bf16* out) {
  PB_CHECK(tokens >= 1 && tokens <= max_tokens_, "MoeBlock::run: tokens outside [1, max_tokens]");
  PB_CHECK(x != nullptr && out != nullptr && x != out, "MoeBlock::run: x and out must be distinct buffers");
  const int64_t h = m_.hidden, E = m_.experts, lat = m_.moe_latent, I = m_.expert_inter, S = m_.shared_inter;
  const int64_t b = b_;
  const float eps = float(m_.rms_eps);
  const MoeRouteShape rs = route_shape(m_, tokens);
  const Variant lv = land_variant(cuts), ev = elementwise_variant(cuts);
  cudaStream_t st = tl.stream();
  float* partial = partial_.get();
  const MoePlan plan{plan_counts_.get(), plan_offsets_.get(), perm_src_.get(), perm_dst_.get()};
  int64_t valid = 0;  // V, known on the host from moe_gemm.gate_up on

  tl.launch("rmsnorm", "rmsnorm.moe_in", [&] { rmsnorm(x, nullptr, normed_.get(), {b, h, 0, 0}, eps, st); });
  tl.launch("gemm", "gemm.router", [&] {
    GemmDims d;
    d.m = b;
    d.n = E;
    d.k = h;
    gemm_f32out(blas, normed_.get(), w_.router.get(), logits_.get(), d, st);
  });
  tl.launch("moe", "moe.topk",
            [&] { router_topk(logits_.get(), w_.router_bias.get(), ids_.get(), topw_.get(), rs, st); });
  tl.launch("moe", "moe.plan", [&] {
    moe_permute_plan(ids_.get(), plan, plan_ws_.get(), plan_ws_.bytes(), rs, st);
    sizes_.fetch(plan_counts_.get(), st);
  });
  gemm_land(tl, blas, lv, "lat_down", normed_.get(), w_.lat_down.get(), partial, latent_.get(), b, lat, h);
  tl.launch("moe", "moe.permute", [&] { moe_permute(latent_.get(), perm_src_.get(), xp_.get(), rs, lat, st); });
  tl.launch("moe_gemm", "moe_gemm.gate_up", [&] {
    const int32_t* counts = sizes_.wait();
    counts_.assign(counts, counts + E);
    for (int32_t c : counts_) valid += c;
    bf16* const bands[2] = {gate_.get(), up_.get()};  // W_gu[e] rows 0..I-1 -> gate, I..2I-1 -> up
    gemm_gate_up_.run(engine, blas, counts_.data(), xp_.get(), w_.expert_gate_up.get(), bands,
                      MoeGemmShape{int(E), 2 * I, lat, 0, 0, 2}, st);
  });
  tl.launch("elementwise", "situ", [&] { situ(ev, gate_.get(), up_.get(), act_.get(), valid * I, st); });
  tl.launch("moe", "moe.weight",
            [&] { moe_weight(act_.get(), perm_src_.get(), topw_.get(), act_.get(), rs, I, st); });
  tl.launch("moe_gemm", "moe_gemm.down", [&] {
    bf16* const band[1] = {yd_.get()};
    gemm_down_.run(engine, blas, counts_.data(), act_.get(), w_.expert_down.get(), band,
                   MoeGemmShape{int(E), lat, I, 0, 0, 1}, st);
  });
  tl.launch("moe", "moe.combine", [&] {
    moe_combine(yd_.get(), perm_dst_.get(), routed_latent_.get(), rs, lat, st);
    if (tokens < b)
      PB_CUDA(cudaMemsetAsync(routed_latent_.get() + tokens * lat, 0, size_t((b - tokens) * lat) * sizeof(bf16), st));
  });
  tl.launch("rmsnorm", "rmsnorm.routed_latent",
            [&] { rmsnorm(routed_latent_.get(), nullptr, routed_norm_.get(), {b, lat, 0, 0}, eps, st); });
  gemm_land(tl, blas, lv, "lat_up", routed_norm_.get(), w_.lat_up.get(), partial, routed_.get(), b, h, lat);
  tl.launch("gemm", "gemm.shared", [&] {
    GemmDims d;
    d.m = b;
    d.n = 2 * S;
    d.k = h;
    gemm_f32out(blas, normed_.get(), w_.shared_gate_up.get(), partial, d, st);
  });
  land_band(tl, lv, "shared_gate", partial, sh_gate_.get(), b, 2 * S, 0, S);
  land_band(tl, lv, "shared_up", partial, sh_up_.get(), b, 2 * S, S, S);
  tl.launch("elementwise", "situ", [&] { situ(ev, sh_gate_.get(), sh_up_.get(), sh_act_.get(), b * S, st); });
  gemm_land(tl, blas, lv, "shared_down", sh_act_.get(), w_.shared_down.get(), partial, shared_.get(), b, h, S);
  tl.launch("elementwise", "add2", [&] { add2(ev, routed_.get(), shared_.get(), out, b * h, st); });
}

}  // namespace pb
