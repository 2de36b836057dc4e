#include "mla_block.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "block_common.h"
#include "check.h"
#include "elementwise.h"
#include "fabric.h"
#include "lse_merge.h"
#include "mla_expand.h"
#include "random_fill.h"
#include "rmsnorm.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace

MlaWeights::MlaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem, Format gemm) {
  const WeightFill fill{mem, stream};
  wfu = fill.proj("mla.wfu", m.mla_fused_width(), m.hidden, seed + 1, gemm);
  w_q_b = fill.proj("mla.w_q_b", m.heads * m.d_qk(), m.q_lora, seed + 2, gemm);
  w_kv_b = fill.weight("mla.w_kv_b", m.heads * (m.qk_nope + m.v_head), m.kv_lora, seed + 3);
  w_o = fill.proj("mla.w_o", m.hidden, m.heads * m.v_head, seed + 4, gemm);
  gain_in = fill.ones_f32("mla.gain_in", m.hidden);
  gain_q_a = fill.ones_f32("mla.gain_q_a", m.q_lora);
  gain_kv = fill.ones_f32("mla.gain_kv", m.kv_lora);
}

MlaBlockBuffers MlaBlockBuffers::take(DeviceMemory& mem, const ModelShape& m, const MlaLane& lane) {
  mem.begin_block("mla");
  const int64_t b = lane.rows, heads = m.heads, t = lane.segments.at(size_t(lane.rank)).len;
  const int64_t kv_width = m.kv_lora + m.qk_rope, q_width = heads * m.d_qk(), v_width = heads * m.v_head;
  const int64_t widest = std::max({m.mla_fused_width(), q_width, m.hidden});
  int64_t longest = 0;
  for (const Segment& seg : lane.segments) longest = std::max(longest, seg.len);
  MlaBlockBuffers k;
  // The projections' turn (partial_ again in the output's).
  k.normed_ = mem.take<bf16>("normed", b * m.hidden, Home::mixer);
  k.partial_ = mem.take<float>("partial", b * widest, Home::mixer);
  k.q_a_ = mem.take<bf16>("q_a", b * m.q_lora, Home::mixer);
  k.q_norm_ = mem.take<bf16>("q_norm", b * m.q_lora, Home::mixer);
  // The attention's turn: windows, merges, o_finalize.
  k.o_win_ = mem.take<bf16>("o_win", longest * v_width, Home::mixer);
  k.lse_win_ = mem.take<float>("lse_win", heads * longest, Home::mixer);
  const Schedule protocol = lane.layout == Layout::zigzag ? Schedule::zigzag : Schedule::stripe;
  const bool helps = lane.cp > 1 && !helped_windows_any(protocol_schedules(protocol), lane.cp, lane.rank).empty();
  if (helps && !lane.helped_in_place) k.staged_q_ = mem.take<bf16>("staged_q", longest * q_width, Home::mixer);
  if (lane.overlap) {
    k.o_held_ = mem.take<bf16>("o_held", t * v_width, Home::mixer);
    k.lse_held_ = mem.take<float>("lse_held", heads * t, Home::mixer);
  }
  k.o_acc_ = mem.take<float>("o_acc", t * v_width, Home::mixer);
  k.lse_acc_ = mem.take<float>("lse_acc", heads * t, Home::mixer);
  for (int i = 0; i < 2; ++i) {
    const int64_t tk = i == 0 ? t : longest;
    k.keys_[i] = mem.take<bf16>(i == 0 ? "keys_own" : "keys_peer", tk * q_width, Home::mixer);
    k.kvb_[i] = mem.take<bf16>(i == 0 ? "kv_b_own" : "kv_b_peer", tk * heads * (m.qk_nope + m.v_head), Home::mixer);
  }
  // The output's turn.
  k.gated_ = mem.take<bf16>("gated", b * v_width, Home::mixer);
  k.attn_out_ = mem.take<bf16>("attn_out", b * m.hidden, Home::mixer);
  k.normed_q_ = Fp8Act::take(mem, "normed", b, m.hidden, Home::mixer, lane.gemm);
  k.q_norm_q_ = Fp8Act::take(mem, "q_norm", b, m.q_lora, Home::mixer, lane.gemm);
  k.gated_q_ = Fp8Act::take(mem, "gated", b, v_width, Home::mixer, lane.gemm);
  // Across turns.
  k.gate_ = mem.take<bf16>("gate", b * v_width, Home::rank);
  k.attn_ = mem.take<bf16>("attention", b * v_width, Home::rank);
  if (lane.cp == 1) {  // at cp > 1 the window lies in the fabric's slab
    k.local_kv_ = mem.take<bf16>("window_kv", b * kv_width, Home::rank);
    k.local_q_ = mem.take<bf16>("window_q", b * q_width, Home::rank);
  }
  return k;
}

