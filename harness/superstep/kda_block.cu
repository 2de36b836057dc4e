#include "kda_block.h"

#include <cuda_runtime.h>

#include <algorithm>
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

KdaWeights::KdaWeights(const ModelShape& m, uint64_t seed, cudaStream_t stream, DeviceMemory& mem, Format gemm) {
  PB_CHECK(m.kda_heads + m.f_rank <= kSmallWidth, "KDA: kda_heads + f_rank must fit the 256-wide small projection");
  const WeightFill fill{mem, stream};
  wbig = fill.proj("kda.wbig", 4 * m.kda_inner(), m.hidden, seed + 11, gemm);
  wsm = fill.proj("kda.wsm", kSmallWidth, m.hidden, seed + 12, gemm);
  w_f_b = fill.proj("kda.w_f_b", m.kda_inner(), m.f_rank, seed + 13, gemm);
  w_o = fill.proj("kda.w_o", m.hidden, m.kda_inner(), seed + 14, gemm);
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
  const std::vector<KdaPiece> pieces = kda_pieces(lane.layout, lane.cp, lane.rank);
  const int64_t n_pieces = int64_t(pieces.size());
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
  k.normed_q_ = Fp8Act::take(mem, "normed", b, h, Home::mixer, lane.gemm);
  k.f_a_q_ = Fp8Act::take(mem, "f_a", b, m.f_rank, Home::mixer, lane.gemm);
  k.halo_q_ = Fp8Act::take(mem, "halo", 4, h, Home::mixer, lane.gemm);
  k.gated_q_ = Fp8Act::take(mem, "gated", b, inner, Home::mixer, lane.gemm);
  // The walk's turn, and the output's.
  k.s_in_ = mem.take<float>("s_in", n_pieces * heads * d * d, Home::mixer);
  k.fold_scratch_ = mem.take<float>("fold_scratch", heads * d * d, Home::mixer);
  k.gated_ = mem.take<bf16>("gated", b * inner, Home::mixer);
  k.o_partial_ = mem.take<float>("o_partial", b * h, Home::mixer);
  k.attn_out_ = mem.take<bf16>("attn_out", b * h, Home::mixer);
  // Across turns: out_gate (projections -> output), the core's output (walk ->
  // output; rows >= T zeroed once), the conv carries (zeros on rank 0) and sinks.
  k.out_gate_ = mem.take<bf16>("out_gate", b * inner, Home::rank);
  k.core_ = mem.take<bf16>("core", b * inner, Home::rank);
  k.carry_ = mem.take<bf16>("carry", n_pieces * 3 * 4 * inner, Home::rank);  // [piece][stream][4 rows][inner]
  for (int i = 0; i < 3; ++i) k.next_[i] = mem.take<bf16>(std::string("next_") + kStreams[i], 3 * inner, Home::rank);
  int64_t prepared = 0;  // kda_prepare -> the walks, per piece
  for (const KdaPiece& piece : pieces)
    prepared += int64_t(KdaWorkspace::bytes_for(part_rows(t, piece.parts).len(), int(heads)));
  mem.note("prepared_chunks", prepared);
  return k;
}

