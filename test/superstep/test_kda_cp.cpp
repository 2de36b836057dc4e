// The KDA block across the CP lane: every rank of the job (-np 2 or
// 4, ranks may share one GPU) runs the whole context alone as CP1, then its
// segment as CP-N over the IPC fabric (conv halo rows, state packages folded
// in place), and compares its rows:
//   - CP-N == CP1 within kda.h's rel-L2 floor, on the core's output and on the
//     block's output;
//   - cut 2 (conv) on and off is bit-identical through the whole block, at CP1
//     and on every CP-N rank (with cuts 1 and 5 switched alongside: exact too);
//   - a repeated call reproduces its bits (the halo / package parity slots).
//   - layout zigzag (each rank its chunks r and 2cp - 1 - r, two pieces but
//     on rank cp - 1): core and block outputs, gathered back into sequence
//     order, equal the contiguous layout's and CP1's within the floor, and
//     so does the head of every piece (its conv carry: a halo from rank
//     r - 1 or r + 1, or zeros) and every piece (its S_in: packages folded
//     over non-contiguous pieces); cut 2 on/off and repeated calls keep the
//     bits.
//   - overlap (cut 8): core and block outputs with it equal those without it
//     bit for bit, on every rank and at CP1, both layouts.
// Tiny widths and K3 widths (96 heads, hidden 7168) at short length.
// And: a rank that builds its block only once its upstream rank's halo rows
// of call 0 have landed in its slab (nothing orders the two) reads those rows.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "device_buffer.h"
#include "fabric.h"
#include "kda_block.h"
#include "mpi_gpu_test.h"
#include "random_fill.h"

using namespace pb;