MlaBlock::MlaBlock(const ModelShape& m, const MlaWeights& w, const MlaLane& lane, FmhaEngine engine,
                   MlaBlockBuffers buffers)
    : MlaBlockBuffers(std::move(buffers)), m_(m), w_(w), lane_(lane), engine_(engine), b_(lane.rows) {
  PB_CHECK(lane_.cp >= 1 && lane_.rank >= 0 && lane_.rank < lane_.cp && int(lane_.segments.size()) == lane_.cp,
           "MlaBlock: the lane's rank, cp and segments disagree");
  PB_CHECK((lane_.cp == 1) == (lane_.fabric == nullptr), "MlaBlock: a fabric is needed exactly when cp > 1");
  for (const Segment& s : lane_.segments) PB_CHECK(s.len <= b_, "MlaBlock: a segment exceeds the bucket rows");
  // Rows T .. b of the attention are never written: zero them once.
  PB_CUDA(cudaMemset(attn_.get(), 0, attn_.bytes()));
  PB_CUDA(cudaDeviceSynchronize());  // the legacy stream's clear, before the block's own streams use attn_
  if (lane_.cp > 1) {
    const SlabLayout& L = lane_.fabric->layout();
    PB_CHECK(L.seg >= b_ && L.heads == m.heads && L.kv_rank == m.kv_lora && L.rope_dim == m.qk_rope &&
                 L.qk_dim == m.d_qk() && L.v_dim == m.v_head,
             "MlaBlock: the fabric's slab layout does not match the model and bucket");
  }
}

MlaBlock::~MlaBlock() = default;

MlaBlock::Window MlaBlock::own_window() const {
  if (lane_.cp == 1) return {local_kv_.get(), local_q_.get()};
  const SlabLayout& L = lane_.fabric->layout();
  return {static_cast<bf16*>(lane_.fabric->at(lane_.rank, L.kv)), static_cast<bf16*>(lane_.fabric->at(lane_.rank, L.q))};
}

Piece MlaBlock::keys_piece(int k, Parts parts) const {
  PB_CHECK(parts.begin == 0, "MlaBlock: keys are read from rank " + std::to_string(k) + "'s first row on");
  return {lane_.fabric->layout().kv, part_rows(lane_.segments[k].len, parts).len() * (m_.kv_lora + m_.qk_rope) * 2};
}

Piece MlaBlock::queries_piece(int q) const {
  return {lane_.fabric->layout().q, lane_.segments[q].len * m_.heads * m_.d_qk() * 2};
}

std::vector<Piece> MlaBlock::return_pieces(int slot, int64_t rows) const {
  const SlabLayout& L = lane_.fabric->layout();
  const int slab = return_slab(seq_);
  PB_CHECK(rows <= L.slot_rows(slot), "MlaBlock: " + std::to_string(rows) + " rows returned into slot " +
                                          std::to_string(slot) + ", which holds " + std::to_string(L.slot_rows(slot)));
  return {{L.o[slab][slot], rows * m_.heads * m_.v_head * 2}, {L.lse[slab][slot], m_.heads * rows * 4}};
}

std::vector<int64_t> MlaBlock::rows_of_ranks() const {
  std::vector<int64_t> rows;
  for (const Segment& seg : lane_.segments) rows.push_back(seg.len);
  return rows;
}

// What `reader` reads of this rank's window in this call: its keys when it
// expands them, its queries when it runs a window over them (a helped window:
// cut 3's, or balance's moved half).
std::vector<Piece> MlaBlock::window_pieces_for(int reader) const {
  std::vector<Piece> pieces;
  const RankAttention a = rank_attention(sched_, lane_.cp, reader);
  if (contains(a.key_segments, lane_.rank)) pieces.push_back(keys_piece(lane_.rank, key_parts(a, lane_.rank)));
  bool queries = false;
  for (const auto& step : a.steps) queries = queries || (!step.is_merge && step.window.q == lane_.rank);
  if (queries && reader != lane_.rank) pieces.push_back(queries_piece(lane_.rank));
  return pieces;
}

