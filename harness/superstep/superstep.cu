#include "superstep.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>

#include "attnres.h"
#include "block_common.h"
#include "check.h"
#include "elementwise.h"
#include "fabric_plan.h"
#include "gang.h"
#include "embed.h"
#include "ref_math.h"
#include "schedule.h"
#include "slab_layout.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
constexpr float kAttnResEps = 1e-5f;
constexpr int kSnapBlocks = kAttnResMaxBlocks;

// Synthetic token ids: a hash of (seed, global position), the same on every
// rank; the rows of a rank's token ranges in order (rank_tokens), then zeros.
std::vector<int32_t> token_ids(uint64_t seed, const std::vector<Segment>& ranges, int64_t rows, int64_t vocab) {
  std::vector<int32_t> ids(size_t(rows), 0);
  int64_t row = 0;
  for (const Segment& seg : ranges)
    for (int64_t r = 0; r < seg.len; ++r, ++row) {
      uint64_t z = (seed + 0x9e3779b97f4a7c15ull) ^ uint64_t(seg.begin + r) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 31)) * 0x94d049bb133111ebull;
      ids[size_t(row)] = int32_t((z ^ (z >> 29)) % uint64_t(vocab));
    }
  return ids;
}

// The MLA lane of rank `rank`; it takes the held window when a variant runs cut 8.
MlaLane mla_lane(const Scenario& s, int rank, const std::vector<Segment>& segs, Fabric* fabric) {
  MlaLane lane{rank, s.cp, segs, s.bucket, fabric, s.helped_in_place, s.layout};
  lane.overlap = any_variant_has(s, Cut::overlap);
  lane.gemm = s.precision.gemm;
  return lane;
}

bool any_layer(const ModelShape& m, bool (*pred)(const ModelShape&, int64_t)) {
  for (int64_t l = 0; l < m.layers; ++l)
    if (pred(m, l)) return true;
  return false;
}

}  // namespace

Superstep::Parts Superstep::take_parts(DeviceMemory& mem, const Scenario& s, int rank, cudaStream_t stream) {
  const ModelShape& m = s.model;
  const int cp = s.cp;
  const std::vector<Segment> segs = lane_segments(s.layout, s.context, cp);
  const int64_t b = s.bucket, t = segs.at(size_t(rank)).len, h = m.hidden;
  const uint64_t seed = s.seed;
  const WeightFill fill{mem, stream};
  Parts p;
  p.embed_table = mem.take<bf16>("embed_table", m.vocab * h, Home::weights);
  if (mem.fills_weights()) fill_uniform_bf16(p.embed_table.get(), m.vocab * h, seed + 1, 1.0f, stream);
  p.sw = fill.uniform_f32("attnres.sw", (2 * m.layers + 1) * h, seed + 2, 0.02f);
  if (any_layer(m, [](const ModelShape& x, int64_t l) { return x.is_mla(l); })) {
    p.mla_w = std::make_unique<MlaWeights>(m, seed + 10, stream, mem, s.precision.gemm);
    p.mla = std::make_unique<MlaBlockBuffers>(
        MlaBlockBuffers::take(mem, m, mla_lane(s, rank, segs, nullptr)));
  }
  if (any_layer(m, [](const ModelShape& x, int64_t l) { return !x.is_mla(l); })) {
    p.kda_w = std::make_unique<KdaWeights>(m, seed + 20, stream, mem, s.precision.gemm);
    p.kda = std::make_unique<KdaBlockBuffers>(
        KdaBlockBuffers::take(mem, m, KdaLane{rank, cp, segs, b, nullptr, s.layout, s.precision.gemm}));
  }
  if (any_layer(m, [](const ModelShape& x, int64_t l) { return !x.is_dense_ffn(l); })) {
    p.moe_w = std::make_unique<MoeWeights>(
        make_moe_weights(m, seed + 30, stream, mem, s.precision.gemm, s.precision.experts));
    p.moe = std::make_unique<MoeBlockBuffers>(MoeBlockBuffers::take(mem, m, b, t, s.precision.gemm, s.precision.experts,
                                                                         s.moe_gemm == "loop"));
  }
  if (any_layer(m, [](const ModelShape& x, int64_t l) { return x.is_dense_ffn(l); }))
    p.dense = std::make_unique<DenseFfn>(m, b, seed + 40, stream, mem, s.precision.gemm);
  // Ranks that share weights take the same set, the lm head included.
  if (rank == last_token_rank(s.layout, cp) || mem.placement().shares_weights())
    p.first = std::make_unique<FirstToken>(m, seed + 50, stream, mem);
  mem.begin_block("superstep");
  // Across turns: the residual stream, the snapshots, the token ids, the fingerprints.
  p.ids = mem.take<int32_t>("token_ids", b, Home::rank);
  p.hidden = mem.take<bf16>("hidden", b * h, Home::rank);
  p.snap = mem.take<bf16>("snapshots", b * kSnapBlocks * h, Home::rank);
  p.last_mixed = mem.take<bf16>("last_mixed", h, Home::rank);
  p.checksums = mem.take<unsigned long long>("checksums", m.layers, Home::rank);
  // Within a turn: the AttnRes outputs, the partial sum after the mixer, the FFN's output.
  p.mixed = mem.take<bf16>("mixed", b * h, Home::trunk);
  p.prefix2 = mem.take<bf16>("prefix2", b * h, Home::trunk);
  p.ffn_out = mem.take<bf16>("ffn_out", b * h, Home::trunk);
  p.scores = mem.take<float>("attnres_scores", b * (kSnapBlocks + 1), Home::trunk);
  if (cp > 1) {  // the fabric's slab with this rank's NCCL staging (fabric_plan.h: on one machine)
    mem.begin_block("fabric");
    mem.note("slab", with_nccl_staging(model_slab_layout(m, cp, b, s.layout), rank,
                                       scenario_fabric_plan(s).nccl_peers(rank))
                         .total_bytes);
  }
  return p;
}

