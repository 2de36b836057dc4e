#include "plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "check.h"

namespace pb {

namespace {

// Appends one rank's launches, block by block, in the superstep's order.
class RankPlanner {
 public:
  RankPlanner(const Scenario& s, const CutSet& cuts, int rank, int version)
      : s_(s), m_(s.model), cuts_(cuts), rank_(rank), cp_(s.cp), version_(version),
        sched_(attention_schedule(cuts, s.layout, s.cp)), rows_(rank_rows(s.layout, s.context, s.cp)),
        pieces_(kda_pieces(s.layout, s.cp, rank)), b_(s.bucket), t_(rows_[size_t(rank)]) {}

  RankPlan build() {
    RankPlan plan;
    plan.rank = rank_;
    plan.tokens = rank_tokens(s_.layout, s_.context, cp_, rank_);
    embedding();
    for (int64_t layer = 0; layer < m_.layers; ++layer) one_layer(layer);
    if (rank_ == last_token_rank(s_.layout, cp_)) first_token();
    plan.launches = std::move(out_);
    plan.fmha_pairs = rank_attention(sched_, cp_, rank_).load_pairs;
    return plan;
  }

 private:
  int64_t piece_rows(const KdaPiece& piece) const { return part_rows(t_, piece.parts).len(); }

  void add(const char* family, const std::string& kernel, const Cost& c, double fabric_bytes = 0) {
    out_.push_back({int32_t(layer_), family, kernel, c, fabric_bytes});
  }
  void fabric(const std::string& kernel, double bytes) { add("fabric", "fabric." + kernel, Cost{}, bytes); }
  bool fp8() const { return s_.precision.gemm == Format::fp8; }
  bool fuse() const { return fp8() && cuts_[Cut::quant_fuse]; }
  bool fuse_output_gates() const { return fuse() && version_ >= 2; }  // mul_sigmoid, o_norm_gate
  // A weight GEMM in the run's GEMM format (the router, kv_b and the lm head stay bf16: gemm_bf16).
  void gemm(const std::string& what, int64_t m, int64_t n, int64_t k) {
    if (fp8()) add("gemm", "gemm." + what, cost::gemm_fp8(m, n, k));
    else gemm_bf16(what, m, n, k);
  }
  void gemm_bf16(const std::string& what, int64_t m, int64_t n, int64_t k) {
    add("gemm", "gemm." + what, cost::gemm(m, n, k, s_.split_k));
  }
  // A block-scaled GEMM's input quantized by its own launch (block_common.h quant_act).
  void quant(const std::string& what, int64_t rows, int64_t k, Format f = Format::fp8) {
    add("quant", "quant." + what, cost::quant_act(rows, k, f));
  }
  // An RMSNorm whose rows feed fp8 projections: fused under quant_fuse (the bf16
  // rows written too when something else reads them), else followed by its quant.
  void norm(const std::string& what, int64_t rows, int64_t n, bool bf16_read_elsewhere = false) {
    if (fuse()) {
      add("rmsnorm", "rmsnorm." + what, cost::rmsnorm_fp8(rows, n, bf16_read_elsewhere));
      return;
    }
    rmsnorm(what, rows, n);
    if (fp8()) quant(what, rows, n);
  }
  // A two-input elementwise op whose output [rows, width] feeds only an fp8
  // projection: fused under quant_fuse, else followed by quant.<quant_name>.
  void elementwise_into_gemm(const std::string& op, double flops, const std::string& quant_name, int64_t rows,
                             int64_t width, bool fused) {
    if (fused) {
      add("elementwise", op, cost::elementwise_fp8(rows, width, flops));
      return;
    }
    elementwise(op, rows * width, 2, flops);
    if (fp8()) quant(quant_name, rows, width);
  }
  void situ_into_gemm(const std::string& quant_name, int64_t rows, int64_t width) {
    elementwise_into_gemm("situ", 12, quant_name, rows, width, fuse());
  }
  void land(const std::string& what, int64_t rows, int64_t n) {
    add("land", "land." + what, cost::land(rows, s_.split_k, n));
  }
  void gemm_land(const std::string& what, int64_t m, int64_t n, int64_t k) {
    gemm(what, m, n, k);
    land(what, m, n);
  }
  void rmsnorm(const std::string& what, int64_t rows, int64_t n) {
    add("rmsnorm", "rmsnorm." + what, cost::rmsnorm(rows, n));
  }
  void elementwise(const std::string& op, int64_t n, int inputs, double flops) {
    add("elementwise", op, cost::elementwise(n, inputs, flops));
  }
  void add2(int64_t n) { elementwise("add2", n, 2, 1); }
  void situ(int64_t n) { elementwise("situ", n, 2, 12); }
  // The baseline's two launches (scores, mix), or the cut's one fused launch
  // (kernels/cuts/attnres.h; attnres_launches() says the same, test_plan checks it).
  void attnres(int64_t rows, int64_t blocks) {
    if (cuts_[Cut::attnres]) {
      add("attnres", "attnres.fused", cost::attnres_fused(rows, m_.hidden, blocks + 1));
      return;
    }
    add("attnres", "attnres.scores", cost::attnres_scores(rows, m_.hidden, blocks + 1));
    add("attnres", "attnres.mix", cost::attnres_mix(rows, m_.hidden, blocks + 1));
  }

