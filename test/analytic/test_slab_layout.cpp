// The CP lane's slab layout (harness/analytic/slab_layout.h): pure, no CUDA.
#include <doctest/doctest.h>

#include <algorithm>

#include "schedule.h"
#include "slab_layout.h"

using namespace pb;

namespace {

void check_layout(const SlabLayout& L) {
  auto regions = L.regions();
  for (const auto& [name, r] : regions) {
    INFO(name);
    CHECK(r.offset % kSlabAlign == 0);
    CHECK(r.bytes > 0);
    CHECK(r.end() <= L.total_bytes);
  }
  // Address order, no overlap.
  for (size_t i = 1; i < regions.size(); ++i) {
    INFO(regions[i - 1].first << " then " << regions[i].first);
    CHECK(regions[i - 1].second.end() <= regions[i].second.offset);
  }
  CHECK(L.doorbells.offset == 0);
  CHECK(L.total_bytes % kSlabAlign == 0);
}

}  // namespace

TEST_CASE("slab at cp 8, seg 16896, 96 heads: docs/design.md's sizes, plus balance's half slot") {
  const int64_t seg = 16896;
  SlabLayout L = slab_layout(8, seg, 96);
  check_layout(L);
  CHECK(L.slots == 4);
  CHECK(L.slots == return_slots(8) + 1);
  CHECK(L.slots == return_slots(Schedule::balance, 8));
  CHECK(L.doorbells.bytes == 8 * kBellKinds * 8);
  CHECK(L.kv.bytes == seg * (512 + 64) * 2);
  CHECK(L.q.bytes == seg * 96 * 192 * 2);
  CHECK(L.window.bytes == seg * (512 + 64 + 96 * 192) * 2);  // regions are all 256-multiples here
  CHECK(L.window.bytes == 642318336);
  const int64_t slot_bytes = seg * 96 * 128 * 2 + 96 * seg * 4;
  CHECK(slot_bytes == 421724160);
  const int64_t half = seg / 2;  // balance's slot: rows [seg / 2, seg) of an owner
  const int64_t half_slot_bytes = half * 96 * 128 * 2 + 96 * half * 4;
  CHECK(half_slot_bytes == 210862080);
  for (int s = 0; s < 2; ++s) {
    CHECK(L.return_slab[s].bytes == 3 * slot_bytes + half_slot_bytes);
    for (int i = 0; i < 4; ++i) {
      const int64_t rows = i == balance_slot(8) ? half : seg;
      CHECK(L.slot_rows(i) == rows);
      CHECK(L.o[s][i].bytes == rows * 96 * 128 * 2);
      CHECK(L.lse[s][i].bytes == 96 * rows * 4);
      CHECK(L.o[s][i].offset >= L.return_slab[s].offset);
      CHECK(L.lse[s][i].end() <= L.return_slab[s].end());
    }
  }
  CHECK(L.return_slab[0].end() <= L.return_slab[1].offset);
  CHECK(L.total_bytes ==
        8 * kBellKinds * 8 + 642318336 + 2 * (3 * int64_t(421724160) + 210862080));  // doorbells: 512 B, aligned
  CHECK_THROWS(L.slot_rows(4));
}

TEST_CASE("slab at cp 4, seg 16896: the stripe's slot and balance's half slot per return slab") {
  SlabLayout L = slab_layout(4, 16896, 96);
  check_layout(L);
  CHECK(L.slots == 2);
  CHECK(L.total_bytes == 256 + 642318336 + 2 * (int64_t(421724160) + 210862080));
}

TEST_CASE("odd shapes stay aligned and disjoint; cp 1 has no return slot, cp 2 balance's only") {
  for (int cp : {1, 2, 3, 5, 7, 8, 16})
    for (int64_t seg : {1, 3, 17, 1000}) {
      INFO("cp " << cp << " seg " << seg);
      SlabLayout L = slab_layout(cp, seg, 3, 5, 7, 11, 13);
      check_layout(L);
      CHECK(L.slots == (cp - 1) / 2 + (cp % 2 == 0 ? 1 : 0));
      for (int i = 0; i < L.slots; ++i)
        CHECK(L.slot_rows(i) == (cp % 2 == 0 && i == L.slots - 1 ? seg - seg / 2 : seg));
      CHECK(L.o[0].size() == size_t(L.slots));
      CHECK(L.lse[1].size() == size_t(L.slots));
      CHECK(L.doorbells.bytes == int64_t(cp) * kBellKinds * 8);
    }
  CHECK_THROWS(slab_layout(0, 16, 96));
  CHECK_THROWS(slab_layout(4, 0, 96));
}

