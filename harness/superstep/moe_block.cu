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

MoeWeights make_moe_weights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem, Format gemm,
                            Format experts) {
  const int64_t h = m.hidden, E = m.experts, lat = m.moe_latent, I = m.expert_inter, S = m.shared_inter;
  const WeightFill fill{mem, stream};
  MoeWeights w;
  w.router = fill.weight("moe.router", E, h, tensor_seed(seed, 1));
  w.lat_down = fill.proj("moe.lat_down", lat, h, tensor_seed(seed, 2), gemm);
  w.expert_gate_up = fill.proj("moe.expert_gate_up", E * 2 * I, lat, tensor_seed(seed, 3), experts, lat / kFp8Group);
  w.expert_down = fill.proj("moe.expert_down", E * lat, I, tensor_seed(seed, 4), experts, I / kFp8Group);
  w.lat_up = fill.proj("moe.lat_up", h, lat, tensor_seed(seed, 5), gemm);
  w.shared_gate_up = fill.proj("moe.shared_gate_up", 2 * S, h, tensor_seed(seed, 6), gemm);
  w.shared_down = fill.proj("moe.shared_down", h, S, tensor_seed(seed, 7), gemm);
  w.router_bias = mem.take<float>("moe.router_bias", E, Home::weights);
  if (mem.fills_weights()) {
    const std::vector<float> bias = synthetic_router_bias(int(E), tensor_seed(seed, 8));
    PB_CUDA(cudaMemcpyAsync(w.router_bias.get(), bias.data(), bias.size() * sizeof(float), cudaMemcpyHostToDevice,
                            stream));
    PB_CUDA(cudaStreamSynchronize(stream));  // `bias` is pageable host memory
  }
  return w;
}

MoeBlockBuffers MoeBlockBuffers::take(DeviceMemory& mem, const ModelShape& m, int64_t bucket, int64_t max_tokens,
                                      Format gemm, Format experts, bool loop_engine) {
  mem.begin_block("moe");
  const int64_t h = m.hidden, E = m.experts, k = m.top_k, lat = m.moe_latent, I = m.expert_inter,
                S = m.shared_inter;
  const bool fp8_loop = experts == Format::fp8 && loop_engine;
  const int64_t b = bucket, routed = max_tokens * k, slack = fp8_loop ? kMoeFp8LoopSlackRows : 0;
  const auto bf = [&](const char* name, int64_t n) { return mem.take<bf16>(name, n, Home::ffn); };
  const auto i32 = [&](const char* name, int64_t n) { return mem.take<int32_t>(name, n, Home::ffn); };
  MoeBlockBuffers x;
  x.normed_ = bf("normed", b * h);
  x.latent_ = bf("latent", b * lat);
  x.xp_ = bf("permuted", routed * lat);
  x.gate_ = bf("expert_gate", (routed + slack) * I);
  x.up_ = bf("expert_up", (routed + slack) * I);
  x.act_ = bf("expert_act", routed * I);
  x.yd_ = bf("expert_down", (routed + slack) * lat);
  x.routed_latent_ = bf("routed_latent", b * lat);
  x.routed_norm_ = bf("routed_norm", b * lat);
  x.routed_ = bf("routed", b * h);
  x.sh_gate_ = bf("shared_gate", b * S);
  x.sh_up_ = bf("shared_up", b * S);
  x.sh_act_ = bf("shared_act", b * S);
  x.shared_ = bf("shared", b * h);
  // One f32 scratch for every dense GEMM's partial: each is landed before the
  // next GEMM writes. The expert GEMMs write bf16 directly (moe_gemm.h).
  x.partial_ = mem.take<float>("partial", std::max({b * lat, b * h, b * 2 * S}), Home::ffn);
  x.logits_ = mem.take<float>("logits", b * E, Home::ffn);
  x.topw_ = mem.take<float>("topk_weights", routed, Home::ffn);
  x.ids_ = i32("topk_ids", routed);
  x.plan_counts_ = i32("plan_counts", E);
  x.plan_offsets_ = i32("plan_offsets", E + 1);
  x.perm_src_ = i32("perm_src", routed);
  x.perm_dst_ = i32("perm_dst", routed);
  const int64_t ws = int64_t(moe_permute_plan_workspace_bytes(route_shape(m, max_tokens)));
  x.plan_ws_ = i32("plan_workspace", std::max<int64_t>(1, (ws + 3) / 4));
  x.normed_q_ = Fp8Act::take(mem, "normed", b, h, Home::ffn, gemm);
  x.routed_norm_q_ = Fp8Act::take(mem, "routed_norm", b, lat, Home::ffn, gemm);
  x.sh_act_q_ = Fp8Act::take(mem, "shared_act", b, S, Home::ffn, gemm);
  x.latent_q_ = Fp8Act::take(mem, "latent", b, lat, Home::ffn, experts, /*k_major=*/true);
  x.xp_q_ = Fp8Act::take(mem, "permuted", routed + slack, lat, Home::ffn, experts, /*k_major=*/true);
  x.act_q_ = Fp8Act::take(mem, "expert_act", routed + slack, I, Home::ffn, experts, /*k_major=*/true);
  if (fp8_loop)
    x.loop_scales_ = mem.take<float>(
        "expert_scale_blocks", moe_fp8_loop_scale_floats(routed, int(E), std::max(lat, I) / kFp8Group), Home::ffn);
  return x;
}