  void embedding() {
    layer_ = -1;
    add("embed", "embed.gather", cost::embed(b_, m_.hidden));
  }

  // DESIGN §2.1, "Per layer": AttnRes, mixer, residual, AttnRes, FFN, residual.
  void one_layer(int64_t layer) {
    layer_ = layer;
    if (layer > 0) attnres(b_, m_.nb_in(layer));
    if (m_.is_snapshot_layer(layer))
      add("attnres", "attnres.snapshot", cost::copy(double(b_) * m_.hidden * 2));
    if (m_.is_mla(layer)) mla_mixer();
    else kda_mixer();
    if (!m_.is_snapshot_layer(layer)) add2(b_ * m_.hidden);  // snapshot layers restart the partial sum
    attnres(b_, m_.nb_mlp(layer));
    if (m_.is_dense_ffn(layer)) dense_ffn();
    else moe_ffn();
    add2(b_ * m_.hidden);
  }

  // ---- KDA mixer (DESIGN §2.1 steps 1-10) ----
  void kda_mixer() {
    const int64_t inner = m_.kda_inner(), h = m_.hidden;
    norm("kda_in", b_, h, /*bf16_read_elsewhere=*/true);  // the halo publishes the bf16 rows
    if (cuts_[Cut::overlap]) publish_halos();
    gemm("kda_g", b_, inner, h);
    gemm("kda_small", b_, 256, h);
    land("beta", b_, m_.kda_heads);
    land("f_a", b_, m_.f_rank);
    land("out_gate", b_, inner);
    if (fp8()) quant("f_a", b_, m_.f_rank);
    gemm("kda_f_b", b_, inner, m_.f_rank);
    if (!cuts_[Cut::overlap]) {
      publish_halos();
      receive_halos();
      for (const char* stream : {"q", "k", "v"}) {
        gemm(std::string("kda_") + stream, b_, inner, h);
        conv_path(stream);
      }
      land("forget", b_, inner);
    } else {  // cut 8: what needs no halo before its wait (kda_block.h)
      for (const char* stream : {"q", "k", "v"}) gemm(std::string("kda_") + stream, b_, inner, h);
      land("forget", b_, inner);
      receive_halos();
      for (const char* stream : {"q", "k", "v"}) conv_path(stream);
    }
    kda_core();
    const bool fused = fuse_output_gates();  // the gated rows feed only the output projection
    add("elementwise", "o_norm_gate",
        (fused ? cost::o_norm_gate_fp8 : cost::o_norm_gate)(b_ * m_.kda_heads, m_.kda_head_dim));
    if (fp8() && !fused) quant("kda_o", b_, inner);
    gemm_land("kda_o", b_, h, inner);
  }

  // The conv carries: each piece's 3 rows before it come from the piece that
  // ends there (the upstream rank's last 3 normed rows, through the q/k/v
  // bands at 4 rows; schedule.h kda_pieces); halo slots alternate by KDA call parity.
  void publish_halos() {
    const int64_t halo_bytes = 3 * m_.hidden * 2;
    for (const KdaPiece& piece : pieces_)
      for (size_t send = 0; send < piece.halo_readers.size(); ++send) {
        fabric("wait_halo_free", 0);
        add("fabric", "fabric.publish_halo", cost::copy(double(halo_bytes)), double(halo_bytes));
      }
  }