WaitLabel MlaBlock::label(const Timeline& tl, const std::string& what) const { return {int(tl.layer()), int(seq_), what}; }

void MlaBlock::run(const bf16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas) {
  project(mixed, seq, cuts, tl, blas);
  attend(tl, blas);
  finish(tl, blas);
}

void MlaBlock::finish(Timeline& tl, const Blas& blas) {
  const int64_t v_width = m_.heads * m_.v_head;
  cudaStream_t s = tl.stream();
  const bool fp8 = lane_.gemm == Format::fp8;
  if (fp8 && cuts_[Cut::quant_fuse]) {  // the gated rows feed only the output projection
    tl.launch("elementwise", "mul_sigmoid", [&] {
      mul_sigmoid_fp8(attn_.get(), gate_.get(), nullptr, gated_q_.codes.get(), gated_q_.scales.get(),
                      gated_q_.layout, b_, v_width, s);
    });
  } else {
    tl.launch("elementwise", "mul_sigmoid", [&] {
      mul_sigmoid(elementwise_variant(cuts_), attn_.get(), gate_.get(), gated_.get(), b_ * v_width, s);
    });
    if (fp8) quant_act(tl, "mla_o", gated_.get(), b_, v_width, gated_q_);
  }
  gemm_land(tl, blas, land_variant(cuts_), "mla_o", gated_.get(), gated_q_, w_.w_o, partial_.get(), attn_out_.get(),
            b_, m_.hidden, v_width);
}

void MlaBlock::project(const bf16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl, const Blas& blas) {
  PB_CHECK(seq >= 0, "MlaBlock: negative sequence number");
  PB_CHECK(!cuts[Cut::overlap] || lane_.overlap,
           "MlaBlock: cut overlap is on but the lane was built without it (MlaLane::overlap takes the held window)");
  seq_ = seq;
  cuts_ = cuts;
  sched_ = attention_schedule(cuts, lane_.layout, lane_.cp);
  const Variant land_v = land_variant(cuts);
  cudaStream_t s = tl.stream();
  const int64_t fused = m_.mla_fused_width(), kv_width = m_.kv_lora + m_.qk_rope;
  const int64_t v_width = m_.heads * m_.v_head, q_width = m_.heads * m_.d_qk();
  const float eps = float(m_.rms_eps);
  const Window own = own_window();
  const bool fp8 = lane_.gemm == Format::fp8, fuse = fp8 && cuts[Cut::quant_fuse];
  // An RMSNorm whose rows feed only a projection: bf16, quantized after
  // (quant.<what>) in fp8; under quant_fuse fp8 straight from the norm.
  const auto norm = [&](const char* what, const bf16* x, const float* gain, bf16* out, Fp8Act& q, int64_t n) {
    if (fuse) {
      tl.launch("rmsnorm", std::string("rmsnorm.") + what, [&] {
        rmsnorm_fp8(x, gain, nullptr, q.codes.get(), q.scales.get(), q.layout, {b_, n}, eps, s);
      });
      return;
    }
    tl.launch("rmsnorm", std::string("rmsnorm.") + what, [&] { rmsnorm(x, gain, out, {b_, n}, eps, s); });
    if (fp8) quant_act(tl, what, out, b_, n, q);
  };
  norm("mla_in", mixed, w_.gain_in.get(), normed_.get(), normed_q_, m_.hidden);
  tl.launch("gemm", "gemm.wfu", [&] {
    proj_gemm(blas, w_.wfu, 0, normed_.get(), normed_q_, partial_.get(), {b_, fused, m_.hidden}, s);
  });
  land_band(tl, land_v, "q_a", partial_.get(), q_a_.get(), b_, fused, 0, m_.q_lora);
  norm("q_a", q_a_.get(), w_.gain_q_a.get(), q_norm_.get(), q_norm_q_, m_.q_lora);
  // The window is about to be overwritten: wait until the last call's readers
  // are done with it (at seq 0 the wait passes at once). Readers under any
  // schedule of the protocol: the last call may have used another.
  const std::vector<int> readers = window_readers_any(protocol_schedules(sched_), lane_.cp, lane_.rank);
  const auto land_gate = [&] {
    land_band(tl, land_v, "mla_gate", partial_.get(), gate_.get(), b_, fused, m_.q_lora + kv_width, v_width);
  };
  if (cuts[Cut::overlap]) land_gate();
  if (!readers.empty())
    tl.launch("fabric", "fabric.wait_released", [&] {
      for (int r : readers)
        lane_.fabric->await_free(r, Bell::released, doorbell_value_done(seq_, 1), tl,
                                 label(tl, "rank " + std::to_string(r) + " to release this rank's window"));
    });
  land_band(tl, land_v, "kv_a", partial_.get(), own.kv, b_, fused, m_.q_lora, kv_width);
  if (!cuts[Cut::overlap]) land_gate();
  tl.launch("rmsnorm", "rmsnorm.kv_latent", [&] {
    rmsnorm(own.kv, w_.gain_kv.get(), own.kv, {b_, m_.kv_lora, kv_width, kv_width}, eps, s);
  });
  gemm_land(tl, blas, land_v, "q_b", q_norm_.get(), q_norm_q_, w_.w_q_b, partial_.get(), own.q, b_, q_width,
            m_.q_lora);
  if (!readers.empty())
    tl.launch("fabric", "fabric.publish_window", [&] {
      for (int r : readers)
        lane_.fabric->publish(r, Bell::window, doorbell_value(seq_, 0), window_pieces_for(r), tl,
                              label(tl, "the window for rank " + std::to_string(r)));
    });
}

