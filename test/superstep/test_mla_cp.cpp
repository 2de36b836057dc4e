// The MLA block across the CP lane: every rank of the job (-np 2 or
// 4, ranks may share one GPU) runs the whole context alone as CP1, then its
// segment as CP-N over the IPC fabric, and compares its rows:
//   - CP-N == CP1 within kMlaCpRelL2Floor, under the prefix schedule and under
//     the stripe (cut 3), and stripe == prefix within the same floor;
//   - the argmax of a fixed projection of the last token agrees (last rank);
//   - cut 4 (lse_merge) on and off is bit-identical on every rank, under both
//     schedules, and a repeated call reproduces its bits (slabs alternate);
//   - at CP1, all cuts == no cuts bit for bit (cuts 1, 4, 5 are exact; 3 is moot);
//   - balance (cut 7; -np 2 and 4 are even cp, where it moves half windows):
//     with the native FMHA every rank's output equals the stripe's bit for
//     bit, over calls that switch between prefix, stripe and balance so that
//     the acknowledgements of the return slots cross schedules (schedule.h);
//     with cuDNN (when built) within summation order, rel-L2 <= 1e-3, the
//     last token's probe argmax equal.
//   - layout zigzag (each rank its chunks r and 2cp - 1 - r): the outputs,
//     gathered back into sequence order, equal the contiguous layout's (the
//     stripe) and CP1's within kMlaCpRelL2Floor; the last token (rank 0's
//     last row) probes the same argmax; every cut set gives the same bits
//     (cuts 1, 4, 5 exact; 3 and 7 change nothing under zigzag); repeated
//     calls reproduce them.
//   - overlap (cut 8): every rank's output with it equals without it bit for
//     bit, under prefix, stripe, balance (and zigzag), over calls that switch
//     it, and at CP1.
// Tiny widths (uneven segments: odd context, odd rows split in unequal
// halves; zigzag: odd chunks) and K3 widths (96 heads, hidden 7168) at short length.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "fabric.h"
#include "mla_block.h"
#include "mpi_gpu_test.h"
#include "random_fill.h"
#include "ref_math.h"

using namespace pb;