  void receive_halos() {
    const int64_t halo_bytes = 3 * m_.hidden * 2;
    for (const KdaPiece& piece : pieces_) {
      if (piece.halo.rank < 0 || piece.halo.rank == rank_) continue;
      fabric("wait_halo", halo_bytes);
      if (fp8()) quant("halo", 4, m_.hidden);
      gemm("halo_qkv", 4, 3 * m_.kda_inner(), m_.hidden);
      for (const char* stream : {"q", "k", "v"}) land(std::string("halo_") + stream, 4, m_.kda_inner());
      fabric("release_halo", 0);
    }
  }

  // Cut 2: one fused launch per piece, or the retired path (land, window
  // copies, batched decode conv, carry copy).
  void conv_path(const std::string& stream) {
    for (const KdaPiece& piece : pieces_) conv_piece(stream, piece_rows(piece));
  }

  void conv_piece(const std::string& stream, int64_t rows) {
    const int64_t inner = m_.kda_inner();
    if (cuts_[Cut::conv]) {
      add("conv", "conv.chunk_" + stream, cost::conv_cut(rows, inner));
      return;
    }
    add("conv", "conv.land_" + stream, cost::land(rows, 1, inner));
    // windows [rows + 1, 3, inner]: per slot, one 2D copy from the carry and one
    // from the landed rows (conv_silu_chunk.cu), each skipped when empty.
    const int64_t window_rows = rows + 1;
    for (int slot = 0; slot < 3; ++slot) {
      const int64_t from_carry = std::min<int64_t>(3 - slot, window_rows);
      add("conv", "conv.window_copy", cost::copy(double(from_carry) * inner * 2));
      if (window_rows > from_carry)
        add("conv", "conv.window_copy", cost::copy(double(window_rows - from_carry) * inner * 2));
    }
    add("conv", "conv.decode_" + stream, cost::conv_decode(rows, inner));
    add("conv", "conv.carry_copy", cost::copy(3.0 * inner * 2));
  }

  // Per piece the state-independent prepare; the packages other ranks (or a
  // later piece) fold; then per piece the fold of the packages before it
  // (read in place; a later piece continues its earlier piece's fold) and the
  // walk from that S_in (schedule.h kda_pieces).
  void kda_core() {
    const int64_t heads = m_.kda_heads, d = m_.kda_head_dim, c = m_.kda_chunk;
    const double package_bytes = 2.0 * heads * d * d * 4;
    for (const KdaPiece& piece : pieces_) add("kda", "kda.prepare", cost::kda_prepare(piece_rows(piece), heads, d, c));
    for (const KdaPiece& piece : pieces_) {
      if (!piece.package) continue;
      const bool published = !piece.package_readers.empty();
      if (published) fabric("wait_state_free", 0);
      add("kda", "kda.package", cost::kda_package_walk(piece_rows(piece), heads, d, c));
      if (published) fabric("publish_state", 0);
    }
    size_t folded = 0;  // the previous piece's fold, which this one continues
    for (const KdaPiece& piece : pieces_) {
      PB_CHECK(piece.fold.size() >= folded, "plan: a later piece's fold does not extend the earlier one's");
      int foreign = 0;
      for (size_t i = folded; i < piece.fold.size(); ++i) foreign += piece.fold[i].rank != rank_;
      if (foreign > 0) fabric("wait_state", package_bytes * foreign);
      const int64_t more = int64_t(piece.fold.size() - folded);
      if (more > 0)
        add("kda", "kda.fold", folded == 0 ? cost::kda_fold(more, heads, d) : cost::kda_fold_more(more, heads, d));
      if (foreign > 0) fabric("release_state", 0);
      add("kda", "kda.forward", cost::kda_walk(piece_rows(piece), heads, d, c));
      folded = piece.fold.size();
    }
  }