MemoryNeeds Superstep::memory_needs(const Scenario& s, int rank, const Placement& placement) {
  DeviceMemory mem = DeviceMemory::counting(placement);
  take_parts(mem, s, rank, nullptr);
  return mem.needs();
}

Superstep::Superstep(const Scenario& s, int rank, Fabric* fabric, const Blas& blas, cudaStream_t stream,
                     DeviceMemory& mem)
    : s_(s), m_(s.model), rank_(rank), cp_(s.cp), b_(s.bucket), blas_(blas),
      fmha_(fmha_engine_from_name(s.fmha)), moe_engine_(moe_gemm_engine_from_name(s.moe_gemm.c_str())),
      p_(take_parts(mem, s, rank, stream)) {
  PB_CHECK(!mem.counting_only(), "Superstep: a counting DeviceMemory only sizes (memory_needs)");
  PB_CHECK(s.layout != Layout::zigzag || !s.serialize_ranks || cp_ == 1 || !p_.kda,
           s.source + ": layout zigzag with serialize_ranks: a KDA piece's conv carry comes from a later rank's "
                      "turn (kda_block.h); run the ranks concurrently (serialize_ranks: false)");
  const std::vector<Segment> segs = lane_segments(s.layout, s.context, cp_);
  t_ = segs[rank_].len;
  if (p_.mla)
    mla_ = std::make_unique<MlaBlock>(m_, *p_.mla_w, mla_lane(s, rank_, segs, fabric), fmha_, std::move(*p_.mla));
  if (p_.kda)
    kda_ = std::make_unique<KdaBlock>(m_, *p_.kda_w, KdaLane{rank_, cp_, segs, b_, fabric, s.layout, s.precision.gemm},
                                      std::move(*p_.kda));
  if (p_.moe) moe_ = std::make_unique<MoeBlock>(m_, b_, t_, std::move(*p_.moe_w), std::move(*p_.moe));
  p_.ids.upload(token_ids(s.seed, rank_tokens(s.layout, s.context, cp_, rank_), b_, m_.vocab));
  PB_CUDA(cudaMemsetAsync(p_.snap.get(), 0, p_.snap.bytes(), stream));
  PB_CUDA(cudaStreamSynchronize(stream));
}

Superstep::~Superstep() = default;

std::map<std::string, std::string> Superstep::engines() const {
  std::map<std::string, std::string> e;
  if (mla_) e["fmha"] = fmha_engine_name(fmha_);
  if (moe_) e["moe_gemm"] = moe_gemm_engine_name(moe_engine_);
  if (kda_) e["kda_forward_walk"] = kda_->forward_walk_name();
  return e;
}