// Over NCCL, everything this call receives is posted before the first window,
// so the transfers run under the compute (fabric.h expect()).
void MlaBlock::expect_arrivals(const RankAttention& a, Timeline& tl) {
  cudaStream_t s = tl.stream();
  const int me = lane_.rank;
  for (const auto& step : a.steps) {
    if (step.is_merge) {
      if (step.merge.slot >= 0)
        lane_.fabric->expect(step.merge.k, Bell::returned, doorbell_value(seq_, step.merge.slot),
                             return_pieces(step.merge.slot, part_rows(live_rows(), step.merge.rows).len()), tl,
                             label(tl, "a return"));
      continue;
    }
    const FmhaWindow& w = step.window;
    if (w.k != me && w.q == me)
      lane_.fabric->expect(w.k, Bell::window, doorbell_value(seq_, 0), {keys_piece(w.k, key_parts(a, w.k))}, tl,
                           label(tl, "keys"));
    if (w.q != me)
      lane_.fabric->expect(w.q, Bell::window, doorbell_value(seq_, 0), {queries_piece(w.q)}, tl, label(tl, "queries"));
  }
}

void MlaBlock::attend(Timeline& tl, const Blas& blas) {
  const Variant merge_v = cut_variant(cuts_, Cut::lse_merge);
  attention_ = launch_attention(cuts_, lane_.layout, lane_.cp, lane_.rank);
  const RankAttention& a = attention_;
  if (lane_.cp > 1) expect_arrivals(rank_attention(sched_, lane_.cp, lane_.rank), tl);
  expanded_.assign(lane_.cp, -1);
  for (const auto& step : a.steps) {
    if (step.is_merge) {
      merge(step.merge, merge_v, tl);
      continue;
    }
    if (expanded_[step.window.k] < 0) expand_keys(step.window.k, tl, blas);
    run_window(step.window, tl);
  }
  // Every window this rank may read under any schedule of the protocol is
  // released, read or not. And every return slot this rank is helped into
  // under the protocol but did not merge this call is acknowledged too
  // (nothing was written there): a helper's wait for "consumed, call seq - 2"
  // must hold whichever schedule that call ran, else e.g. the first stripe
  // call after two prefix calls would wait forever.
  const std::vector<Schedule> protocol = protocol_schedules(sched_);
  const std::vector<int> read = windows_read_any(protocol, lane_.cp, lane_.rank);
  const std::vector<int> unmerged = unmerged_helpers(protocol, sched_, lane_.cp, lane_.rank);
  PB_CHECK(unmerged.empty() || !read.empty(), "MlaBlock: a helped rank that reads no window");
  if (!read.empty())
    tl.launch("fabric", "fabric.release_window", [&] {
      for (int k : read) lane_.fabric->release(k, Bell::released, doorbell_value(seq_, 0), tl);
      for (int k : unmerged) lane_.fabric->release(k, Bell::consumed, doorbell_value(seq_, 0), tl);
    });
  const int64_t v_width = m_.heads * m_.v_head, t = live_rows();
  tl.launch("o_finalize", "o_finalize", [&] { o_finalize(o_acc_.get(), attn_.get(), t * v_width, tl.stream()); });
}