  // ---- MLA mixer (DESIGN §2.1 steps 1-6, §3) ----
  void mla_mixer() {
    const int64_t h = m_.hidden, heads = m_.heads;
    norm("mla_in", b_, h);
    gemm("wfu", b_, m_.mla_fused_width(), h);
    land("q_a", b_, m_.q_lora);
    norm("q_a", b_, m_.q_lora);
    // The window (kv, q) is written in place in this rank's slab: first wait
    // until the last call's readers (under every schedule of the protocol) released it.
    const std::vector<Schedule> protocol = protocol_schedules(sched_);
    const bool published = !window_readers_any(protocol, cp_, rank_).empty();
    if (cuts_[Cut::overlap]) land("mla_gate", b_, heads * m_.v_head);  // cut 8: the gate needs no wait
    if (published) fabric("wait_released", 0);
    land("kv_a", b_, m_.kv_lora + m_.qk_rope);
    if (!cuts_[Cut::overlap]) land("mla_gate", b_, heads * m_.v_head);
    rmsnorm("kv_latent", b_, m_.kv_lora);
    gemm_land("q_b", b_, heads * m_.d_qk(), m_.q_lora);
    if (published) fabric("publish_window", 0);
    // Keys are expanded right before the first window that uses them (one
    // buffer for the own segment, one reused for foreign segments); under
    // cut 8 the steps run in overlap_order (schedule.h).
    const RankAttention attention = launch_attention(cuts_, s_.layout, cp_, rank_);
    std::vector<bool> expanded(cp_, false);
    for (const auto& step : attention.steps) {
      if (step.is_merge) {
        merge(step.merge);
        continue;
      }
      if (!expanded[step.window.k]) expand_keys(step.window.k, key_parts(attention, step.window.k));
      expanded[step.window.k] = true;
      fmha(step.window);
    }
    if (!windows_read_any(protocol, cp_, rank_).empty()) fabric("release_window", 0);
    add("o_finalize", "o_finalize", cost::o_finalize(t_, heads, m_.v_head));
    elementwise_into_gemm("mul_sigmoid", 6, "mla_o", b_, heads * m_.v_head, fuse_output_gates());
    gemm_land("mla_o", b_, h, heads * m_.v_head);
  }

  void expand_keys(int k, Parts parts) {
    const int64_t tk = part_rows(rows_[size_t(k)], parts).len();
    if (k != rank_) fabric("wait_window", double(tk) * (m_.kv_lora + m_.qk_rope) * 2);  // kv read in place
    add("gemm", "gemm.kv_b", cost::gemm(tk, m_.heads * (m_.qk_nope + m_.v_head), m_.kv_lora, 1, true));  // bf16 always
    add("mla", "mla.expand_k", cost::expand_k(tk, m_.heads, m_.qk_nope, m_.qk_rope));
  }

  void fmha(const FmhaWindow& w) {
    const WindowShape shape = window_shape(w, rows_);
    const int64_t tq = shape.tq(), tk = shape.tk();
    const bool helped = w.q != rank_;
    if (helped) {  // the owner's queries cross the link: staged apart from the wait, or read in place by the FMHA
      const double queries = double(tq) * m_.heads * m_.d_qk() * 2;
      const bool staged = !s_.helped_in_place && version_ >= 2;
      fabric("wait_queries", staged ? 0 : queries);
      if (staged) fabric("stage_queries", queries);
    }
    const char* kind = w.causal ? "fmha.causal" : helped ? "fmha.helped" : "fmha.dense";
    add("fmha", kind, cost::fmha(tq, tk, m_.heads, m_.d_qk(), m_.v_head, w.causal));
    if (helped)
      fabric("publish_return", double(tq) * m_.heads * m_.v_head * 2 + double(m_.heads) * tq * 4);
  }

  // A merge into the accumulator rows of step.rows; the first into them initializes them.
  void merge(const MergeStep& step) {
    const int64_t rows = part_rows(t_, step.rows).len();
    if (step.slot >= 0) fabric("wait_return", 0);
    add("lse_merge", "lse_merge", cost::lse_merge(rows, m_.heads, m_.v_head, step.reset));
    if (step.slot >= 0) fabric("release_return", 0);
  }