MemoryBudget superstep_memory_budget(const Scenario& s, const Placement& p) {
  PB_CHECK(p.ranks_per_gpu >= 1, "memory budget: ranks per GPU must be positive");
  MemoryBudget out;
  for (int r = 0; r < s.cp; ++r) out.ranks.push_back(Superstep::memory_needs(s, r, p));
  for (int first = 0; first < s.cp; first += p.ranks_per_gpu) {
    const std::vector<MemoryNeeds> gpu(out.ranks.begin() + first,
                                       out.ranks.begin() + std::min(s.cp, first + p.ranks_per_gpu));
    const GpuBudget b = gpu_budget(gpu, p);
    if (b.total() > out.fullest.total()) {
      out.fullest = b;
      out.fullest_processes = int(gpu.size());
    }
  }
  const auto gb = [](int64_t bytes) { return double(bytes) / 1e9; };
  char line[256];
  std::string t = "memory, GB (" + s.name + ", " + std::to_string(p.ranks_per_gpu) + " rank(s) per GPU" +
                  (p.serialized ? ", serialized" : "") + "; weights " + (p.shares_weights() ? "shared" : "per rank") +
                  ", turn-local arena " + (p.shares_arena() ? "shared" : "per rank") + ")\n";
  std::snprintf(line, sizeof line, "  %-6s %9s %9s %11s %9s %9s %9s\n", "rank", "weights", "own", "turn-local",
                "trunk", "mixer", "ffn");
  t += line;
  for (int r = 0; r < s.cp; ++r) {
    if (r > 0 && r < s.cp - 1) continue;  // the first and the last rank differ; the middle ones equal the first
    const MemoryNeeds& n = out.ranks[size_t(r)];
    std::snprintf(line, sizeof line, "  %-6d %9.2f %9.2f %11.2f %9.2f %9.2f %9.2f\n", r, gb(n.weights), gb(n.rank),
                  gb(n.turn_local), gb(n.lanes[0]), gb(n.lanes[1]), gb(n.lanes[2]));
    t += line;
  }
  t += "  (turn-local: every turn-local buffer apart; trunk, mixer, ffn: the shared arena's lanes)\n";
  const GpuBudget& f = out.fullest;
  std::snprintf(line, sizeof line,
                "  per GPU (the fullest): weights %.1f + turn-local arena %.1f + ranks' own %.1f = %.1f GB\n",
                gb(f.weights), gb(f.arena), gb(f.ranks), gb(f.total()));
  t += line;
  out.table = t;
  return out;
}

std::string precision_device_problem(const Scenario& s) {
  const std::string planned = precision_planned_only(s.precision);
  if (!planned.empty()) return s.source + ": " + planned;
  std::string why;
  if (s.precision.gemm == Format::fp8 && !fp8_block_scaling_supported(&why))
    return s.source + ": precision.gemm fp8: " + why + "; allowed here: precision bf16";
  if (s.precision.experts == Format::fp8 && any_layer(s.model, [](const ModelShape& x, int64_t l) {
        return !x.is_dense_ffn(l);
      })) {
    if (s.moe_gemm == "loop") {
      const ModelShape& m = s.model;
      if ((m.moe_latent / kFp8Group) % 4 != 0 || (m.expert_inter / kFp8Group) % 4 != 0)
        return s.source + ": precision.experts fp8 on moe_gemm loop needs model.moe_latent and model.expert_inter " +
               "multiples of 512 (cuBLASLt's weight scale rows, moe_gemm.h), got " + std::to_string(m.moe_latent) +
               " and " + std::to_string(m.expert_inter) + "; allowed: moe_gemm cutlass";
      if (!fp8_block_scaling_supported(&why))
        return s.source + ": precision.experts fp8 on moe_gemm loop (cuBLASLt): " + why +
               "; allowed here: precision.experts bf16";
      return "";
    }
    if (moe_gemm_engine_from_name(s.moe_gemm.c_str()) != MoeGemmEngine::cutlass)
      return s.source + ": precision.experts fp8 runs on the cutlass or the loop expert engine, and moe_gemm is " +
             s.moe_gemm + (s.moe_gemm == "auto" ? " (this build or device has no cutlass engine)" : "") +
             "; allowed with fp8 experts: moe_gemm cutlass (or auto, where cutlass is built), loop";
    if (!cutlass_fp8_gemm_available())
      return s.source + ": precision.experts fp8: the cutlass fp8 engine needs a build with CUTLASS and an sm_90 "
                        "device; allowed here: precision.experts bf16";
  }
  return "";
}

GangMemory superstep_memory(const Gang& gang, int device, const Scenario& s) {
  const std::string problem = precision_device_problem(s);
  PB_CHECK(problem.empty(), problem);  // before anything is allocated
  const int rank = gang.rank();
  return GangMemory(gang, device, s.serialize_ranks, share_mode_from_name(s.share_memory),
                    [&](const Placement& p) { return Superstep::memory_needs(s, rank, p); });
}