TEST_CASE("return slabs alternate by call; every slot the stripe and balance use exists in both, and holds its rows") {
  for (int seq = 0; seq < 7; ++seq) CHECK(return_slab(seq) == seq % 2);
  // Every return slot the schedules use exists in its slab and holds the rows returned into it.
  for (int cp : {2, 3, 4, 5, 8, 9})
    for (int64_t extra : {0, 1}) {
      const int64_t context = 64 * cp - extra;  // uneven: the earlier ranks hold one row more
      const std::vector<int64_t> rows = rank_rows(Layout::contiguous, context, cp);
      SlabLayout L = slab_layout(cp, rows[0], 4);
      for (Schedule sched : {Schedule::stripe, Schedule::balance})
        for (const RankAttention& ra : gang_attention(sched, cp))
          for (const auto& step : ra.steps) {
            if (step.is_merge || step.window.slot < 0) continue;
            const int slot = step.window.slot;
            REQUIRE(slot < L.slots);
            for (int slab = 0; slab < 2; ++slab) CHECK(size_t(slot) < L.o[slab].size());
            const WindowShape shape = window_shape(step.window, rows);
            CHECK(shape.tq() <= L.slot_rows(slot));
          }
    }
}

TEST_CASE("doorbells: one flag per (kind, sender), values grow with seq then window") {
  const int cp = 8;
  std::vector<int> seen;
  for (Bell kind : {Bell::window, Bell::returned, Bell::consumed, Bell::released, Bell::halo, Bell::halo_read,
                    Bell::state, Bell::state_read})
    for (int s = 0; s < cp; ++s) seen.push_back(doorbell_index(cp, s, kind));
  std::sort(seen.begin(), seen.end());
  for (int i = 0; i < cp * kBellKinds; ++i) CHECK(seen[i] == i);
  CHECK_THROWS(doorbell_index(cp, cp, Bell::window));

  CHECK(doorbell_value(0, 0) == 4096);
  CHECK(doorbell_value(2, 5) == 3 * 4096 + 5);
  CHECK(doorbell_value(0, 4095) < doorbell_value(1, 0));
  CHECK(doorbell_value(1, 3) > 0);  // the initial flag (0) never satisfies a wait
  CHECK(doorbell_seq(doorbell_value(41, 7)) == 41);
  CHECK(doorbell_window(doorbell_value(41, 7)) == 7);
  CHECK(doorbell_seq(0) == -1);
  CHECK_THROWS(doorbell_value(0, 4096));
  CHECK_THROWS(doorbell_value(-1, 0));
}

TEST_CASE("the KDA regions: halo rows and both packages per parity, aligned, after the MLA regions") {
  const SlabLayout L = slab_layout_with_kda(4, 100, 8, 512, 64, 192, 128, 7168, 96, 128);
  const SlabLayout mla = slab_layout(4, 100, 8);
  CHECK(L.total_bytes > mla.total_bytes);
  int64_t end = 0;
  for (const auto& [name, r] : L.regions()) {
    CHECK(r.offset % kSlabAlign == 0);
    CHECK(r.offset >= end);  // address order, no overlap
    end = r.end();
  }
  CHECK(end <= L.total_bytes);
  for (int p = 0; p < 2; ++p) {
    CHECK(L.halo[p].bytes == 4 * 7168 * 2);
    CHECK(L.M[p].bytes == 96LL * 128 * 128 * 4);
    CHECK(L.D[p].bytes == L.M[p].bytes);
    CHECK(L.halo[p].offset >= mla.total_bytes);
  }
  CHECK(kda_parity(4) == 0);
  CHECK(kda_parity(5) == 1);
}

TEST_CASE("doorbell_value_done: the acknowledgement of call seq - back, 0 before the first call") {
  CHECK(doorbell_value_done(0, 1) == 0);
  CHECK(doorbell_value_done(1, 1) == doorbell_value(0, 0));
  CHECK(doorbell_value_done(1, 2) == 0);
  CHECK(doorbell_value_done(5, 2) == doorbell_value(3, 0));
  CHECK(doorbell_value_done(7, 1) == 7 * uint64_t(kWindowsPerSeq));
  CHECK_THROWS(doorbell_value_done(3, 0));
  CHECK_THROWS(doorbell_value_done(-1, 1));
}