  // ---- FFNs ----
  void dense_ffn() {
    const int64_t h = m_.hidden, inter = m_.dense_inter;
    norm("dense_in", b_, h);
    gemm("dense_gate_up", b_, 2 * inter, h);
    land("dense_gate", b_, inter);
    land("dense_up", b_, inter);
    situ_into_gemm("dense_act", b_, inter);
    gemm_land("dense_down", b_, h, inter);
  }

  void moe_ffn() {
    const int64_t h = m_.hidden, lat = m_.moe_latent, k = m_.top_k, inter = m_.expert_inter;
    const int64_t routed_rows = t_ * k;
    norm("moe_in", b_, h, /*bf16_read_elsewhere=*/true);  // the router reads the bf16 rows
    gemm_bf16("router", b_, m_.experts, h);
    add("moe", "moe.topk", cost::router_topk(t_, m_.experts, k));
    // The permutation plan (three integer launches) and the async copy of the
    // per-expert counts to the host, which sizes the grouped GEMMs below.
    add("moe", "moe.plan", cost::moe_plan(t_, k, m_.experts));
    gemm_land("lat_down", b_, lat, h);
    // Block-scaled experts (fp8, or fp4 on paper): their rows and weighted
    // activations quantized (K-major scales) before each grouped GEMM; under
    // quant_fuse the latent rows are quantized before the permutation (rows of a
    // token are copies) and the permutation and moe.weight write codes themselves.
    const Format ef = s_.precision.experts;
    const bool scaled_experts = ef != Format::bf16, fuse_experts = scaled_experts && cuts_[Cut::quant_fuse];
    if (fuse_experts) {
      quant("moe_latent", b_, lat, ef);
      add("moe", "moe.permute", cost::moe_permute_scaled(t_, k, lat, ef));
    } else {
      add("moe", "moe.permute", cost::moe_permute(t_, k, lat));
      if (scaled_experts) quant("moe_rows", routed_rows, lat, ef);
    }
    // The expert GEMMs write bf16 (gate and up as two bands, kernels/moe/moe_gemm.h),
    // so no landing follows them. Both engines (scenario key moe_gemm) record
    // the same two spans: grouped = one cublasGemmGroupedBatchedEx each; loop =
    // one cublasGemmEx per non-empty expert and band inside the same span.
    const auto expert_gemm = [&](const char* what, int64_t n, int64_t kk) {
      add("moe_gemm", std::string("moe_gemm.") + what,
          scaled_experts ? cost::moe_gemm_scaled(routed_rows, m_.experts, n, kk, ef)
                         : cost::moe_gemm(routed_rows, m_.experts, n, kk));
    };
    expert_gemm("gate_up", 2 * inter, lat);
    situ(routed_rows * inter);
    if (fuse_experts) {
      add("moe", "moe.weight", cost::moe_weight_scaled(routed_rows, inter, ef));
    } else {
      add("moe", "moe.weight", cost::moe_weight(routed_rows, inter));
      if (scaled_experts) quant("moe_act", routed_rows, inter, ef);
    }
    expert_gemm("down", lat, inter);
    add("moe", "moe.combine", cost::moe_combine(t_, k, lat));
    norm("routed_latent", b_, lat);
    gemm_land("lat_up", b_, h, lat);
    gemm("shared", b_, 2 * m_.shared_inter, h);
    land("shared_gate", b_, m_.shared_inter);
    land("shared_up", b_, m_.shared_inter);
    situ_into_gemm("shared_act", b_, m_.shared_inter);
    gemm_land("shared_down", b_, h, m_.shared_inter);
    add2(b_ * h);  // mlp_out = routed + shared
  }

  // The last token's rank (last_token_rank), its last row: AttnRes over every block, norm, lm head, argmax.
  void first_token() {
    layer_ = -1;
    attnres(1, m_.nb_final());
    rmsnorm("final", 1, m_.hidden);
    gemm_bf16("lm_head", 1, m_.vocab, m_.hidden);
    land("lm_head", 1, m_.vocab);
    add("sample", "sample.argmax", cost::argmax(m_.vocab));
  }