namespace {

// Floor on rel-L2(CP-N, CP1) of the block output: windows merged from bf16
// partial outputs vs one causal window (measured ~3e-3 at these shapes).
constexpr double kMlaCpRelL2Floor = 1e-2;

using Bits = std::vector<uint16_t>;

using test::cuts_with;
using test::rel_l2_bf16;

// argmax over a fixed pseudo-random [1024, hidden] projection of one row.
int probe_argmax(const uint16_t* row, int64_t hidden) {
  uint64_t state = 0x9e3779b97f4a7c15ull;
  int best = -1;
  double best_v = -1e300;
  for (int v = 0; v < 1024; ++v) {
    double acc = 0;
    for (int64_t i = 0; i < hidden; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      acc += ref::bf16_to_f32(row[i]) * (double(state >> 40) / double(1ull << 24) - 0.5);
    }
    if (acc > best_v) best_v = acc, best = v;
  }
  return best;
}

// The stripe's cuts, cut 4 as given, and balance (cut 7) on.
CutSet balance_cuts(bool lse_merge) {
  CutSet c = cuts_with(true, lse_merge);
  c.set(Cut::balance, true);
  return c;
}

// Floor on rel-L2(balance, stripe) with cuDNN: the moved half window runs
// with half the query rows, which may tile its sums differently.
constexpr double kBalanceCudnnRelL2 = 1e-3;

// Runs the block once and returns its live output rows [T, hidden].
Bits run_block(MlaBlock& block, const __nv_bfloat16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl,
               const Blas& blas, Fabric* fab, int64_t hidden) {
  block.run(mixed, seq, cuts, tl, blas);
  if (fab) fab->drain();
  tl.collect();
  Bits out(size_t(block.live_rows() * hidden));
  PB_CUDA(cudaMemcpy(out.data(), block.attn_out(), out.size() * 2, cudaMemcpyDeviceToHost));
  return out;
}

// The whole seeded input [context, hidden] and this rank's rows of it in a
// bucket of `rows` (rows >= its segment: anything).
struct LaneInput {
  std::vector<Segment> segs;
  Segment mine;
  DeviceBuffer<__nv_bfloat16> full, local;
  LaneInput(const ModelShape& m, int64_t context, int cp, int me, int64_t rows, uint64_t seed, cudaStream_t stream)
      : segs(contiguous_segments(context, cp)), mine(segs[size_t(me)]), full(size_t(context * m.hidden)),
        local(size_t(rows * m.hidden)) {
    fill_uniform_bf16(full.get(), context * m.hidden, seed, 1.0f, stream);
    fill_uniform_bf16(local.get(), rows * m.hidden, seed + 1, 1.0f, stream);
    PB_CUDA(cudaMemcpyAsync(local.get(), full.get() + mine.begin * m.hidden, size_t(mine.len * m.hidden) * 2,
                            cudaMemcpyDeviceToDevice, stream));
  }
};

void check_cp_lane(const ModelShape& m, int64_t context, int64_t pad_rows) {
  const Gang& gang = test_gang();
  const int cp = gang.size(), me = gang.rank();
  const int64_t rows = contiguous_segments(context, cp)[0].len + pad_rows;  // the bucket
  INFO("model " << m.preset << " cp " << cp << " rank " << me << " context " << context);
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const MlaWeights w(m, 77, stream);
  const LaneInput in(m, context, cp, me, rows, 5, stream);
  const std::vector<Segment>& segs = in.segs;
  const Segment mine = in.mine;
  const __nv_bfloat16 *full = in.full.get(), *local = in.local.get();
  const Blas blas;
  Timeline tl(stream, false);

  // CP1 over the whole context, the rows of this rank's segment.
  Bits cp1_none, cp1_all;
  {
    MlaBlock one(m, w, {0, 1, {{0, context}}, context, nullptr}, FmhaEngine::native);
    const Bits a = run_block(one, full, 0, cuts_with(false, false), tl, blas, nullptr, m.hidden);
    const Bits b = run_block(one, full, 1, cuts_with(true, true), tl, blas, nullptr, m.hidden);
    CHECK_MESSAGE(a == b, "CP1: all cuts differ from none (cuts 1, 4, 5 promise the same bits)");
    cp1_none.assign(a.begin() + mine.begin * m.hidden, a.begin() + (mine.begin + mine.len) * m.hidden);
    cp1_all.assign(b.begin() + mine.begin * m.hidden, b.begin() + (mine.begin + mine.len) * m.hidden);
  }

  Fabric fab(gang, slab_layout(cp, rows, int(m.heads), int(m.kv_lora), int(m.qk_rope), int(m.d_qk()),
                                  int(m.v_head)),
                30.0);
  MlaBlock block(m, w, {me, cp, segs, rows, &fab}, FmhaEngine::native);
  // Two prefix calls before the first stripe call: a helper's wait for the
  // owner's acknowledgement of call seq - 2 must hold after a prefix call too
  // (verify and run switch schedules that way); then back and forth.
  const Bits prefix = run_block(block, local, 0, cuts_with(false, false), tl, blas, &fab, m.hidden);
  const Bits prefix_4 = run_block(block, local, 1, cuts_with(false, true), tl, blas, &fab, m.hidden);
  const Bits stripe = run_block(block, local, 2, cuts_with(true, true), tl, blas, &fab, m.hidden);
  const Bits stripe_no4 = run_block(block, local, 3, cuts_with(true, false), tl, blas, &fab, m.hidden);
  const Bits prefix_again = run_block(block, local, 4, cuts_with(false, false), tl, blas, &fab, m.hidden);
  const Bits stripe_again = run_block(block, local, 5, cuts_with(true, true), tl, blas, &fab, m.hidden);

  const double e_prefix = rel_l2_bf16(prefix, cp1_none), e_stripe = rel_l2_bf16(stripe, cp1_all);
  const double e_between = rel_l2_bf16(stripe, prefix);
  CHECK(e_prefix <= kMlaCpRelL2Floor);
  CHECK(e_stripe <= kMlaCpRelL2Floor);
  CHECK(e_between <= kMlaCpRelL2Floor);
  CHECK_MESSAGE(stripe == stripe_no4, "cut 4 on/off differs under the stripe");
  CHECK_MESSAGE(prefix == prefix_4, "cut 4 on/off differs under the prefix schedule");
  CHECK_MESSAGE(stripe == stripe_again, "a repeated stripe call changed bits");
  CHECK_MESSAGE(prefix == prefix_again, "a repeated prefix call changed bits");
  if (me == cp - 1) {
    const int64_t last = (mine.len - 1) * m.hidden;
    const int want = probe_argmax(cp1_none.data() + last, m.hidden);
    CHECK(probe_argmax(prefix.data() + last, m.hidden) == want);
    CHECK(probe_argmax(stripe.data() + last, m.hidden) == want);
  }
  const FabricStats& st = fab.stats();
  std::printf("[%s cp %d rank %d] rel-L2 vs CP1: prefix %.2e stripe %.2e, stripe vs prefix %.2e; "
              "%lld waits %.1f us, %lld rings, %lld B written, %lld B read in place\n",
              m.preset.c_str(), cp, me, e_prefix, e_stripe, e_between, (long long)st.waits, st.wait_us_total,
              (long long)st.rings, (long long)st.bytes_written, (long long)st.bytes_read);
  gang.barrier();  // no peer touches our slab any more
  PB_CUDA(cudaStreamDestroy(stream));
}

// Balance against the stripe on one fabric, calls switching schedules:
//   seq 0 stripe, 1 balance, 2 prefix, 3 prefix, 4 balance, 5 stripe,
//   6 balance with cut 4 off, 7 balance. Before writing balance's slot of
//   call seq, its helper waits for the owner's acknowledgement of call
//   seq - 2: a prefix call's (seq 4), a balance call's (seq 6), a stripe
//   call's (seq 7); the stripe's helpers likewise (seq 5 after a prefix call).
void check_balance(const ModelShape& m, int64_t context, int64_t pad_rows, FmhaEngine engine) {
  const Gang& gang = test_gang();
  const int cp = gang.size(), me = gang.rank();
  if (!balance_moves(cp)) {  // at odd cp balance is the stripe: nothing to compare
    MESSAGE("cp " << cp << ": balance moves nothing");
    return;
  }
  REQUIRE(attention_schedule(balance_cuts(true), Layout::contiguous, cp) == Schedule::balance);
  const int64_t rows = contiguous_segments(context, cp)[0].len + pad_rows;
  const bool native = engine == FmhaEngine::native;
  INFO("model " << m.preset << " cp " << cp << " rank " << me << " context " << context << " engine "
                << (native ? "native" : "cudnn"));
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const MlaWeights w(m, 91, stream);
  const LaneInput in(m, context, cp, me, rows, 15, stream);
  const Segment mine = in.mine;
  const Blas blas;
  Timeline tl(stream, false);
  Fabric fab(gang, slab_layout(cp, rows, int(m.heads), int(m.kv_lora), int(m.qk_rope), int(m.d_qk()), int(m.v_head)),
             30.0);
  MlaBlock block(m, w, {me, cp, in.segs, rows, &fab}, engine);
  const auto call = [&](int64_t seq, const CutSet& cuts) {
    return run_block(block, in.local.get(), seq, cuts, tl, blas, &fab, m.hidden);
  };
  const Bits stripe = call(0, cuts_with(true, true));
  const Bits balance = call(1, balance_cuts(true));
  const Bits prefix = call(2, cuts_with(false, true));
  call(3, cuts_with(false, false));
  const Bits balance_after_prefix = call(4, balance_cuts(true));
  const Bits stripe_again = call(5, cuts_with(true, true));
  const Bits balance_no4 = call(6, balance_cuts(false));
  const Bits balance_again = call(7, balance_cuts(true));

  const double e_balance = rel_l2_bf16(balance, stripe), e_prefix = rel_l2_bf16(balance, prefix);
  CHECK(e_prefix <= kMlaCpRelL2Floor);  // the same attention, merged in another order
  if (native) {
    CHECK_MESSAGE(balance == stripe, "balance differs from the stripe (native FMHA promises the same bits)");
    CHECK_MESSAGE(balance_after_prefix == stripe, "balance after two prefix calls differs from the stripe");
    CHECK_MESSAGE(balance_no4 == stripe, "balance with cut 4 off differs from the stripe");
    CHECK_MESSAGE(balance_again == stripe, "a repeated balance call differs from the stripe");
    CHECK_MESSAGE(stripe_again == stripe, "a stripe call after balance calls changed bits");
  } else {
    for (const Bits* b : {&balance, &balance_after_prefix, &balance_no4, &balance_again})
      CHECK(rel_l2_bf16(*b, stripe) <= kBalanceCudnnRelL2);
    CHECK(rel_l2_bf16(stripe_again, stripe) <= kBalanceCudnnRelL2);
  }
  if (me == cp - 1) {
    const int64_t last = (mine.len - 1) * m.hidden;
    CHECK(probe_argmax(balance.data() + last, m.hidden) == probe_argmax(stripe.data() + last, m.hidden));
  }
  std::printf("[%s cp %d rank %d %s] balance vs stripe rel-L2 %.2e, vs prefix %.2e\n", m.preset.c_str(), cp, me,
              native ? "native" : "cudnn", e_balance, e_prefix);
  gang.barrier();  // no peer touches our slab any more
  PB_CUDA(cudaStreamDestroy(stream));
}

// cuDNN's checks where this build has it (every rank agrees: one build).
void check_balance_cudnn(const ModelShape& m, int64_t context, int64_t pad_rows) {
  if (!fmha_cudnn_available()) {
    MESSAGE("built without cuDNN: balance under cuDNN not checked");
    return;
  }
  check_balance(m, context, pad_rows, FmhaEngine::cudnn);
}

// One layout's CP-N run: its fabric, its block on this rank's rows of the
// input, the calls under `cuts` in order (seq 0, 1, ...); the outputs of each.
std::vector<Bits> run_layout(const ModelShape& m, const MlaWeights& w, const test::LayoutInput& in, Layout layout,
                             const std::vector<CutSet>& cuts, bool lane_overlap = false) {
  const Gang& gang = test_gang();
  const DeviceBuffer<__nv_bfloat16> local = in.local(layout);
  const Blas blas;
  Timeline tl(in.stream, false);
  Fabric fab(gang, slab_layout(in.cp, in.rows, int(m.heads), int(m.kv_lora), int(m.qk_rope), int(m.d_qk()),
                               int(m.v_head), layout),
             30.0);
  MlaBlock block(m, w,
                 {in.me, in.cp, lane_segments(layout, in.context, in.cp), in.rows, &fab, false, layout, lane_overlap},
                 FmhaEngine::native);
  std::vector<Bits> out;
  for (size_t i = 0; i < cuts.size(); ++i)
    out.push_back(run_block(block, local.get(), int64_t(i), cuts[i], tl, blas, &fab, m.hidden));
  gang.barrier();  // no peer touches our slab any more
  return out;
}

// Zigzag against the contiguous layout and CP1 on one input.
void check_zigzag(const ModelShape& m, int64_t context, int64_t pad_rows) {
  const Gang& gang = test_gang();
  const test::LayoutInput in(m.hidden, context, pad_rows, 29);
  const int cp = in.cp, me = in.me;
  INFO("model " << m.preset << " cp " << cp << " rank " << me << " context " << context << " zigzag");
  const MlaWeights w(m, 63, in.stream);
  Bits cp1;
  {
    const Blas blas;
    Timeline tl(in.stream, false);
    MlaBlock one(m, w, {0, 1, {{0, context}}, context, nullptr}, FmhaEngine::native);
    cp1 = run_block(one, in.full.get(), 0, cuts_with(false, false), tl, blas, nullptr, m.hidden);
  }
  const CutSet all = balance_cuts(true);  // every cut: 3 and 7 change nothing under zigzag
  const std::vector<Bits> contiguous = run_layout(m, w, in, Layout::contiguous, {cuts_with(true, true)});
  REQUIRE(attention_schedule(all, Layout::zigzag, cp) == Schedule::zigzag);
  const std::vector<Bits> zz = run_layout(
      m, w, in, Layout::zigzag, {all, cuts_with(false, false), cuts_with(true, false), cuts_with(false, true), all});
  for (size_t i = 1; i < zz.size(); ++i) {
    CAPTURE(i);
    CHECK_MESSAGE(zz[i] == zz[0], "zigzag: another cut set or a repeated call changed bits");
  }
  // This rank's rows against CP1's same tokens.
  const std::vector<Segment> mine = rank_tokens(Layout::zigzag, context, cp, me);
  const Bits cp1_mine = test::rows_of_ranges(cp1, mine, m.hidden);
  const double e_mine = rel_l2_bf16(zz[0], cp1_mine);
  CHECK(e_mine <= kMlaCpRelL2Floor);
  int64_t local = 0;
  for (const Segment& chunk : mine) {  // each chunk alone: a wrong window over either shows
    const Bits z = test::rows_of_ranges(zz[0], {{local, chunk.len}}, m.hidden);
    CHECK(rel_l2_bf16(z, test::rows_of_ranges(cp1, {chunk}, m.hidden)) <= kMlaCpRelL2Floor);
    local += chunk.len;
  }
  if (me == last_token_rank(Layout::zigzag, cp)) {
    const int64_t last = (int64_t(zz[0].size()) / m.hidden - 1) * m.hidden;
    CHECK(probe_argmax(zz[0].data() + last, m.hidden) == probe_argmax(cp1.data() + (context - 1) * m.hidden, m.hidden));
  }
  // The whole sequence: zigzag gathered back against the contiguous layout's.
  const Bits whole_z = test::gather_in_sequence(gang, zz[0], Layout::zigzag, context, m.hidden);
  const Bits whole_c = test::gather_in_sequence(gang, contiguous[0], Layout::contiguous, context, m.hidden);
  if (gang.is_root()) {
    const double e_layouts = rel_l2_bf16(whole_z, whole_c), e_cp1 = rel_l2_bf16(whole_z, cp1);
    CHECK(e_layouts <= kMlaCpRelL2Floor);
    CHECK(e_cp1 <= kMlaCpRelL2Floor);
    std::printf("[%s cp %d] zigzag rel-L2 vs contiguous %.2e, vs CP1 %.2e\n", m.preset.c_str(), cp, e_layouts, e_cp1);
  }
  gang.barrier();
}

CutSet with_overlap(CutSet c) {
  c.set(Cut::overlap, true);
  return c;
}

// Cut 8 (overlap) on == off bit for bit on every rank (and at CP1), over calls
// that switch the schedule (prefix, stripe, balance; zigzag's alone under
// that layout) and cut 8 between calls, so the return slots' and windows'
// acknowledgements cross plain and overlapped calls.
void check_overlap(const ModelShape& m, int64_t context, int64_t pad_rows, Layout layout) {
  const test::LayoutInput in(m.hidden, context, pad_rows, 41);
  INFO("model " << m.preset << " cp " << in.cp << " rank " << in.me << " context " << context << " layout "
                << layout_name(layout));
  const MlaWeights w(m, 53, in.stream);
  {
    const Blas blas;
    Timeline tl(in.stream, false);
    MlaBlock one(m, w, {0, 1, {{0, context}}, context, nullptr, false, Layout::contiguous, true}, FmhaEngine::native);
    const CutSet all = cuts_with(true, true);
    const Bits plain = run_block(one, in.full.get(), 0, all, tl, blas, nullptr, m.hidden);
    CHECK_MESSAGE(run_block(one, in.full.get(), 1, with_overlap(all), tl, blas, nullptr, m.hidden) == plain,
                  "CP1: cut 8 changed the block's bits");
  }
  std::vector<CutSet> bases = {cuts_with(false, false), cuts_with(true, true), balance_cuts(true)};
  if (layout == Layout::zigzag) bases = {cuts_with(true, true)};
  std::vector<CutSet> calls;  // per base: plain, overlapped, overlapped again, plain again; the bases then reversed
  std::vector<size_t> plain_of;
  for (int pass = 0; pass < 2; ++pass)
    for (size_t i = 0; i < bases.size(); ++i) {
      const CutSet& base = bases[pass == 0 ? i : bases.size() - 1 - i];
      const size_t first = calls.size();
      for (const CutSet& c : {base, with_overlap(base), with_overlap(base), base}) {
        calls.push_back(c);
        plain_of.push_back(first);
      }
    }
  const std::vector<Bits> out = run_layout(m, w, in, layout, calls, true);
  for (size_t i = 0; i < calls.size(); ++i) {
    CAPTURE(i);
    CAPTURE(calls[i].describe());
    CHECK_MESSAGE(out[i] == out[plain_of[i]], "cut 8 (or a repeated call) changed this rank's bits");
  }
}

}  // namespace

