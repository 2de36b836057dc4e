// The gang under mpirun -np 4 --oversubscribe: scenario broadcast, result
// gather, local ranks.
#include <doctest/doctest.h>

#include <set>

#include "mpi_test.h"
#include "plan.h"
#include "scenario.h"

using namespace pb;
using pb::test::g_gang;

TEST_CASE("the gang has 4 ranks on one host, local ranks 0..3") {
  REQUIRE(g_gang->size() == 4);
  CHECK(g_gang->local_size() == 4);
  CHECK(g_gang->local_rank() == g_gang->rank());
  CHECK(g_gang->describe().find("rank " + std::to_string(g_gang->rank()) + "/4") != std::string::npos);
}

TEST_CASE("rank 0's scenario text reaches every rank, and every rank parses the same scenario") {
  std::string text = g_gang->is_root() ? "name: b\nmodel: {preset: tiny}\ncp: 4\ncontext: 1024\n" : "garbage";
  std::string got = g_gang->broadcast(text);
  Scenario s = parse_scenario(got, "bcast.yaml");
  CHECK(s.name == "b");
  CHECK(s.cp == 4);
  CHECK(world_size_problem(s, g_gang->size(), false).empty());
  // a large payload crosses too
  std::string big = g_gang->is_root() ? std::string(5 << 20, 'x') : "";
  CHECK(g_gang->broadcast(big).size() == size_t(5 << 20));
}

TEST_CASE("each rank's plan spans gather to rank 0 in rank order") {
  Scenario s = parse_scenario("name: g\nmodel: {preset: tiny}\ncp: 4\ncontext: 1024\n", "g.yaml");
  GpuProfile p = gpu_profile("h200");
  std::vector<Span> mine = plan_spans(plan_rank(s, CutSet::all(), g_gang->rank()), p);
  std::vector<std::string> parts = g_gang->gather(pack_spans(mine));
  if (g_gang->is_root()) {
    REQUIRE(parts.size() == 4);
    for (int r = 0; r < 4; ++r) {
      std::vector<Span> spans = unpack_spans(parts[r]);
      std::vector<Span> want = plan_spans(plan_rank(s, CutSet::all(), r), p);
      REQUIRE(spans.size() == want.size());
      for (size_t i = 0; i < spans.size(); ++i) {
        CHECK(spans[i].rank == r);
        CHECK(spans[i].kernel == want[i].kernel);
        CHECK(spans[i].bytes == want[i].bytes);
      }
    }
  } else {
    CHECK(parts.empty());
  }
  RankRep rr;
  rr.rank = g_gang->rank();
  rr.wall_us = 100.0 * g_gang->rank();
  std::vector<std::string> reps = g_gang->gather(pack_rank_reps({rr}));
  if (g_gang->is_root()) {
    for (int r = 0; r < 4; ++r) CHECK(unpack_rank_reps(reps[r]).at(0).wall_us == 100.0 * r);
  }
}

TEST_CASE("each rank's spans (with streams) and doorbells gather to rank 0 into one variant") {
  const int me = g_gang->rank();
  const std::vector<Span> spans = {{0, me, 3, "gemm", "gemm.wfu", 10.0 + me, 0, 0, 0},
                                   {0, me, 3, "fabric", "fabric.publish_window", 1.0, 0, 0, me % 2}};
  const int flag = me;  // doorbell_index(4, me, window)
  const std::vector<BellOp> bells = {{0, me, 1, BellOpKind::ring, (me + 1) % 4, flag, "window", 4096ull + uint64_t(me)}};
  const std::vector<std::string> span_parts = g_gang->gather(pack_spans(spans));
  const std::vector<std::string> bell_parts = g_gang->gather(pack_bells(bells));
  if (!g_gang->is_root()) return;
  VariantResult v;
  for (int r = 0; r < 4; ++r) append_spans(v, unpack_spans(span_parts[size_t(r)]), unpack_bells(bell_parts[size_t(r)]));
  REQUIRE(v.spans.size() == 8);
  REQUIRE(v.bells.size() == 4);
  for (int r = 0; r < 4; ++r) {
    const BellOp& bell = v.bells[size_t(r)];
    CHECK(bell.rank == r);
    CHECK(bell.span == 2 * r + 1);
    CHECK(bell.op == BellOpKind::ring);
    CHECK(bell.peer == (r + 1) % 4);
    CHECK(bell.flag == r);
    CHECK(bell.kind == "window");
    CHECK(bell.value == 4096ull + uint64_t(r));
    CHECK(v.spans[size_t(bell.span)].stream == r % 2);
    CHECK(v.spans[size_t(bell.span)].rank == r);
  }
}