  const Scenario& s_;
  const ModelShape& m_;
  CutSet cuts_;
  int rank_, cp_;
  int version_;  // the launch list's form (plan.h kLaunchListVersion)
  Schedule sched_;
  std::vector<int64_t> rows_;     // every rank's rows
  std::vector<KdaPiece> pieces_;  // this rank's KDA pieces
  int64_t b_, t_;
  int64_t layer_ = -1;
  std::vector<Launch> out_;
};

}  // namespace

int recorded_launch_list_version(const RunResult& run) {
  const auto found = run.numbers.find(kLaunchListVersionKey);
  return found == run.numbers.end() ? 1 : int(found->second);
}

RankPlan plan_rank(const Scenario& s, const CutSet& cuts, int rank, int version) {
  PB_CHECK(rank >= 0 && rank < s.cp, "plan_rank: rank out of range");
  PB_CHECK(version >= 1 && version <= kLaunchListVersion,
           fmt::format("plan_rank: launch list version {} (this build plans 1 to {})", version, kLaunchListVersion));
  return RankPlanner(s, cuts, rank, version).build();
}

std::vector<Span> plan_spans(const RankPlan& plan, const GpuProfile& profile, const LinkProfile& link) {
  std::vector<Span> spans;
  spans.reserve(plan.launches.size());
  for (const auto& l : plan.launches) {
    const bool fabric = l.family == "fabric";
    Span s;
    s.rep = -1;
    s.rank = plan.rank;
    s.layer = l.layer;
    s.family = l.family;
    s.kernel = l.kernel;
    s.time_us = !fabric ? roofline_us(l.cost, profile) : l.fabric_bytes > 0 ? link.transfer_us(l.fabric_bytes) : 0;
    s.bytes = span_bytes(l);
    s.flops = l.cost.flops;
    spans.push_back(std::move(s));
  }
  return spans;
}

std::vector<Span> plan_spans(const RankPlan& plan, const GpuProfile& profile) {
  return plan_spans(plan, profile, link_profile(profile.link));
}

namespace {

// Why a cut that moves FMHA FLOPs leaves them where they are in this scenario.
std::string unchanged_fmha(const Scenario& s) {
  if (s.layout == Layout::zigzag) return "no change under zigzag";
  if (s.cp == 1) return "no change at cp 1";
  if (s.cp % 2 == 1) return "no change at odd cp";
  return "no change";
}

}  // namespace

std::string cut_family(Cut c) { return cut_info(c).family; }

std::string CutEffect::mark() const {
  const PlanEffect effect = cut_info(cut).plan_effect;
  if (effect == PlanEffect::launch_order) return "launch order only: its gain is in the projection";
  if (effect == PlanEffect::fmha_flops) {
    if (deep_flops_on == deep_flops_off) return unchanged;
    return fmt::format("deep rank {:+.0f}% FLOPs", 100 * (deep_flops_on / deep_flops_off - 1));
  }
  if (same_bytes()) return "same bytes [1]";
  return fmt::format("{:+.0f}% bytes [2]", 100 * (bytes_on / bytes_off - 1));
}

std::vector<CutEffect> cut_effects(const Scenario& s, const CutSet& cuts) {
  std::vector<CutEffect> effects;
  for (Cut c : kAllCuts) {
    if (!cuts[c] || !cut_applies(c, s.precision)) continue;
    CutSet on = cuts.without(c);  // the cuts refining c off on both sides
    on.set(c, true);
    const CutSet off = on.without(c);
    CutEffect e;
    e.cut = c;
    e.family = cut_family(c);
    e.unchanged = unchanged_fmha(s);
    for (int r = 0; r < s.cp; ++r) {
      double flops_on = 0, flops_off = 0;
      for (const auto& l : plan_rank(s, on, r).launches)
        if (l.family == e.family) e.bytes_on += l.cost.bytes, flops_on += l.cost.flops;
      for (const auto& l : plan_rank(s, off, r).launches)
        if (l.family == e.family) e.bytes_off += l.cost.bytes, flops_off += l.cost.flops;
      e.deep_flops_on = std::max(e.deep_flops_on, flops_on);
      e.deep_flops_off = std::max(e.deep_flops_off, flops_off);
    }
    effects.push_back(e);
  }
  return effects;
}

std::vector<std::string> cut_effect_notes(const std::vector<CutEffect>& effects) {
  bool same = false, fewer = false;
  for (const auto& e : effects) {
    if (cut_info(e.cut).plan_effect != PlanEffect::bytes) continue;
    (e.same_bytes() ? same : fewer) = true;
  }
  std::vector<std::string> notes;
  if (same)
    notes.push_back("[1] same bytes with the cut on and off: the roofline shows no saving. The cut's gain is "
                    "efficiency (its measured fraction of the ceiling), which `plan --calibrate` applies.");
  if (fewer)
    notes.push_back("[2] the roofline counts the bytes the cut saves, not its efficiency gain; `plan --calibrate` "
                    "applies both.");
  return notes;
}

std::map<std::string, std::string> cut_family_marks(const std::vector<CutEffect>& effects) {
  std::map<std::string, int> governing;
  for (const auto& e : effects) ++governing[e.family];
  std::map<std::string, std::string> marks;
  for (const auto& e : effects) {
    const std::string mark = governing[e.family] > 1 ? std::string(cut_name(e.cut)) + " " + e.mark() : e.mark();
    std::string& joined = marks[e.family];
    joined += (joined.empty() ? "" : "; ") + mark;
  }
  return marks;
}

std::string format_plan_table(const std::vector<Span>& spans, int cp, const std::vector<double>& fmha_pairs,
                              const GpuProfile& profile, const std::string& title, const PlanTableNotes& notes) {
  std::map<std::string, std::vector<double>> ms;  // family -> per-rank ms
  std::vector<double> total(cp, 0), fabric_mb(cp, 0);
  std::vector<size_t> launches(cp, 0);
  for (const auto& s : spans) {
    PB_CHECK(s.rank >= 0 && s.rank < cp, "plan span of rank " + std::to_string(s.rank) + " outside the gang");
    auto& row = ms[s.family];
    row.resize(cp, 0);
    row[s.rank] += s.time_us / 1e3;
    total[s.rank] += s.time_us / 1e3;
    if (s.family == "fabric") fabric_mb[s.rank] += s.bytes / 1e6;
    ++launches[s.rank];
  }
  const int deep = int(std::max_element(total.begin(), total.end()) - total.begin());
  std::vector<std::pair<std::string, std::vector<double>>> rows(ms.begin(), ms.end());
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return a.second[deep] > b.second[deep]; });

  const bool measured = !spans.empty() && spans.front().rep >= 0;
  const std::string timed_by = notes.timing == "cupti" ? "CUPTI's records of every launch's kernels"
                                                        : "CUDA events around every launch";
  std::string out = measured ? fmt::format("{}\nmeasured ms per superstep ({})\n", title, timed_by)
                             : fmt::format("{}\nroofline ms per superstep on {} ({}); tensor work at the {} GEMM "
                                           "ceiling, {:.0f} TFLOP/s\n",
                                           title, profile.name, profile.source, profile.gemm_ceiling,
                                           profile.gemm_tflops);
  out += fmt::format("{:<14}", "family");
  for (int r = 0; r < cp; ++r) out += fmt::format("{:>10}", fmt::format("rank{}{}", r, r == deep ? "*" : ""));
  if (!notes.family_marks.empty()) out += "  cut";
  out += "\n";
  for (const auto& [family, per_rank] : rows) {
    out += fmt::format("{:<14}", family);
    for (double v : per_rank) out += fmt::format("{:>10.2f}", v);
    auto mark = notes.family_marks.find(family);
    if (mark != notes.family_marks.end()) out += "  " + mark->second;
    out += "\n";
  }
  out += fmt::format("{:<14}", "total");
  for (double v : total) out += fmt::format("{:>10.2f}", v);
  out += fmt::format("\n{:<14}", "fmha pairs");
  for (double v : fmha_pairs) out += fmt::format("{:>10.1f}", v);
  out += fmt::format("\n{:<14}", "launches");
  for (size_t v : launches) out += fmt::format("{:>10}", v);
  out += fmt::format("\n{:<14}", "fabric MB");
  for (double v : fabric_mb) out += fmt::format("{:>10.1f}", v);
  out += fmt::format("\ndeep rank: {} ({:.2f} ms {}, {:.1f} FMHA pairs per MLA layer)\n", deep, total[deep],
                     measured ? "measured" : "roofline", fmha_pairs[deep]);
  for (const auto& line : notes.lines) out += line + "\n";
  return out;
}

}  // namespace pb