TEST_CASE("zigzag: no return slots; two KDA slots per region, piece 0 where the contiguous layout has its one") {
  const SlabLayout c = slab_layout_with_kda(4, 100, 8, 512, 64, 192, 128, 7168, 96, 128);
  const SlabLayout z = slab_layout_with_kda(4, 100, 8, 512, 64, 192, 128, 7168, 96, 128, Layout::zigzag);
  check_layout(z);
  CHECK(c.layout == Layout::contiguous);
  CHECK(z.layout == Layout::zigzag);
  CHECK(c.kda_slots == 1);
  CHECK(z.kda_slots == 2);
  CHECK(z.slots == 0);
  CHECK(z.kv.offset == c.kv.offset);
  CHECK(z.q.bytes == c.q.bytes);
  const int64_t halo = 4 * 7168 * 2, package = 96LL * 128 * 128 * 4;
  for (int p = 0; p < 2; ++p) {
    CAPTURE(p);
    CHECK(z.halo[p].bytes == 2 * halo);
    CHECK(z.M[p].bytes == 2 * package);
    CHECK(z.D[p].bytes == 2 * package);
    // the contiguous layout's one slot is its whole region
    CHECK(c.halo_slot(p, 0).offset == c.halo[p].offset);
    CHECK(c.halo_slot(p, 0).bytes == c.halo[p].bytes);
    CHECK(c.M_slot(p, 0).bytes == c.M[p].bytes);
    CHECK(c.D_slot(p, 0).offset == c.D[p].offset);
    for (int piece = 0; piece < 2; ++piece) {
      CAPTURE(piece);
      CHECK(z.halo_slot(p, piece).offset == z.halo[p].offset + piece * halo);
      CHECK(z.halo_slot(p, piece).bytes == halo);
      CHECK(z.M_slot(p, piece).offset == z.M[p].offset + piece * package);
      CHECK(z.D_slot(p, piece).offset == z.D[p].offset + piece * package);
      CHECK(z.D_slot(p, piece).bytes == package);
    }
  }
  CHECK_THROWS(c.halo_slot(0, 1));
  CHECK_THROWS(z.M_slot(2, 0));
  CHECK_THROWS(slab_layout(4, 100, 8).halo_slot(0, 0));  // no KDA regions
}

TEST_CASE("zigzag NCCL staging: every other rank's keys and packages; halo outbox; slot 1 at the same place") {
  const int cp = 4;
  const SlabLayout shared = slab_layout_with_kda(cp, 64, 8, 512, 64, 192, 128, 512, 2, 128, Layout::zigzag);
  for (int rank = 0; rank < cp; ++rank) {
    CAPTURE(rank);
    std::vector<bool> nccl(size_t(cp), true);
    nccl[size_t(rank)] = false;
    const SlabLayout L = with_nccl_staging(shared, rank, nccl);
    check_layout(L);
    for (int k = 0; k < cp; ++k) {
      CAPTURE(k);
      CHECK((L.in_kv[size_t(k)].bytes > 0) == (k != rank));  // zigzag reads every other rank's keys
      CHECK(L.in_q[size_t(k)].bytes == 0);                   // and helps nobody
      // every rank's pieces fold a package of every other rank (piece 1 folds every piece 0)
      CHECK((L.in_M[size_t(k)].bytes > 0) == (k != rank));
      CHECK((L.in_D[size_t(k)].bytes > 0) == (k != rank));
    }
    CHECK(L.out_o[0].empty());
    CHECK(L.out_halo[0].bytes == L.halo[0].bytes);  // every rank sends a halo under zigzag
    if (rank != 0) {
      const int sender = rank == cp - 1 ? 0 : cp - 1;
      // a package slot lands at the same place of the sender's inbox
      const Region in1 = L.inbox(sender, L.M_slot(1, 1));
      CHECK(in1.offset == L.in_M[size_t(sender)].offset + L.M[1].bytes / 2);
      CHECK(in1.bytes >= L.M_slot(1, 1).bytes);
      CHECK(L.inbox(sender, L.D_slot(0, 0)).offset == L.in_D[size_t(sender)].offset);
    }
    // a halo slot waits at the same place of the outbox
    CHECK(L.outbox(L.halo_slot(1, 1)).offset == L.out_halo[1].offset + L.halo[1].bytes / 2);
    CHECK(L.outbox(L.halo_slot(0, 0)).offset == L.out_halo[0].offset);
  }
  // contiguous: the packages of the earlier ranks only, the halo outbox toward rank + 1
  const SlabLayout c = slab_layout_with_kda(cp, 64, 8, 512, 64, 192, 128, 512, 2, 128);
  const SlabLayout c2 = with_nccl_staging(c, 2, {true, true, false, true});
  CHECK(c2.in_M[0].bytes > 0);
  CHECK(c2.in_M[1].bytes > 0);
  CHECK(c2.in_M[3].bytes == 0);
  CHECK(c2.in_kv[3].bytes == 0);
  CHECK(c2.out_halo[0].bytes > 0);
  CHECK(with_nccl_staging(c, 3, {true, true, true, false}).out_halo[0].bytes == 0);
}