// kv_b on segment k's latents (read in place from k's window over IPC, from
// this rank's copy over NCCL), bf16 out, then K: the rows this call's windows
// read (key_parts, from row 0).
void MlaBlock::expand_keys(int k, Timeline& tl, const Blas& blas) {
  cudaStream_t s = tl.stream();
  const Parts parts = key_parts(attention_, k);
  const int64_t tk = part_rows(lane_.segments[k].len, parts).len(), kv_width = m_.kv_lora + m_.qk_rope;
  const int64_t kvb_width = m_.heads * (m_.qk_nope + m_.v_head);
  const bf16* kv = own_window().kv;
  const int i = k == lane_.rank ? 0 : 1;
  for (int& e : expanded_)
    if (e == i) e = -1;  // the foreign buffer now holds segment k only
  expanded_[k] = i;
  if (k != lane_.rank)
    tl.launch("fabric", "fabric.wait_window", [&] {
      kv = static_cast<const bf16*>(lane_.fabric->fetch(k, Bell::window, doorbell_value(seq_, 0),
                                                        {keys_piece(k, parts)}, tl,
                                                        label(tl, "the window of rank " + std::to_string(k)))[0]);
    });
  tl.launch("gemm", "gemm.kv_b", [&] {
    gemm_bf16out(blas, kv, w_.w_kv_b.get(), kvb_[i].get(), {tk, kvb_width, m_.kv_lora, kv_width, 0, 0}, s);
  });
  tl.launch("mla", "mla.expand_k", [&] {
    expand_k(kvb_[i].get(), kv + m_.kv_lora, keys_[i].get(),
             {tk, int(m_.heads), int(m_.qk_nope), int(m_.qk_rope), int(m_.v_head), kvb_width, kv_width}, s);
  });
}