KdaBlock::KdaBlock(const ModelShape& m, const KdaWeights& w, const KdaLane& lane, KdaBlockBuffers buffers)
    : KdaBlockBuffers(std::move(buffers)), m_(m), w_(w), lane_(lane), b_(lane.rows), inner_(m.kda_inner()),
      pieces_(kda_pieces(lane.layout, lane.cp, lane.rank)) {
  PB_CHECK(lane_.cp >= 1 && lane_.rank >= 0 && lane_.rank < lane_.cp && int(lane_.segments.size()) == lane_.cp,
           "KdaBlock: the lane's rank, cp and segments disagree");
  PB_CHECK((lane_.cp == 1) == (lane_.fabric == nullptr), "KdaBlock: a fabric is needed exactly when cp > 1");
  PB_CHECK(m.kda_head_dim == kKdaHeadDim, "KdaBlock: the KDA core needs head_dim 128");
  for (const Segment& s : lane_.segments)
    PB_CHECK(s.len <= b_ && (lane_.cp == 1 || s.len >= 3), "KdaBlock: segments must fit the bucket and hold >= 3 tokens");
  if (lane_.fabric) PB_CHECK(lane_.fabric->layout().hidden == m.hidden && lane_.fabric->layout().kda_heads == m.kda_heads,
                             "KdaBlock: the fabric's slab has no KDA regions for this model (model_slab_layout)");
  if (lane_.fabric)
    PB_CHECK(lane_.fabric->layout().layout == lane_.layout && lane_.fabric->layout().kda_slots >= int(pieces_.size()),
             std::string("KdaBlock: the fabric's slab is not laid out for layout ") + layout_name(lane_.layout));
  for (const KdaPiece& piece : pieces_) {
    piece_rows_.push_back(part_rows(live_rows(), piece.parts));
    PB_CHECK(lane_.cp == 1 || piece_rows_.back().len() >= 3, "KdaBlock: every piece must hold >= 3 tokens");
    PB_CHECK(piece.halo.rank != lane_.rank, "KdaBlock: a piece's carry from the same rank (kda_pieces joins them)");
    ws_.emplace_back(piece_rows_.back().len(), int(m.kda_heads));
  }
  PB_CUDA(cudaMemset(carry_.get(), 0, carry_.bytes()));  // carries at the sequence start: zeros
  PB_CUDA(cudaMemset(core_.get(), 0, core_.bytes()));    // rows >= T stay zero
  // The halo slots' padding row stays zero. Only that row: over IPC the
  // upstream rank may deliver call 0's rows as soon as the fabric is up, before
  // this constructor runs (no collective between them), and clearing them here
  // would erase them after their doorbell has rung.
  if (lane_.fabric) {
    const SlabLayout& L = lane_.fabric->layout();
    const int64_t row_bytes = m.hidden * int64_t(sizeof(bf16)), rows_bytes = kHaloRows * row_bytes;
    for (int p = 0; p < 2; ++p)
      for (int piece = 0; piece < L.kda_slots; ++piece) {
        const Region at = L.halo_slot(p, piece);
        PB_CHECK(at.bytes == rows_bytes + row_bytes,
                 "KdaBlock: a halo slot must hold the delivered rows and one padding row (slab_layout_with_kda)");
        char* slot = static_cast<char*>(lane_.fabric->at(lane_.rank, at));
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
  const bool overlap = cuts[Cut::overlap];
  const bool fp8 = lane_.gemm == Format::fp8;
  if (fp8 && cuts[Cut::quant_fuse]) {  // the normed rows stay bf16 too: the halo publishes them
    tl.launch("rmsnorm", "rmsnorm.kda_in", [&] {
      rmsnorm_fp8(mixed, w_.gain_in.get(), normed_.get(), normed_q_.codes.get(), normed_q_.scales.get(),
                  normed_q_.layout, {b_, h}, float(m_.rms_eps), s);
    });
  } else {
    tl.launch("rmsnorm", "rmsnorm.kda_in",
              [&] { rmsnorm(mixed, w_.gain_in.get(), normed_.get(), {b_, h}, float(m_.rms_eps), s); });
    if (fp8) quant_act(tl, "kda_in", normed_.get(), b_, h, normed_q_);
  }
  if (overlap) publish_halos(tl);
  tl.launch("gemm", "gemm.kda_g", [&] {
    proj_gemm(blas, w_.wbig, 3 * inner_, normed_.get(), normed_q_, partial_.get() + 3 * inner_,
              {b_, inner_, h, h, 0, wide}, s);
  });
  tl.launch("gemm", "gemm.kda_small",
            [&] { proj_gemm(blas, w_.wsm, 0, normed_.get(), normed_q_, small_partial_.get(), {b_, kSmallWidth, h}, s); });
  bf16* beta = small_.get();
  bf16* f_a = small_.get() + b_ * heads;
  land_band(tl, land_v, "beta", small_partial_.get(), beta, b_, kSmallWidth, 0, heads);
  land_band(tl, land_v, "f_a", small_partial_.get(), f_a, b_, kSmallWidth, heads, m_.f_rank);
  land_band(tl, land_v, "out_gate", partial_.get(), out_gate_.get(), b_, wide, 3 * inner_, inner_);
  if (fp8) quant_act(tl, "f_a", f_a, b_, m_.f_rank, f_a_q_);
  tl.launch("gemm", "gemm.kda_f_b", [&] {
    proj_gemm(blas, w_.w_f_b, 0, f_a, f_a_q_, forget_partial_.get(), {b_, inner_, m_.f_rank}, s);
  });
  const auto stream_gemm = [&](int i) {
    tl.launch("gemm", std::string("gemm.kda_") + kStreams[i], [&] {
      proj_gemm(blas, w_.wbig, i * inner_, normed_.get(), normed_q_, partial_.get() + i * inner_,
                {b_, inner_, h, h, 0, wide}, s);
    });
  };
  const auto convs = [&](int i) {
    for (size_t piece = 0; piece < pieces_.size(); ++piece) conv_piece(i, piece, tl);
  };
  if (!overlap) {
    publish_halos(tl);
    receive_halos(tl, blas);
    for (int i = 0; i < 3; ++i) {
      stream_gemm(i);
      convs(i);
    }
    land_band(tl, land_v, "forget", forget_partial_.get(), forget_.get(), b_, inner_, 0, inner_);
  } else {  // cut 8: all that needs no halo before the wait for it (kda_block.h)
    for (int i = 0; i < 3; ++i) stream_gemm(i);
    land_band(tl, land_v, "forget", forget_partial_.get(), forget_.get(), b_, inner_, 0, inner_);
    receive_halos(tl, blas);
    for (int i = 0; i < 3; ++i) convs(i);
  }
  for (size_t piece = 0; piece < pieces_.size(); ++piece) prepare_piece(piece, tl);
}

// kda_prepare over a piece's rows into its workspace.
void KdaBlock::prepare_piece(size_t piece, Timeline& tl) {
  const int64_t heads = m_.kda_heads, begin = piece_rows_[piece].begin;
  tl.launch("kda", "kda.prepare", [&] {
    KdaInputs in;
    in.q = qkv_[0].get() + begin * inner_;
    in.k = qkv_[1].get() + begin * inner_;
    in.v = qkv_[2].get() + begin * inner_;
    in.g = forget_.get() + begin * inner_;
    in.beta_pre = small_.get() + begin * heads;  // beta [b, heads]
    in.q_ld = in.k_ld = in.v_ld = in.g_ld = inner_;
    in.beta_ld = heads;
    in.A_log = w_.A_log.get();
    in.dt_bias = w_.dt_bias.get();
    kda_prepare(in, piece_rows_[piece].len(), int(heads), ws_[piece], tl.stream());
  });
}

// Each piece sends its last 3 normed rows to the rank of the piece after it
// (into that piece's halo slot).
void KdaBlock::publish_halos(Timeline& tl) {
  if (lane_.cp == 1) return;
  const int par = kda_parity(seq_);
  const int64_t h = m_.hidden, rows_bytes = kHaloRows * h * 2;
  const SlabLayout& L = lane_.fabric->layout();
  for (size_t piece = 0; piece < pieces_.size(); ++piece)
    for (int r : pieces_[piece].halo_readers) {
      int slot = -1;  // the reader's piece after this one
      const std::vector<KdaPiece> theirs = kda_pieces(lane_.layout, lane_.cp, r);
      for (const KdaPiece& p : theirs)
        if (p.halo == pieces_[piece].self) slot = p.self.piece;
      PB_CHECK(slot >= 0, "KdaBlock: rank " + std::to_string(r) + " reads no halo of this rank's piece");
      tl.launch("fabric", "fabric.wait_halo_free", [&] {
        lane_.fabric->await_free(r, Bell::halo_read, doorbell_value_done(seq_, 2), tl,
                                 label(tl, "rank " + std::to_string(r) + " to free its halo slot"));
      });
      tl.launch("fabric", "fabric.publish_halo", [&] {
        lane_.fabric->deliver(r, Bell::halo, doorbell_value(seq_, 0),
                              {{normed_.get() + (piece_rows_[piece].end - kHaloRows) * h, L.halo_slot(par, slot),
                                rows_bytes}},
                              tl, label(tl, "the halo rows for rank " + std::to_string(r)));
      });
    }
}

// Each piece whose carry lives on a peer projects the rows it received
// through the q/k/v bands into its carry.
void KdaBlock::receive_halos(Timeline& tl, const Blas& blas) {
  if (lane_.cp == 1) return;
  cudaStream_t s = tl.stream();
  const int par = kda_parity(seq_);
  const int64_t h = m_.hidden, rows_bytes = kHaloRows * h * 2;
  const SlabLayout& L = lane_.fabric->layout();
  for (size_t piece = 0; piece < pieces_.size(); ++piece) {
    const int from = pieces_[piece].halo.rank;
    if (from < 0) continue;  // the sequence start: the carry stays zero
    const bf16* rows = nullptr;  // 4 rows: the upstream piece's last kHaloRows, then the zero padding row
    tl.launch("fabric", "fabric.wait_halo", [&] {
      rows = static_cast<const bf16*>(
          lane_.fabric->fetch(from, Bell::halo, doorbell_value(seq_, 0), {{L.halo_slot(par, int(piece)), rows_bytes}},
                              tl, label(tl, "the halo rows of rank " + std::to_string(from)))[0]);
    });
    if (lane_.gemm == Format::fp8) quant_act(tl, "halo", rows, 4, h, halo_q_);
    tl.launch("gemm", "gemm.halo_qkv",
              [&] { proj_gemm(blas, w_.wbig, 0, rows, halo_q_, halo_partial_.get(), {4, 3 * inner_, h}, s); });
    bf16* carry = carry_.get() + int64_t(piece) * 3 * 4 * inner_;
    for (int i = 0; i < 3; ++i)
      land_band(tl, land_variant(cuts_), std::string("halo_") + kStreams[i], halo_partial_.get(),
                carry + i * 4 * inner_, 4, 3 * inner_, i * inner_, inner_);
    tl.launch("fabric", "fabric.release_halo",
              [&] { lane_.fabric->release(from, Bell::halo_read, doorbell_value(seq_, 0), tl); });
  }
}

// Cut 2: one fused launch, or the retired path launch by launch; over one
// piece's rows, from its carry.
void KdaBlock::conv_piece(int i, size_t piece, Timeline& tl) {
  cudaStream_t s = tl.stream();
  const RowRange rows = piece_rows_[piece];
  const ConvShape shape{rows.len(), inner_, 4 * inner_, rows.len()};
  const float* p = partial_.get() + rows.begin * 4 * inner_ + i * inner_;
  const float* taps = w_.conv_taps.get() + i * 4 * inner_;
  const bf16* carry = carry_.get() + (int64_t(piece) * 3 + i) * 4 * inner_;
  bf16* y = qkv_[i].get() + rows.begin * inner_;
  const std::string stream = kStreams[i];
  if (cuts_[Cut::conv]) {
    tl.launch("conv", "conv.chunk_" + stream,
              [&] { conv_silu_chunk_cut(p, taps, carry, y, next_[i].get(), shape, s); });
    return;
  }
  const ConvStep step = [&](const char* name, const std::function<void()>& work) {
    const std::string n = name;
    const bool per_stream = n == "land" || n == "decode";
    tl.launch("conv", "conv." + n + (per_stream ? "_" + stream : ""), work);
  };
  conv_silu_chunk_baseline(p, taps, carry, y, next_[i].get(), shape,
                           conv_baseline_scratch_from(conv_scratch_.get(), shape), land_variant(cuts_), s, &step);
}

std::vector<Piece> KdaBlock::package_pieces(int piece) const {
  const SlabLayout& L = lane_.fabric->layout();
  const int par = kda_parity(seq_);
  const Region M = L.M_slot(par, piece), D = L.D_slot(par, piece);
  return {{M, M.bytes}, {D, D.bytes}};
}

float* KdaBlock::s_in(size_t piece) const {
  return s_in_.get() + int64_t(piece) * m_.kda_heads * m_.kda_head_dim * m_.kda_head_dim;
}

std::vector<int> KdaBlock::last_fold_of_rank() const {
  std::vector<int> last(size_t(lane_.cp), -1);
  size_t folded = 0;  // a piece's fold reads only the packages past the previous piece's
  for (size_t piece = 0; piece < pieces_.size(); ++piece) {
    const std::vector<PieceRef>& fold = pieces_[piece].fold;
    for (size_t i = folded; i < fold.size(); ++i)
      if (fold[i].rank != lane_.rank) last[size_t(fold[i].rank)] = int(piece);
    folded = fold.size();
  }
  return last;
}

// A piece's package into its slots of this rank's slab, once the readers of
// call seq - 2 are done with them, then rung to the ranks that fold it.
void KdaBlock::package_piece(size_t piece, Timeline& tl) {
  const KdaPiece& p = pieces_[piece];
  PB_CHECK(lane_.fabric, "KdaBlock: a package needs the fabric's slab");
  const std::vector<Piece> slots = package_pieces(p.self.piece);
  if (!p.package_readers.empty())
    tl.launch("fabric", "fabric.wait_state_free", [&] {
      for (int r : p.package_readers)
        lane_.fabric->await_free(r, Bell::state_read, doorbell_value_done(seq_, 2), tl,
                                 label(tl, "rank " + std::to_string(r) + " to fold this rank's package"));
    });
  tl.launch("kda", "kda.package", [&] {
    kda_package(ws_[piece], piece_rows_[piece].len(),
                static_cast<float*>(lane_.fabric->at(lane_.rank, slots[0].region)),
                static_cast<float*>(lane_.fabric->at(lane_.rank, slots[1].region)), tl.stream(), kKdaPackageWalk);
  });
  if (!p.package_readers.empty())
    tl.launch("fabric", "fabric.publish_state", [&] {
      for (int r : p.package_readers)
        lane_.fabric->publish(r, Bell::state, doorbell_value(seq_, p.self.piece), slots, tl,
                              label(tl, "this rank's package for rank " + std::to_string(r)));
    });
}

// S_in of a piece: the packages of its fold list past the previous piece's
// (that piece's S_in first, when it has one), folded in order; foreign ones
// waited for, read (in place, or this rank's copy) and, after the last fold
// that reads their rank, acknowledged.
const float* KdaBlock::fold_piece(size_t piece, Timeline& tl, const Blas& blas) {
  const std::vector<PieceRef>& fold = pieces_[piece].fold;
  const std::vector<PieceRef> none;
  const std::vector<PieceRef>& earlier = piece == 0 ? none : pieces_[piece - 1].fold;
  const size_t folded = earlier.size();
  PB_CHECK(fold.size() >= folded && std::equal(earlier.begin(), earlier.end(), fold.begin()),
           "KdaBlock: a later piece's fold does not extend the earlier one's");
  const float* before = folded > 0 ? s_in(piece - 1) : nullptr;
  if (fold.size() == folded) return before;
  // The fold's operands: the earlier S_in first (as D; its M is not read), then the new packages.
  const size_t first = before ? 1 : 0, n = first + fold.size() - folded;
  std::vector<const float*> M(n, nullptr), D(n, nullptr);
  if (before) D[0] = before;
  std::vector<int> foreign;  // the peers read here, each once
  for (size_t i = folded; i < fold.size(); ++i) {
    const PieceRef& f = fold[i];
    if (f.rank != lane_.rank) {
      if (std::find(foreign.begin(), foreign.end(), f.rank) == foreign.end()) foreign.push_back(f.rank);
      continue;
    }
    const std::vector<Piece> slots = package_pieces(f.piece);  // this rank's own package, in its slab
    M[first + i - folded] = static_cast<const float*>(lane_.fabric->at(lane_.rank, slots[0].region));
    D[first + i - folded] = static_cast<const float*>(lane_.fabric->at(lane_.rank, slots[1].region));
  }
  if (!foreign.empty())
    tl.launch("fabric", "fabric.wait_state", [&] {
      for (size_t i = folded; i < fold.size(); ++i) {
        const PieceRef& f = fold[i];
        if (f.rank == lane_.rank) continue;
        const std::vector<const void*> at =
            lane_.fabric->fetch(f.rank, Bell::state, doorbell_value(seq_, f.piece), package_pieces(f.piece), tl,
                                label(tl, "the state package of rank " + std::to_string(f.rank) + "'s piece " +
                                              std::to_string(f.piece)));
        M[first + i - folded] = static_cast<const float*>(at[0]);
        D[first + i - folded] = static_cast<const float*>(at[1]);
      }
    });
  float* out = s_in(piece);
  tl.launch("kda", "kda.fold", [&] {
    kda_fold(blas, M.data(), D.data(), int(M.size()), int(m_.kda_heads), out, fold_scratch_.get(), tl.stream());
  });
  if (!foreign.empty()) {
    const std::vector<int> last = last_fold_of_rank();
    tl.launch("fabric", "fabric.release_state", [&] {
      for (int j : foreign)
        if (last[size_t(j)] == int(piece)) lane_.fabric->release(j, Bell::state_read, doorbell_value(seq_, 0), tl);
    });
  }
  return out;
}

void KdaBlock::recur(Timeline& tl, const Blas& blas) {
  for (size_t piece = 0; piece < pieces_.size(); ++piece)
    if (pieces_[piece].package) package_piece(piece, tl);
  for (size_t piece = 0; piece < pieces_.size(); ++piece) {
    const float* S_in = fold_piece(piece, tl, blas);
    tl.launch("kda", "kda.forward", [&] {
      kda_forward_state(ws_[piece], piece_rows_[piece].len(), S_in, core_.get() + piece_rows_[piece].begin * inner_,
                        inner_, nullptr, tl.stream(), forward_walk_);
    });
  }
}

void KdaBlock::finish(Timeline& tl, const Blas& blas) {
  cudaStream_t s = tl.stream();
  const bool fp8 = lane_.gemm == Format::fp8;
  if (fp8 && cuts_[Cut::quant_fuse]) {  // the gated rows feed only the output projection
    tl.launch("elementwise", "o_norm_gate", [&] {
      o_norm_gate_fp8(core_.get(), out_gate_.get(), w_.gamma_o.get(), nullptr, gated_q_.codes.get(),
                      gated_q_.scales.get(), gated_q_.layout, b_, m_.kda_heads, float(m_.rms_eps), s);
    });
  } else {
    tl.launch("elementwise", "o_norm_gate", [&] {
      o_norm_gate(elementwise_variant(cuts_), core_.get(), out_gate_.get(), w_.gamma_o.get(), gated_.get(),
                  b_ * m_.kda_heads, float(m_.rms_eps), s);
    });
    if (fp8) quant_act(tl, "kda_o", gated_.get(), b_, inner_, gated_q_);
  }
  gemm_land(tl, blas, land_variant(cuts_), "kda_o", gated_.get(), gated_q_, w_.w_o, o_partial_.get(), attn_out_.get(),
            b_, m_.hidden, inner_);
}

}  // namespace pb