void Superstep::attnres_call(const CutSet& cuts, Timeline& tl, int64_t rows, int nb, const bf16* snap,
                             const bf16* partial, const float* sw, bf16* out) {
  cudaStream_t st = tl.stream();
  const AttnResShape shape{rows, m_.hidden, nb, kSnapBlocks};
  if (cuts[Cut::attnres]) {
    tl.launch("attnres", "attnres.fused",
              [&] { attnres(Variant::cut, snap, partial, sw, p_.scores.get(), out, shape, kAttnResEps, st); });
    return;
  }
  const AttnResStep step = [&](const char* name, const std::function<void()>& work) {
    tl.launch("attnres", std::string("attnres.") + name, work);
  };
  attnres_baseline(snap, partial, sw, p_.scores.get(), out, shape, kAttnResEps, st, &step);
}

void Superstep::add2_call(const CutSet& cuts, Timeline& tl, const bf16* a, const bf16* b, bf16* out) {
  cudaStream_t st = tl.stream();
  tl.launch("elementwise", "add2", [&] { add2(elementwise_variant(cuts), a, b, out, b_ * m_.hidden, st); });
}

void Superstep::run(const CutSet& cuts, Timeline& tl, const Turn& turn, bool checksums, int64_t layers) {
  cudaStream_t st = tl.stream();
  const int64_t h = m_.hidden;
  const int64_t depth = layers < 0 ? m_.layers : std::min(layers, m_.layers);
  have_first_token_ = false;
  tl.set_layer(-1);
  turn([&] { tl.launch("embed", "embed.gather", [&] { embed_gather(p_.embed_table.get(), p_.ids.get(), p_.hidden.get(), b_, h, st); }); });
  for (int64_t layer = 0; layer < depth; ++layer) {
    tl.set_layer(int32_t(layer));
    const bool mla = m_.is_mla(layer), snapshot = m_.is_snapshot_layer(layer);
    const float* sw_attn = p_.sw.get() + 2 * layer * h;
    const float* sw_mlp = sw_attn + h;
    turn([&] {
      const bf16* mixer_in = p_.hidden.get();
      if (layer > 0) {
        attnres_call(cuts, tl, b_, int(m_.nb_in(layer)), p_.snap.get(), p_.hidden.get(), sw_attn, p_.mixed.get());
        mixer_in = p_.mixed.get();
      }
      if (snapshot)
        tl.launch("attnres", "attnres.snapshot", [&] {
          const int64_t block = layer / m_.attnres_period;
          PB_CUDA(cudaMemcpy2DAsync(p_.snap.get() + block * h, size_t(kSnapBlocks * h) * 2, p_.hidden.get(), size_t(h) * 2,
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
        add2_call(cuts, tl, p_.hidden.get(), attn_out, p_.prefix2.get());
        prefix2 = p_.prefix2.get();
      }
      attnres_call(cuts, tl, b_, int(m_.nb_mlp(layer)), p_.snap.get(), prefix2, sw_mlp, p_.mixed.get());
      if (m_.is_dense_ffn(layer)) p_.dense->run(tl, blas_, cuts, p_.mixed.get(), p_.ffn_out.get());
      else moe_->run(tl, blas_, cuts, moe_engine_, p_.mixed.get(), t_, p_.ffn_out.get());
      add2_call(cuts, tl, prefix2, p_.ffn_out.get(), p_.hidden.get());
      if (checksums) checksum_bf16(p_.hidden.get(), t_ * h, p_.checksums.get() + layer, st);
    });
    if (mla) ++mla_seq_;
    else ++kda_seq_;
  }
  tl.set_layer(-1);
  if (depth < m_.layers) return;  // a warm-up: the first token needs every layer's snapshot
  const bool last_token = rank_ == last_token_rank(s_.layout, cp_);
  turn([&] {
    if (!last_token) return;
    const int64_t last = t_ - 1;
    attnres_call(cuts, tl, 1, int(m_.nb_final()), p_.snap.get() + last * kSnapBlocks * h, p_.hidden.get() + last * h,
                 p_.sw.get() + 2 * m_.layers * h, p_.last_mixed.get());
    p_.first->run(tl, blas_, cuts, p_.last_mixed.get());
  });
  have_first_token_ = last_token;
}

int64_t Superstep::first_token() const { return have_first_token_ ? p_.first->token() : -1; }

std::vector<uint64_t> Superstep::layer_checksums() const { return p_.checksums.download<uint64_t>(); }

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
    PB_CUDA(cudaMemcpy(bits.data() + size_t(i) * size_t(cols), p_.hidden.get() + r * m_.hidden, size_t(cols) * 2,
                       cudaMemcpyDeviceToHost));
  }
  return widen(bits);
}

std::vector<float> Superstep::last_logits() const {
  if (!have_first_token_) return {};
  std::vector<uint16_t> bits(size_t(m_.vocab));
  PB_CUDA(cudaMemcpy(bits.data(), p_.first->logits(), bits.size() * 2, cudaMemcpyDeviceToHost));
  return widen(bits);
}

}  // namespace pb