TEST_CASE("MLA with overlap (cut 8) == without, bit for bit, prefix, stripe, balance, tiny widths, uneven segments") {
  check_overlap(model_preset("tiny"), 203, 13, Layout::contiguous);
}

TEST_CASE("MLA with overlap (cut 8) == without, bit for bit, prefix, stripe, balance, K3 widths at short length") {
  check_overlap(model_preset("k3"), 256, 16, Layout::contiguous);
}

TEST_CASE("MLA with overlap (cut 8) == without, bit for bit, layout zigzag, tiny widths, odd chunks") {
  const int cp = test_gang().size();
  check_overlap(model_preset("tiny"), 2 * cp * 51, 13, Layout::zigzag);
}

TEST_CASE("MLA under layout zigzag == the contiguous layout within summation order, tiny widths, odd chunks") {
  const int cp = test_gang().size();
  check_zigzag(model_preset("tiny"), 2 * cp * 51, 13);
}

TEST_CASE("MLA under layout zigzag == the contiguous layout within summation order, K3 widths at short length") {
  check_zigzag(model_preset("k3"), 256, 16);
}

TEST_CASE("MLA across the CP lane, tiny widths") {
  ModelShape m = model_preset("tiny");
  check_cp_lane(m, 203, 13);  // uneven segments (remainder to the earlier ranks)
}

TEST_CASE("MLA across the CP lane, K3 widths at short length") {
  ModelShape m = model_preset("k3");
  check_cp_lane(m, 256, 16);
}

TEST_CASE("MLA under balance == the stripe, bit for bit with the native FMHA, tiny widths, uneven segments") {
  check_balance(model_preset("tiny"), 203, 13, FmhaEngine::native);
}

TEST_CASE("MLA under balance == the stripe, bit for bit with the native FMHA, K3 widths at short length") {
  check_balance(model_preset("k3"), 256, 16, FmhaEngine::native);
}

TEST_CASE("MLA under balance == the stripe within summation order with cuDNN, tiny and K3 widths") {
  check_balance_cudnn(model_preset("tiny"), 203, 13);
  check_balance_cudnn(model_preset("k3"), 256, 16);
}