MoeBlock::MoeBlock(const ModelShape& m, int64_t bucket, int64_t max_tokens, MoeWeights w, MoeBlockBuffers buffers)
    : MoeBlockBuffers(std::move(buffers)), m_(m), b_(bucket), max_tokens_(max_tokens), w_(std::move(w)),
      sizes_(int(m.experts)), gemm_gate_up_(int(m.experts)), gemm_down_(int(m.experts)) {
  PB_CHECK(max_tokens >= 1 && max_tokens <= bucket, "MoeBlock: need 1 <= max_tokens <= bucket");
  check_moe_route_shape(route_shape(m, max_tokens));
  counts_.assign(size_t(m.experts), 0);
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

  const bool fp8 = w_.lat_down.format == Format::fp8, fp8_experts = w_.expert_gate_up.format == Format::fp8;
  const bool fuse = fp8 && cuts[Cut::quant_fuse];
  if (fuse) {  // the router reads the bf16 rows, the fp8 projections their twin
    tl.launch("rmsnorm", "rmsnorm.moe_in", [&] {
      rmsnorm_fp8(x, nullptr, normed_.get(), normed_q_.codes.get(), normed_q_.scales.get(), normed_q_.layout,
                  {b, h, 0, 0}, eps, st);
    });
  } else {
    tl.launch("rmsnorm", "rmsnorm.moe_in", [&] { rmsnorm(x, nullptr, normed_.get(), {b, h, 0, 0}, eps, st); });
    if (fp8) quant_act(tl, "moe_in", normed_.get(), b, h, normed_q_);
  }
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
  gemm_land(tl, blas, lv, "lat_down", normed_.get(), normed_q_, w_.lat_down, partial, latent_.get(), b, lat, h);
  const int64_t routed_rows = tokens * m_.top_k;  // V: every assignment is kept (router_topk)
  const bool fuse_experts = fp8_experts && cuts[Cut::quant_fuse];
  if (fuse_experts) {  // a token's rows are copies: quantize the latent once, permute the codes
    quant_act(tl, "moe_latent", latent_.get(), b, lat, latent_q_);
    tl.launch("moe", "moe.permute", [&] {
      moe_permute_fp8(latent_q_.codes.get(), latent_q_.scales.get(), perm_src_.get(), xp_q_.codes.get(),
                      xp_q_.scales.get(), rs, lat, st);
    });
  } else {
    tl.launch("moe", "moe.permute", [&] { moe_permute(latent_.get(), perm_src_.get(), xp_.get(), rs, lat, st); });
    if (fp8_experts) quant_act(tl, "moe_rows", xp_.get(), routed_rows, lat, xp_q_);
  }
  tl.launch("moe_gemm", "moe_gemm.gate_up", [&] {
    const int32_t* counts = sizes_.wait();
    counts_.assign(counts, counts + E);
    for (int32_t c : counts_) valid += c;
    bf16* const bands[2] = {gate_.get(), up_.get()};  // W_gu[e] rows 0..I-1 -> gate, I..2I-1 -> up
    const MoeGemmShape shape{int(E), 2 * I, lat, 0, 0, 2};
    if (fp8_experts)
      gemm_gate_up_.run_fp8(engine, blas, counts_.data(), xp_q_.codes.get(), xp_q_.scales.get(),
                            w_.expert_gate_up.codes.get(), w_.expert_gate_up.scales.get(), bands, shape, st,
                            loop_scales_.get());
    else
      gemm_gate_up_.run(engine, blas, counts_.data(), xp_.get(), w_.expert_gate_up.bf.get(), bands, shape, st);
  });
  tl.launch("elementwise", "situ", [&] { situ(ev, gate_.get(), up_.get(), act_.get(), valid * I, st); });
  if (fuse_experts) {
    tl.launch("moe", "moe.weight", [&] {
      moe_weight_fp8(act_.get(), perm_src_.get(), topw_.get(), act_q_.codes.get(), act_q_.scales.get(), rs, I, st);
    });
  } else {
    tl.launch("moe", "moe.weight",
              [&] { moe_weight(act_.get(), perm_src_.get(), topw_.get(), act_.get(), rs, I, st); });
    if (fp8_experts) quant_act(tl, "moe_act", act_.get(), routed_rows, I, act_q_);
  }
  tl.launch("moe_gemm", "moe_gemm.down", [&] {
    bf16* const band[1] = {yd_.get()};
    const MoeGemmShape shape{int(E), lat, I, 0, 0, 1};
    if (fp8_experts)
      gemm_down_.run_fp8(engine, blas, counts_.data(), act_q_.codes.get(), act_q_.scales.get(), w_.expert_down.codes.get(),
                         w_.expert_down.scales.get(), band, shape, st, loop_scales_.get());
    else
      gemm_down_.run(engine, blas, counts_.data(), act_.get(), w_.expert_down.bf.get(), band, shape, st);
  });
  tl.launch("moe", "moe.combine", [&] {
    moe_combine(yd_.get(), perm_dst_.get(), routed_latent_.get(), rs, lat, st);
    if (tokens < b)
      PB_CUDA(cudaMemsetAsync(routed_latent_.get() + tokens * lat, 0, size_t((b - tokens) * lat) * sizeof(bf16), st));
  });
  if (fuse) {
    tl.launch("rmsnorm", "rmsnorm.routed_latent", [&] {
      rmsnorm_fp8(routed_latent_.get(), nullptr, nullptr, routed_norm_q_.codes.get(), routed_norm_q_.scales.get(),
                  routed_norm_q_.layout, {b, lat, 0, 0}, eps, st);
    });
  } else {
    tl.launch("rmsnorm", "rmsnorm.routed_latent",
              [&] { rmsnorm(routed_latent_.get(), nullptr, routed_norm_.get(), {b, lat, 0, 0}, eps, st); });
    if (fp8) quant_act(tl, "routed_latent", routed_norm_.get(), b, lat, routed_norm_q_);
  }
  gemm_land(tl, blas, lv, "lat_up", routed_norm_.get(), routed_norm_q_, w_.lat_up, partial, routed_.get(), b, h, lat);
  tl.launch("gemm", "gemm.shared", [&] {
    GemmDims d;
    d.m = b;
    d.n = 2 * S;
    d.k = h;
    proj_gemm(blas, w_.shared_gate_up, 0, normed_.get(), normed_q_, partial, d, st);
  });
  land_band(tl, lv, "shared_gate", partial, sh_gate_.get(), b, 2 * S, 0, S);
  land_band(tl, lv, "shared_up", partial, sh_up_.get(), b, 2 * S, S, S);
  if (fuse) {
    tl.launch("elementwise", "situ", [&] {
      situ_fp8(sh_gate_.get(), sh_up_.get(), nullptr, sh_act_q_.codes.get(), sh_act_q_.scales.get(),
               sh_act_q_.layout, b, S, st);
    });
  } else {
    tl.launch("elementwise", "situ", [&] { situ(ev, sh_gate_.get(), sh_up_.get(), sh_act_.get(), b * S, st); });
    if (fp8) quant_act(tl, "shared_act", sh_act_.get(), b, S, sh_act_q_);
  }
  gemm_land(tl, blas, lv, "shared_down", sh_act_.get(), sh_act_q_, w_.shared_down, partial, shared_.get(), b, h, S);
  tl.launch("elementwise", "add2", [&] { add2(ev, routed_.get(), shared_.get(), out, b * h, st); });
}

}  // namespace pb