// One FMHA window over the rows window_shape gives (schedule.h): the query
// rows of rank q, the key rows of rank k. Local windows land in o_win_/lse_win_
// (a held one in o_held_/lse_held_), compact ([tq, H, dv], [H, tq]). A helped
// window (cut 3's, or balance's moved half) reads the owner's queries at its rows (over IPC in place, or staged
// into this rank's memory; over NCCL from this rank's copy) and its (o, lse)
// goes to the owner's return slot, compact as well: written there in place,
// copied there from o_win_, or written into this rank's outbox and sent.
void MlaBlock::run_window(const FmhaWindow& w, Timeline& tl) {
  cudaStream_t s = tl.stream();
  const int me = lane_.rank;
  const bool helped = w.q != me;
  const WindowShape rows = window_shape(w, rows_of_ranks());
  const int64_t tq = rows.tq(), tk = rows.tk();
  const int64_t heads = m_.heads, d_qk = m_.d_qk(), q_width = heads * d_qk, kvb_width = heads * (m_.qk_nope + m_.v_head);
  const int slab = return_slab(seq_);
  const int i = expanded_[w.k];
  PB_CHECK(i >= 0, "MlaBlock: a window over keys not expanded in this call");
  PB_CHECK(!w.held || (!helped && o_held_.get()), "MlaBlock: a held window must be local, with the held buffers");
  FmhaTensors t{};
  t.q = own_window().q + rows.q_rows.begin * q_width;
  t.q_token_stride = q_width;
  t.q_head_stride = d_qk;
  t.k = keys_[i].get() + rows.k_rows.begin * q_width;
  t.k_token_stride = q_width;
  t.k_head_stride = d_qk;
  t.v = kvb_[i].get() + rows.k_rows.begin * kvb_width + m_.qk_nope;
  t.v_token_stride = kvb_width;
  t.v_head_stride = m_.qk_nope + m_.v_head;
  t.o = w.held ? o_held_.get() : o_win_.get();
  t.lse = w.held ? lse_held_.get() : lse_win_.get();
  const SlabLayout* L = lane_.cp > 1 ? &lane_.fabric->layout() : nullptr;
  if (helped) {
    PB_CHECK(tq <= L->slot_rows(w.slot), "MlaBlock: a helped window's rows exceed its return slot");
    // The in-place IPC form and NCCL write the FMHA's output where deliver() finds it.
    if (lane_.helped_in_place || lane_.fabric->transport(w.q) == Transport::nccl) {
      t.o = static_cast<bf16*>(lane_.fabric->delivery_buffer(w.q, L->o[slab][w.slot]));
      t.lse = static_cast<float*>(lane_.fabric->delivery_buffer(w.q, L->lse[slab][w.slot]));
    }
    tl.launch("fabric", "fabric.wait_queries", [&] {
      const bf16* owner_q = static_cast<const bf16*>(
          lane_.fabric->fetch(w.q, Bell::window, doorbell_value(seq_, 0), {queries_piece(w.q)}, tl,
                              label(tl, "the queries of rank " + std::to_string(w.q)))[0]);
      t.q = owner_q + rows.q_rows.begin * q_width;
      if (seq_ >= 2)  // the owner merged what this slot held two calls ago (same slab)
        lane_.fabric->await_free(w.q, Bell::consumed, doorbell_value_done(seq_, 2), tl,
                                 label(tl, "rank " + std::to_string(w.q) + " to consume return slot " +
                                               std::to_string(w.slot)));
    });
    // The work apart from the wait, so a projection keeps its time: over IPC the
    // owner's queries are copied into this rank's memory (the window runs on
    // local memory); over NCCL the wait's receive brought them, and the span is empty.
    if (!lane_.helped_in_place)
      tl.launch("fabric", "fabric.stage_queries", [&] {
        if (lane_.fabric->transport(w.q) != Transport::ipc) return;
        PB_CUDA(cudaMemcpyAsync(staged_q_.get(), t.q, size_t(tq * q_width) * 2, cudaMemcpyDeviceToDevice, s));
        t.q = staged_q_.get();
      });
  }
  FmhaShape shape;
  shape.tq = tq;
  shape.tk = tk;
  shape.heads = int(heads);
  shape.d_qk = int(d_qk);
  shape.d_v = int(m_.v_head);
  shape.causal = w.causal;
  shape.scale = __bfloat162float(__float2bfloat16_rn(float(1.0 / std::sqrt(double(d_qk)))));
  tl.launch("fmha", w.causal ? "fmha.causal" : helped ? "fmha.helped" : "fmha.dense", [&] { fmha(engine_, t, shape, s); });
  if (helped)
    tl.launch("fabric", "fabric.publish_return", [&] {
      lane_.fabric->deliver(w.q, Bell::returned, doorbell_value(seq_, w.slot),
                            {{t.o, L->o[slab][w.slot], tq * heads * m_.v_head * 2},
                             {t.lse, L->lse[slab][w.slot], heads * tq * 4}},
                            tl, label(tl, "the return for rank " + std::to_string(w.q)));
    });
}

// One lse_merge into the accumulator rows of step.rows (schedule.h), from this
// rank's own window (o_win_, lse_win_; o_held_, lse_held_ when held) or a
// helper's return slot, both compact over those rows.
void MlaBlock::merge(const MergeStep& step, Variant v, Timeline& tl) {
  cudaStream_t s = tl.stream();
  const int64_t t = live_rows();
  const RowRange rows = part_rows(t, step.rows);
  const int heads = int(m_.heads);
  const bf16* o = step.held ? o_held_.get() : o_win_.get();
  const float* lse = step.held ? lse_held_.get() : lse_win_.get();
  if (step.slot >= 0)
    tl.launch("fabric", "fabric.wait_return", [&] {
      const std::vector<const void*> at =
          lane_.fabric->fetch(step.k, Bell::returned, doorbell_value(seq_, step.slot),
                              return_pieces(step.slot, rows.len()), tl,
                              label(tl, "rank " + std::to_string(step.k) + "'s return into slot " +
                                            std::to_string(step.slot)));
      o = static_cast<const bf16*>(at[0]);
      lse = static_cast<const float*>(at[1]);
    });
  tl.launch("lse_merge", "lse_merge", [&] {
    lse_merge(v, o, lse, o_acc_.get(), lse_acc_.get(), MergeRows{rows.len(), rows.begin, t}, heads, step.reset, s);
  });
  if (step.slot >= 0)
    tl.launch("fabric", "fabric.release_return",
              [&] { lane_.fabric->release(step.k, Bell::consumed, doorbell_value(seq_, 0), tl); });
}

}  // namespace pb