namespace {

using Bits = std::vector<uint16_t>;

struct Out {
  Bits block, core;
};

Out run_block(KdaBlock& block, const __nv_bfloat16* mixed, int64_t seq, const CutSet& cuts, Timeline& tl,
              const Blas& blas, Fabric* fab, const ModelShape& m) {
  block.run(mixed, seq, cuts, tl, blas);
  if (fab) fab->drain();
  tl.collect();
  Out o{Bits(size_t(block.live_rows() * m.hidden)), Bits(size_t(block.live_rows() * m.kda_inner()))};
  PB_CUDA(cudaMemcpy(o.block.data(), block.attn_out(), o.block.size() * 2, cudaMemcpyDeviceToHost));
  PB_CUDA(cudaMemcpy(o.core.data(), block.core_out(), o.core.size() * 2, cudaMemcpyDeviceToHost));
  return o;
}

Bits rows_of(const Bits& all, int64_t begin, int64_t len, int64_t width) {
  return Bits(all.begin() + begin * width, all.begin() + (begin + len) * width);
}

// This rank's lane: its segment of a seeded [context, hidden] input (full) in
// a bucket of `rows` (local), the weights, and the stream the calls run on.
struct Lane {
  int cp = 0, me = 0;
  std::vector<Segment> segs;
  int64_t rows = 0;
  Segment mine;
  cudaStream_t stream = nullptr;
  DeviceBuffer<__nv_bfloat16> full, local;
  Lane(const ModelShape& m, int64_t context, int64_t pad_rows)
      : cp(test_gang().size()), me(test_gang().rank()), segs(contiguous_segments(context, cp)),
        rows(segs[0].len + pad_rows), mine(segs[size_t(me)]) {
    PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    full = DeviceBuffer<__nv_bfloat16>(size_t(context * m.hidden));
    local = DeviceBuffer<__nv_bfloat16>(size_t(rows * m.hidden));
    fill_uniform_bf16(full.get(), context * m.hidden, 8, 1.0f, stream);
    fill_uniform_bf16(local.get(), rows * m.hidden, 9, 1.0f, stream);
    PB_CUDA(cudaMemcpyAsync(local.get(), full.get() + mine.begin * m.hidden, size_t(mine.len * m.hidden) * 2,
                            cudaMemcpyDeviceToDevice, stream));
    PB_CUDA(cudaStreamSynchronize(stream));
  }
  ~Lane() { PB_CUDA_NOTHROW(cudaStreamDestroy(stream)); }
};

void check_kda_lane(const ModelShape& m, int64_t context, int64_t pad_rows) {
  const Gang& gang = test_gang();
  Lane lane(m, context, pad_rows);
  const int cp = lane.cp, me = lane.me;
  INFO("model " << m.preset << " cp " << cp << " rank " << me << " context " << context);
  const std::vector<Segment>& segs = lane.segs;
  const int64_t rows = lane.rows;
  const Segment mine = lane.mine;
  cudaStream_t stream = lane.stream;
  const KdaWeights w(m, 91, stream);
  const __nv_bfloat16* full = lane.full.get();
  const __nv_bfloat16* local = lane.local.get();
  const Blas blas;
  Timeline tl(stream, false);
  const CutSet none = CutSet::none(), all = CutSet::all();

  Out cp1;
  {
    KdaBlock one(m, w, {0, 1, {{0, context}}, context, nullptr});
    const Out a = run_block(one, full, 0, none, tl, blas, nullptr, m);
    const Out b = run_block(one, full, 1, all, tl, blas, nullptr, m);
    CHECK_MESSAGE(a.block == b.block, "CP1: cuts 1, 2, 5 on vs off changed the block's bits");
    cp1 = {rows_of(a.block, mine.begin, mine.len, m.hidden), rows_of(a.core, mine.begin, mine.len, m.kda_inner())};
  }

  Fabric fab(gang, model_slab_layout(m, cp, rows), 30.0);
  KdaBlock block(m, w, {me, cp, segs, rows, &fab});
  const Out off = run_block(block, local, 0, none, tl, blas, &fab, m);
  const Out on = run_block(block, local, 1, all, tl, blas, &fab, m);
  const Out off_again = run_block(block, local, 2, none, tl, blas, &fab, m);
  const Out on_again = run_block(block, local, 3, all, tl, blas, &fab, m);

  const double e_core = test::rel_l2_bf16(off.core, cp1.core), e_block = test::rel_l2_bf16(off.block, cp1.block);
  CHECK(e_core <= kKdaRelL2Floor);
  CHECK(e_block <= kKdaRelL2Floor);
  CHECK_MESSAGE(off.block == on.block, "cut 2 (with 1 and 5) on vs off changed the block's bits");
  CHECK_MESSAGE(off.block == off_again.block, "a repeated call changed bits");
  CHECK_MESSAGE(on.block == on_again.block, "a repeated call changed bits");
  const FabricStats& st = fab.stats();
  std::printf("[%s cp %d rank %d] KDA rel-L2 vs CP1: core %.2e, block %.2e; %lld waits %.1f us, %lld rings, "
              "%lld B written, %lld B read in place\n",
              m.preset.c_str(), cp, me, e_core, e_block, (long long)st.waits, st.wait_us_total, (long long)st.rings,
              (long long)st.bytes_written, (long long)st.bytes_read);
  gang.barrier();
}

// One layout's CP-N run on this rank's rows of the input: the calls under
// `cuts` in order (seq 0, 1, ...), the outputs of each.
std::vector<Out> run_layout(const ModelShape& m, const KdaWeights& w, const test::LayoutInput& in, Layout layout,
                            const std::vector<CutSet>& cuts) {
  const Gang& gang = test_gang();
  const DeviceBuffer<__nv_bfloat16> local = in.local(layout);
  const Blas blas;
  Timeline tl(in.stream, false);
  Fabric fab(gang, model_slab_layout(m, in.cp, in.rows, layout), 30.0);
  KdaBlock block(m, w, {in.me, in.cp, lane_segments(layout, in.context, in.cp), in.rows, &fab, layout});
  std::vector<Out> out;
  for (size_t i = 0; i < cuts.size(); ++i)
    out.push_back(run_block(block, local.get(), int64_t(i), cuts[i], tl, blas, &fab, m));
  gang.barrier();  // no peer touches our slab any more
  return out;
}

// Zigzag against the contiguous layout and CP1 on one input.
void check_kda_zigzag(const ModelShape& m, int64_t context, int64_t pad_rows) {
  const Gang& gang = test_gang();
  const test::LayoutInput in(m.hidden, context, pad_rows, 37);
  const int cp = in.cp, me = in.me;
  const int64_t inner = m.kda_inner();
  INFO("model " << m.preset << " cp " << cp << " rank " << me << " context " << context << " zigzag");
  const KdaWeights w(m, 93, in.stream);
  Out cp1;
  {
    const Blas blas;
    Timeline tl(in.stream, false);
    KdaBlock one(m, w, {0, 1, {{0, context}}, context, nullptr});
    cp1 = run_block(one, in.full.get(), 0, CutSet::none(), tl, blas, nullptr, m);
  }
  const CutSet none = CutSet::none(), all = CutSet::all();
  const std::vector<Out> contiguous = run_layout(m, w, in, Layout::contiguous, {none});
  const std::vector<Out> zz = run_layout(m, w, in, Layout::zigzag, {none, all, none, all});
  for (size_t i = 1; i < zz.size(); ++i) {
    CAPTURE(i);
    CHECK_MESSAGE(zz[i].block == zz[0].block,
                  "zigzag: cut 2 (with 1 and 5) or a repeated call changed the block's bits");
  }
  // Every piece of this rank against CP1's same tokens: its head (the first 3 rows take the
  // conv carry), and the whole piece (its S_in).
  const std::vector<KdaPiece> pieces = kda_pieces(Layout::zigzag, cp, me);
  const std::vector<Segment> mine = rank_tokens(Layout::zigzag, context, cp, me);
  const int64_t t = mine[0].len + mine[1].len, chunk = context / (2 * cp);
  for (const KdaPiece& piece : pieces) {
    const RowRange local = part_rows(t, piece.parts);
    const int64_t begin = int64_t(piece.first_chunk) * chunk, head = std::min<int64_t>(4, local.len());
    CAPTURE(piece.first_chunk);
    const Bits core = rows_of(zz[0].core, local.begin, local.len(), inner);
    CHECK(test::rel_l2_bf16(core, rows_of(cp1.core, begin, local.len(), inner)) <= kKdaRelL2Floor);
    CHECK(test::rel_l2_bf16(rows_of(zz[0].core, local.begin, head, inner), rows_of(cp1.core, begin, head, inner)) <=
          kKdaRelL2Floor);
    CHECK(test::rel_l2_bf16(rows_of(zz[0].block, local.begin, local.len(), m.hidden),
                            rows_of(cp1.block, begin, local.len(), m.hidden)) <= kKdaRelL2Floor);
  }
  // The whole sequence: zigzag gathered back against the contiguous layout's and CP1's.
  const Bits core_z = test::gather_in_sequence(gang, zz[0].core, Layout::zigzag, context, inner);
  const Bits core_c = test::gather_in_sequence(gang, contiguous[0].core, Layout::contiguous, context, inner);
  const Bits block_z = test::gather_in_sequence(gang, zz[0].block, Layout::zigzag, context, m.hidden);
  const Bits block_c = test::gather_in_sequence(gang, contiguous[0].block, Layout::contiguous, context, m.hidden);
  if (gang.is_root()) {
    const double e_core = test::rel_l2_bf16(core_z, core_c), e_block = test::rel_l2_bf16(block_z, block_c);
    const double e_cp1 = test::rel_l2_bf16(core_z, cp1.core);
    CHECK(e_core <= kKdaRelL2Floor);
    CHECK(e_block <= kKdaRelL2Floor);
    CHECK(e_cp1 <= kKdaRelL2Floor);
    std::printf("[%s cp %d] KDA zigzag rel-L2 vs contiguous: core %.2e, block %.2e; core vs CP1 %.2e\n",
                m.preset.c_str(), cp, e_core, e_block, e_cp1);
  }
  gang.barrier();
}

// Cut 8 (overlap) on == off bit for bit (core and block) on every rank and at
// CP1, over calls that switch it and cuts 1, 2, 5.
void check_kda_overlap(const ModelShape& m, int64_t context, int64_t pad_rows, Layout layout) {
  const test::LayoutInput in(m.hidden, context, pad_rows, 43);
  INFO("model " << m.preset << " cp " << in.cp << " rank " << in.me << " context " << context << " layout "
                << layout_name(layout));
  const KdaWeights w(m, 95, in.stream);
  CutSet none = CutSet::none(), all = CutSet::all().without(Cut::overlap), none_o = none, all_o = all;
  none_o.set(Cut::overlap, true);
  all_o.set(Cut::overlap, true);
  {
    const Blas blas;
    Timeline tl(in.stream, false);
    KdaBlock one(m, w, {0, 1, {{0, context}}, context, nullptr});
    const Out plain = run_block(one, in.full.get(), 0, all, tl, blas, nullptr, m);
    const Out over = run_block(one, in.full.get(), 1, all_o, tl, blas, nullptr, m);
    CHECK_MESSAGE((over.block == plain.block && over.core == plain.core), "CP1: cut 8 changed the bits");
  }
  const std::vector<CutSet> calls = {none, none_o, all, all_o, all_o, all, none_o, none};
  const std::vector<size_t> plain_of = {0, 0, 2, 2, 2, 2, 0, 0};
  const std::vector<Out> out = run_layout(m, w, in, layout, calls);
  for (size_t i = 0; i < calls.size(); ++i) {
    CAPTURE(i);
    CHECK_MESSAGE(out[i].core == out[plain_of[i]].core, "cut 8 (or a repeated call) changed the core's bits");
    CHECK_MESSAGE(out[i].block == out[plain_of[i]].block, "cut 8 (or a repeated call) changed the block's bits");
  }
}

// Blocks until this rank's doorbell `flag` holds at least `value` (stored by
// an IPC peer); false after timeout_s.
bool await_doorbell(const Fabric& fab, int flag, uint64_t value, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (fab.doorbell(flag) < value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// Rank r > 0 builds its block only after rank r - 1's halo rows of call 0 have
// landed in its slab, then runs the same call three times: call 0 reads the
// rows delivered before the block existed, call 2 the same rows delivered to a
// built block, so the two agree bit for bit unless the constructor lost them.
void check_late_construction(const ModelShape& m, int64_t context, int64_t pad_rows) {
  const Gang& gang = test_gang();
  Lane lane(m, context, pad_rows);
  INFO("model " << m.preset << " cp " << lane.cp << " rank " << lane.me);
  const KdaWeights w(m, 91, lane.stream);
  const Blas blas;
  Timeline tl(lane.stream, false);
  Fabric fab(gang, model_slab_layout(m, lane.cp, lane.rows), 30.0);
  if (lane.me > 0)
    REQUIRE_MESSAGE(await_doorbell(fab, doorbell_index(lane.cp, lane.me - 1, Bell::halo), doorbell_value(0, 0), 30.0),
                    "the halo rows of call 0 never came from rank " << lane.me - 1);
  KdaBlock block(m, w, {lane.me, lane.cp, lane.segs, lane.rows, &fab});
  const CutSet none = CutSet::none();
  const Out first = run_block(block, lane.local.get(), 0, none, tl, blas, &fab, m);
  run_block(block, lane.local.get(), 1, none, tl, blas, &fab, m);
  const Out again = run_block(block, lane.local.get(), 2, none, tl, blas, &fab, m);
  CHECK_MESSAGE(first.core == again.core, "call 0, on halo rows that came before the block, differs from call 2");
  CHECK_MESSAGE(first.block == again.block, "call 0, on halo rows that came before the block, differs from call 2");
  gang.barrier();
}

}  // namespace

TEST_CASE("KDA across the CP lane, tiny widths") { check_kda_lane(model_preset("tiny"), 203, 13); }

TEST_CASE("KDA with overlap (cut 8) == without, bit for bit, tiny widths, uneven segments") {
  check_kda_overlap(model_preset("tiny"), 203, 13, Layout::contiguous);
}

TEST_CASE("KDA with overlap (cut 8) == without, bit for bit, K3 widths at short length") {
  check_kda_overlap(model_preset("k3"), 256, 16, Layout::contiguous);
}

TEST_CASE("KDA with overlap (cut 8) == without, bit for bit, layout zigzag (two pieces), tiny widths") {
  const int cp = test_gang().size();
  check_kda_overlap(model_preset("tiny"), 2 * cp * 37, 13, Layout::zigzag);
}

TEST_CASE("KDA across the CP lane, K3 widths at short length") { check_kda_lane(model_preset("k3"), 256, 16); }

TEST_CASE("KDA under layout zigzag == the contiguous layout within the floor, tiny widths, chunks of 37 tokens") {
  const int cp = test_gang().size();
  check_kda_zigzag(model_preset("tiny"), 2 * cp * 37, 13);
}

TEST_CASE("KDA under layout zigzag == the contiguous layout within the floor, K3 widths at short length") {
  check_kda_zigzag(model_preset("k3"), 256, 16);
}

TEST_CASE("KDA: a rank that builds its block after its upstream's halo rows landed reads those rows, tiny widths") {
  check_late_construction(model_preset("tiny"), 203, 13);
}
