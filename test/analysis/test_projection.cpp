// The gang projected from a serialized run (projection.h), on constructed
// timelines: a chain, a slow rank, a wait never rung, a cycle, cp 1, link
// rescaling, several streams, the MLA stripe at cp 4 built from the real
// schedule, monotone and 1-Lipschitz in any span's time, and the check
// against a real gang through files.
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <sstream>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "compare.h"
#include "profile.h"
#include "projection.h"
#include "results.h"
#include "schedule.h"
#include "slab_layout.h"
#include "temp_dir.h"

using namespace pb;

namespace {

// Builds one rep of a variant span by span; the family is the kernel's prefix.
struct Gang {
  int cp;
  int32_t rep = 0;
  VariantResult v;

  explicit Gang(int cp_, int32_t rep_ = 0) : cp(cp_), rep(rep_) { v.name = "test"; }

  int64_t span(int rank, const std::string& kernel, double us, int layer = 0, int stream = 0, double bytes = 0) {
    Span s;
    s.rep = rep;
    s.rank = rank;
    s.layer = layer;
    s.family = kernel.substr(0, kernel.find('.'));
    s.kernel = kernel;
    s.time_us = us;
    s.bytes = bytes;
    s.stream = stream;
    v.spans.push_back(s);
    return int64_t(v.spans.size()) - 1;
  }
  void ring(int64_t row, int to, Bell kind, uint64_t value) {
    const int from = v.spans[size_t(row)].rank;
    v.bells.push_back({rep, from, row, BellOpKind::ring, to, doorbell_index(cp, from, kind), bell_name(kind), value});
  }
  void wait(int64_t row, int from, Bell kind, uint64_t value) {
    const int me = v.spans[size_t(row)].rank;
    v.bells.push_back({rep, me, row, BellOpKind::wait, from, doorbell_index(cp, from, kind), bell_name(kind), value});
  }
  // A span that rings `to`'s window doorbell, and one on `to` that waits for it.
  int64_t publish(int rank, int to, int64_t seq, double us = 1) {
    const int64_t row = span(rank, "fabric.publish_window", us);
    ring(row, to, Bell::window, doorbell_value(seq, 0));
    return row;
  }
  int64_t await(int rank, int from, int64_t seq, double measured_us = 0) {
    const int64_t row = span(rank, "fabric.wait_window", measured_us);
    wait(row, from, Bell::window, doorbell_value(seq, 0));
    return row;
  }
  Projection project(const std::string& link = kMeasuredLink) const { return project_rep(v, rep, link); }
};

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

double path_us(const Projection& p, int rank, int peer, const std::string& kind) {
  for (const ProjectedWait& w : p.waits)
    if (w.rank == rank && w.peer == peer && w.kind == kind) return w.path_us;
  return 0;
}

double stall_us(const Projection& p, int rank, int peer, const std::string& kind) {
  for (const ProjectedWait& w : p.waits)
    if (w.rank == rank && w.peer == peer && w.kind == kind) return w.stall_us;
  return 0;
}

// Invariants every projection keeps: the gang's path tiles [0, TTFT] span
// after span; each rank's path splits its end into own compute and the rest.
void check_invariants(const Projection& p) {
  REQUIRE_FALSE(p.path.empty());
  CHECK(p.path.front().start_us == 0);
  CHECK(p.path.back().end_us == doctest::Approx(p.ttft_ms * 1e3));
  for (size_t i = 1; i < p.path.size(); ++i) CHECK(p.path[i].start_us == p.path[i - 1].end_us);
  for (const RankProjection& rank : p.ranks) {
    double through_peers = 0;
    for (const ProjectedWait& w : p.waits)
      if (w.rank == rank.rank) through_peers += w.path_us;
    CHECK(rank.path_compute_us + through_peers == doctest::Approx(rank.end_us));
    CHECK(rank.busy_us <= rank.end_us + 1e-9);
    CHECK(rank.idle_us == doctest::Approx(p.ttft_ms * 1e3 - rank.busy_us));
  }
}

}  // namespace

TEST_CASE("projection: doorbell_kind inverts doorbell_index") {
  for (int cp = 1; cp <= 8; ++cp)
    for (int sender = 0; sender < cp; ++sender)
      for (int kind = 0; kind < kBellKinds; ++kind)
        CHECK(doorbell_kind(cp, doorbell_index(cp, sender, Bell(kind))) == bell_name(Bell(kind)));
  CHECK(contains(error_of([] { doorbell_kind(4, 32); }), "doorbell flag 32 is outside [0, 32) at cp 4"));
  CHECK(contains(error_of([] { doorbell_kind(4, -1); }), "outside"));
}

TEST_CASE("projection: cp 1 is the sum of the spans, exactly") {
  Gang g(1);
  std::mt19937 rng(7);
  double sum = 0;
  for (int i = 0; i < 200; ++i) {
    const double us = std::uniform_real_distribution<double>(0.1, 900.0)(rng);
    g.span(0, i % 3 ? "gemm.wfu" : "land.q_a", us, i / 10);
    sum += us;
  }
  const Projection p = g.project();
  REQUIRE(p.ranks.size() == 1);
  CHECK(p.ranks[0].end_us == sum);
  CHECK(p.ttft_ms == sum / 1e3);
  CHECK(p.ranks[0].busy_us == doctest::Approx(sum));
  CHECK(p.ranks[0].wait_us == 0);
  CHECK(p.ranks[0].path_compute_us == doctest::Approx(sum));
  CHECK(p.path.size() == 200);
  CHECK(p.timeline.size() == 200);
  check_invariants(p);
}

TEST_CASE("projection: cp 1 of the committed H200 run (schema 1) is its measured superstep within 1%") {
  const RunResult run = read_results(std::string(PB_SOURCE_DIR) + "/results/h200/cp1-16k.h5");
  REQUIRE_FALSE(run.variants.empty());
  for (const VariantResult& v : run.variants) {
    CAPTURE(v.name);
    REQUIRE(can_project(v));
    const Projection p = project_variant(v, kMeasuredLink);
    REQUIRE(p.reps.size() == v.ttft_ms.size());
    for (const ProjectedRep& rep : p.reps) {
      CAPTURE(rep.rep);
      CHECK(rep.serialized_ttft_ms == v.ttft_ms[size_t(rep.rep)]);
      CHECK(std::abs(rep.ttft_ms / rep.serialized_ttft_ms - 1) < 0.01);
      CHECK(rep.host_ms == doctest::Approx(rep.serialized_ttft_ms - rep.ttft_ms).epsilon(1e-9));
    }
  }
}

TEST_CASE("projection: a chain across ranks") {
  // rank 0: 10 us of work, then its window to rank 1; rank 1: 4 us, waits,
  // 20 us, window to rank 2; rank 2 waits, 5 us.
  Gang g(3);
  g.span(0, "gemm.wfu", 10);
  g.publish(0, 1, 0, 1);
  g.span(1, "gemm.wfu", 4);
  g.await(1, 0, 0, /*measured_us=*/0.25);
  g.span(1, "fmha.dense", 20);
  g.publish(1, 2, 0, 1);
  g.await(2, 1, 0);
  g.span(2, "fmha.dense", 5);
  const Projection p = g.project();
  CHECK(p.ttft_ms * 1e3 == doctest::Approx(37));
  REQUIRE(p.ranks.size() == 3);
  CHECK(p.ranks[0].end_us == doctest::Approx(11));
  CHECK(p.ranks[1].end_us == doctest::Approx(32));
  CHECK(p.ranks[2].end_us == doctest::Approx(37));
  CHECK(p.ranks[1].wait_us == doctest::Approx(7));  // ready at 4, rung at 11
  CHECK(stall_us(p, 1, 0, "window") == doctest::Approx(7));
  CHECK(p.ranks[1].busy_us == doctest::Approx(25));  // the wait span's measured 0.25 us is dropped
  CHECK(p.ranks[2].wait_us == doctest::Approx(32));
  CHECK(p.ranks[0].idle_us == doctest::Approx(26));
  // The gang's path: rank 0's two spans, rank 1 from its wait, rank 2 from its wait.
  std::vector<std::pair<int, std::string>> steps;
  for (const PathStep& s : p.path) steps.emplace_back(s.rank, s.kernel);
  CHECK(steps == std::vector<std::pair<int, std::string>>{{0, "gemm.wfu"},
                                                          {0, "fabric.publish_window"},
                                                          {1, "fabric.wait_window"},
                                                          {1, "fmha.dense"},
                                                          {1, "fabric.publish_window"},
                                                          {2, "fabric.wait_window"},
                                                          {2, "fmha.dense"}});
  CHECK(p.path[2].peer == 0);
  CHECK(p.path[2].kind == "window");
  CHECK(p.path[2].waited_us == doctest::Approx(7));
  CHECK(p.path[3].peer == -1);
  // Rank 2's own path: 5 us on its spans, 32 us came through rank 1's window.
  CHECK(p.ranks[2].path_compute_us == doctest::Approx(5));
  CHECK(path_us(p, 2, 1, "window") == doctest::Approx(32));
  CHECK(p.ranks[1].path_compute_us == doctest::Approx(21));
  CHECK(path_us(p, 1, 0, "window") == doctest::Approx(11));
  check_invariants(p);

  const std::string text = format_projection("test", p);
  CHECK(contains(text, "TTFT 0.04 ms"));
  CHECK(contains(text, "    2*"));
  CHECK(contains(text, "rank 1 window 0.03"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 2 + 3);  // the TTFT, a header, one line per rank
}

TEST_CASE("projection: one slow rank delays its downstream ranks, not its upstream") {
  // A pipeline: rank r works, then publishes to r + 1, which waits first.
  auto build = [](double rank1_us) {
    Gang g(4);
    for (int r = 0; r < 4; ++r) {
      if (r > 0) g.await(r, r - 1, 0, /*measured_us=*/50);  // a serialized run's stale wait time
      g.span(r, "gemm.wfu", r == 1 ? rank1_us : 10);
      if (r < 3) g.publish(r, r + 1, 0, 0.5);
      g.span(r, "land.mla_o", 2);
    }
    return g.project();
  };
  const Projection fast = build(10), slow = build(25);
  CHECK(slow.ranks[0].end_us == doctest::Approx(fast.ranks[0].end_us));
  for (int r = 1; r < 4; ++r) CHECK(slow.ranks[size_t(r)].end_us == doctest::Approx(fast.ranks[size_t(r)].end_us + 15));
  CHECK(slow.ttft_ms * 1e3 == doctest::Approx(fast.ttft_ms * 1e3 + 15));
  CHECK(fast.ttft_ms * 1e3 == doctest::Approx(4 * 10 + 3 * 0.5 + 2));  // the waits' 50 us are replaced
  CHECK(slow.ranks[2].wait_us == doctest::Approx(fast.ranks[2].wait_us + 15));
  check_invariants(slow);
}

TEST_CASE("projection: a wait never rung is an error naming the rank, span and doorbell") {
  Gang g(2);
  g.span(0, "gemm.wfu", 10);
  g.publish(0, 1, 0);
  g.span(1, "gemm.wfu", 3);
  g.await(1, 0, 1);  // seq 1: rank 0 only published seq 0
  g.span(1, "fmha.dense", 5);
  const std::string message = error_of([&] { g.project(); });
  CHECK(contains(message, "variant 'test' rep 0"));
  CHECK(contains(message, "rank 1 span 3 (layer 0, fabric.wait_window)"));
  CHECK(contains(message, "doorbell 'window' from rank 0"));
  CHECK(contains(message, "(seq 1, window 0)"));
  CHECK(contains(message, "which no span of rank 0 rings in this rep"));
}

TEST_CASE("projection: a cycle of waits is an error naming each step") {
  // rank 0 waits for rank 1's window before publishing its own; rank 1 the same.
  Gang g(2);
  g.await(0, 1, 0);
  g.publish(0, 1, 0);
  g.span(1, "gemm.wfu", 2);
  g.await(1, 0, 0);
  g.publish(1, 0, 0);
  const std::string message = error_of([&] { g.project(); });
  CHECK(contains(message, "a cycle of doorbell waits"));
  CHECK(contains(message, "rank 0 span 0 (layer 0, fabric.wait_window) waits for doorbell 'window' from rank 1"));
  CHECK(contains(message, "rung by rank 1 span 4 (layer 0, fabric.publish_window), which runs after rank 1 span 3"));
  CHECK(contains(message, "rank 1 span 3 (layer 0, fabric.wait_window) waits for doorbell 'window' from rank 0"));
}

TEST_CASE("projection: inconsistent doorbell records are refused") {
  SUBCASE("several ranks, no doorbells") {
    Gang g(2);
    g.span(0, "gemm.wfu", 1);
    g.span(1, "gemm.wfu", 1);
    CHECK_FALSE(can_project(g.v));
    CHECK(contains(error_of([&] { g.project(); }), "no doorbells recorded"));
  }
  SUBCASE("a flag that is not doorbell_index(cp, sender, kind)") {
    Gang g(2);
    g.publish(0, 1, 0);
    g.await(1, 0, 0);
    g.v.bells[1].flag = doorbell_index(2, 1, Bell::window);  // the receiver's own index
    const std::string message = error_of([&] { g.project(); });
    CHECK(contains(message, "bells row 1"));
    CHECK(contains(message, "doorbell_index(cp 2, sender 0, window) is 0"));
  }
  SUBCASE("a fabric wait span without a wait") {
    Gang g(2);
    g.publish(0, 1, 0);
    g.span(1, "fabric.wait_window", 0);
    CHECK(contains(error_of([&] { g.project(); }),
                   "rank 1 span 1 (layer 0, fabric.wait_window) records no doorbell wait"));
  }
  SUBCASE("a peer outside the gang") {
    Gang g(2);
    g.publish(0, 1, 0);
    g.await(1, 0, 0);
    g.v.bells[0].peer = 2;
    CHECK(contains(error_of([&] { g.project(); }), "names peer rank 2, outside the gang of 2"));
  }
  SUBCASE("an unknown link") {
    Gang g(1);
    g.span(0, "gemm.wfu", 1);
    const std::string message = error_of([&] { g.project("pcie"); });
    CHECK(contains(message, "unknown projection link 'pcie'"));
    CHECK(contains(message, "measured, same-gpu, nvlink4, nvlink5, ib400"));
  }
}

TEST_CASE("projection: waits for calls before the rep, and for value 0, hold from its start") {
  // Rep 3 runs MLA calls 5 and 6. Rank 1's first wait for "released" asks for
  // call 4 (the last rep's); its wait at call 6 needs call 5's ring, in this rep.
  Gang g(2, 3);
  const int64_t w0 = g.span(0, "fabric.wait_released", 0);
  g.wait(w0, 1, Bell::released, doorbell_value_done(5, 1));  // call 4: before the rep
  g.wait(w0, 1, Bell::consumed, doorbell_value_done(1, 2));  // 0: nothing yet
  g.span(0, "gemm.wfu", 10);
  g.publish(0, 1, 5);
  const int64_t w1 = g.span(0, "fabric.wait_released", 0);
  g.wait(w1, 1, Bell::released, doorbell_value_done(6, 1));  // call 5: in the rep
  g.span(0, "gemm.wfu", 10);
  g.publish(0, 1, 6);
  g.await(1, 0, 5);
  g.span(1, "fmha.dense", 30);
  const int64_t r1 = g.span(1, "fabric.release_window", 1);
  g.ring(r1, 0, Bell::released, doorbell_value(5, 0));
  g.await(1, 0, 6);
  g.span(1, "fmha.dense", 30);
  const Projection p = g.project();
  CHECK(p.rep == 3);
  // rank 0: 10 + 1, then waits for rank 1's release at 11 + 30 + 1 = 42.
  CHECK(p.ranks[0].wait_us == doctest::Approx(31));
  CHECK(p.ranks[0].end_us == doctest::Approx(42 + 10 + 1));
  CHECK(p.ttft_ms * 1e3 == doctest::Approx(53 + 30));
  check_invariants(p);
}

TEST_CASE("projection: fabric copies keep their measured time or take the link's transfer time") {
  const double halo_bytes = 3 * 7168 * 2;
  Gang g(2);
  g.span(0, "gemm.wfu", 10);
  const int64_t copy = g.span(0, "fabric.publish_halo", 7.0, 0, 0, halo_bytes);
  g.ring(copy, 1, Bell::halo, doorbell_value(0, 0));
  const int64_t w = g.span(1, "fabric.wait_halo", 0.5, 0, 0, 0);
  g.wait(w, 0, Bell::halo, doorbell_value(0, 0));
  g.span(1, "gemm.halo_qkv", 3);
  CHECK(g.project().ttft_ms * 1e3 == doctest::Approx(10 + 7 + 3));
  for (const char* link : {"same-gpu", "nvlink4", "nvlink5", "ib400"}) {
    CAPTURE(link);
    const Projection p = g.project(link);
    CHECK(p.link == link);
    CHECK(p.link_source == link_profile(link).source);
    CHECK(p.ttft_ms * 1e3 == doctest::Approx(10 + link_profile(link).transfer_us(halo_bytes) + 3));
  }
  // A wait span that moves bytes (a window read in place, staged queries) takes the transfer after its wait
  // over a link; with the fabric as measured it is a wait (its measured time mixes the waiting and the copy).
  g.v.spans[size_t(w)].bytes = 1e6;
  const LinkProfile ib = link_profile("ib400");
  CHECK(g.project("ib400").ttft_ms * 1e3 == doctest::Approx(10 + ib.transfer_us(halo_bytes) + ib.transfer_us(1e6) + 3));
  CHECK(g.project().ttft_ms * 1e3 == doctest::Approx(10 + 7 + 3));
}

TEST_CASE("projection: a slower link raises the TTFT by the bytes over the bandwidth on the critical path, no more") {
  // Rank 0 publishes its window after 10 us; rank 1 reads B bytes of it, then computes 20 us. Rank 2 waits
  // for nothing and computes `other` us. The link's time counts only while rank 1's chain is the longest.
  const double bytes = 64e6;
  for (const double other : {5.0, 1e5}) {
    CAPTURE(other);
    Gang g(3);
    g.span(0, "gemm.wfu", 10);
    g.publish(0, 1, 0, 1);
    const int64_t read = g.await(1, 0, 0, /*measured_us=*/3);
    g.v.spans[size_t(read)].bytes = bytes;
    g.span(1, "fmha.dense", 20);
    g.span(2, "gemm.wfu", other);
    const double chain = 10 + 1 + 20;
    for (const char* slow : {"nvlink5", "nvlink4", "ib400"}) {
      CAPTURE(slow);
      const LinkProfile fast = link_profile("same-gpu"), link = link_profile(slow);
      const double t_fast = g.project("same-gpu").ttft_ms * 1e3, t_slow = g.project(slow).ttft_ms * 1e3;
      CHECK(t_fast == doctest::Approx(std::max(chain + fast.transfer_us(bytes), other)));
      CHECK(t_slow == doctest::Approx(std::max(chain + link.transfer_us(bytes), other)));
      if (other < chain)  // on the path: exactly the difference of the two transfers
        CHECK(t_slow - t_fast == doctest::Approx(link.transfer_us(bytes) - fast.transfer_us(bytes)));
      else  // off the path: nothing
        CHECK(t_slow == t_fast);
    }
    CHECK(g.project().ttft_ms * 1e3 == doctest::Approx(std::max(chain, other)));  // the measured wait counts 0
  }
}

TEST_CASE("projection: projections with the same outcome print once") {
  Gang g(2);
  g.span(0, "gemm.wfu", 10);
  const int64_t copy = g.span(0, "fabric.publish_halo", 7.0, 0, 0, 3 * 7168 * 2);
  g.ring(copy, 1, Bell::halo, doorbell_value(0, 0));
  const int64_t w = g.span(1, "fabric.wait_halo", 0.5, 0, 0, 0);
  g.wait(w, 0, Bell::halo, doorbell_value(0, 0));
  g.span(1, "gemm.halo_qkv", 3);
  // the same replay twice: the second is one line naming the first's link
  const std::string same = format_projections("v", {g.project("nvlink4"), g.project("nvlink4")}, "> ");
  CHECK(std::count(same.begin(), same.end(), '\n') == 5);  // heading, rank header, 2 ranks; one line
  CHECK(contains(same, "> projected gang, variant v, link nvlink4 (datasheet"));
  CHECK(contains(same, "TTFT 0.02 ms, the same as link nvlink4 (no span's time depends on the link)\n"));
  // a link that moves the copy: both tables
  const std::string differ = format_projections("v", {g.project(), g.project("ib400")});
  CHECK(std::count(differ.begin(), differ.end(), '\n') == 8);
  CHECK_FALSE(contains(differ, "the same as"));
}

TEST_CASE("projection: a rank's streams run side by side") {
  // Rank 0: stream 0 computes 20 us; stream 1 copies 8 us, then rings rank 1.
  // Rank 1 waits for it, then works 5 us.
  Gang g(2);
  g.span(0, "gemm.wfu", 20, 0, 0);
  const int64_t copy = g.span(0, "fabric.publish_halo", 8, 0, 1, 1024);
  g.ring(copy, 1, Bell::halo, doorbell_value(0, 0));
  g.span(0, "land.q_a", 4, 0, 0);
  const int64_t w = g.span(1, "fabric.wait_halo", 0);
  g.wait(w, 0, Bell::halo, doorbell_value(0, 0));
  g.span(1, "gemm.halo_qkv", 5);
  const Projection p = g.project();
  CHECK(p.ranks[0].end_us == doctest::Approx(24));
  CHECK(p.ranks[0].busy_us == doctest::Approx(24));  // the copy overlaps the GEMM
  CHECK(p.ranks[1].end_us == doctest::Approx(13));
  CHECK(p.ranks[1].wait_us == doctest::Approx(8));
  CHECK(p.ttft_ms * 1e3 == doctest::Approx(24));
  check_invariants(p);
}

TEST_CASE("projection: a dependency between a rank's own streams is a bell to itself of a kind of its own") {
  // Rank 0's stream 1 copies 8 us; stream 0 computes 3 us, then waits for the copy (an event, flag 1000).
  Gang g(1);
  const int64_t copy = g.span(0, "fabric.publish_halo", 8, 0, 1, 1024);
  g.v.bells.push_back({0, 0, copy, BellOpKind::ring, 0, 1000, "event", 1});
  g.span(0, "gemm.wfu", 3, 0, 0);
  const int64_t w = g.span(0, "fabric.wait_copy", 0.5, 0, 0);
  g.v.bells.push_back({0, 0, w, BellOpKind::wait, 0, 1000, "event", 1});
  g.span(0, "gemm.halo_qkv", 5, 0, 0);
  const Projection p = g.project();
  CHECK(p.ttft_ms * 1e3 == doctest::Approx(13));
  CHECK(p.ranks[0].wait_us == doctest::Approx(5));
  CHECK(stall_us(p, 0, 0, "event") == doctest::Approx(5));
  CHECK(p.ranks[0].path_compute_us == doctest::Approx(13));
  check_invariants(p);
  g.v.bells.pop_back();
  g.v.bells.push_back({0, 0, w, BellOpKind::wait, 0, 1000, "event", 2});  // never rung
  CHECK(contains(error_of([&] { g.project(); }), "waits for doorbell 'event' from rank 0 (flag 1000) >= 2"));
}

namespace {

// The MLA block's launches and doorbells for one call on one rank, in
// mla_block.h's order (project, attend, finish), with made-up durations: a
// dense FMHA pair takes kPairUs, the causal diagonal half of it.
constexpr double kPairUs = 100;

void mla_call(Gang& g, int rank, int64_t seq, Schedule sched, int layer) {
  const int cp = g.cp;
  auto compute = [&](const std::string& kernel, double us) { return g.span(rank, kernel, us, layer); };
  compute("rmsnorm.mla_in", 2);
  compute("gemm.wfu", 30);
  compute("land.q_a", 3);
  compute("rmsnorm.q_a", 1);
  const std::vector<int> readers = window_readers_any(cp, rank);
  if (!readers.empty()) {
    const int64_t w = compute("fabric.wait_released", 0.5);
    for (int r : readers) g.wait(w, r, Bell::released, doorbell_value_done(seq, 1));
  }
  compute("land.kv_a", 2);
  compute("land.mla_gate", 3);
  compute("rmsnorm.kv_latent", 1);
  compute("gemm.q_b", 25);
  compute("land.q_b", 4);
  if (!readers.empty()) {
    const int64_t p = compute("fabric.publish_window", 1);
    for (int r : readers) g.ring(p, r, Bell::window, doorbell_value(seq, 0));
  }
  std::vector<bool> expanded(size_t(cp), false);
  for (const RankAttention::Step& step : rank_attention(sched, cp, rank).steps) {
    if (step.is_merge) {
      if (step.merge.slot >= 0) {
        const int64_t w = compute("fabric.wait_return", 0.5);
        g.wait(w, step.merge.k, Bell::returned, doorbell_value(seq, step.merge.slot));
      }
      compute("lse_merge", 5);
      if (step.merge.slot >= 0) {
        const int64_t c = compute("fabric.release_return", 1);
        g.ring(c, step.merge.k, Bell::consumed, doorbell_value(seq, 0));
      }
      continue;
    }
    const FmhaWindow& w = step.window;
    if (!expanded[size_t(w.k)]) {
      expanded[size_t(w.k)] = true;
      if (w.k != rank) {
        const int64_t wait = compute("fabric.wait_window", 0.5);
        g.wait(wait, w.k, Bell::window, doorbell_value(seq, 0));
      }
      compute("gemm.kv_b", 10);
      compute("mla.expand_k", 4);
    }
    const bool helped = w.q != rank;
    if (helped) {
      const int64_t wait = compute("fabric.wait_queries", 0.5);
      g.wait(wait, w.q, Bell::window, doorbell_value(seq, 0));
      if (seq >= 2) g.wait(wait, w.q, Bell::consumed, doorbell_value_done(seq, 2));
    }
    compute(w.causal ? "fmha.causal" : helped ? "fmha.helped" : "fmha.dense", w.causal ? kPairUs / 2 : kPairUs);
    if (helped) {
      const int64_t p = compute("fabric.publish_return", 1);
      g.ring(p, w.q, Bell::returned, doorbell_value(seq, w.slot));
    }
  }
  const std::vector<int> read = windows_read_any(cp, rank);
  const std::vector<int> unmerged = unmerged_helpers(protocol_schedules(sched), sched, cp, rank);
  if (!read.empty()) {
    const int64_t r = compute("fabric.release_window", 1);
    for (int k : read) g.ring(r, k, Bell::released, doorbell_value(seq, 0));
    for (int k : unmerged) g.ring(r, k, Bell::consumed, doorbell_value(seq, 0));
  }
  compute("o_finalize", 3);
  compute("elementwise.mul_sigmoid", 3);
  compute("gemm.mla_o", 20);
  compute("land.mla_o", 4);
}

// `calls` MLA layers, seqs first_seq.., each rank's launches one after another
// in the table, as a run gathers them.
Gang mla_gang(int cp, Schedule sched, int calls, int64_t first_seq = 0) {
  Gang g(cp);
  for (int rank = 0; rank < cp; ++rank)
    for (int c = 0; c < calls; ++c) mla_call(g, rank, first_seq + c, sched, c);
  return g;
}

double spans_us(const Gang& g, int rank) {
  double sum = 0;
  for (const Span& s : g.v.spans)
    if (s.rank == rank) sum += s.time_us;
  return sum;
}

double wait_spans_us(const Gang& g, int rank) {
  double sum = 0;
  for (const Span& s : g.v.spans)
    if (s.rank == rank && s.kernel.rfind("fabric.wait", 0) == 0) sum += s.time_us;
  return sum;
}

}  // namespace

TEST_CASE("projection: the MLA block at cp 4 from the real schedule; the deep rank ends last") {
  for (int64_t first_seq : {0, 7}) {
    CAPTURE(first_seq);
    const Gang prefix = mla_gang(4, Schedule::prefix, 3, first_seq);
    const Gang stripe = mla_gang(4, Schedule::stripe, 3, first_seq);
    const Projection pp = prefix.project(), ps = stripe.project();
    check_invariants(pp);
    check_invariants(ps);
    // Prefix: rank 3 attends 3.5 pairs per layer, rank 0 one half; rank 3 ends
    // last, and the gang is its own work plus little waiting.
    const RankProjection& deep = pp.ranks[3];
    CHECK(deep.end_us == doctest::Approx(pp.ttft_ms * 1e3));
    for (int r = 0; r < 3; ++r) CHECK(pp.ranks[size_t(r)].end_us < deep.end_us);
    CHECK(deep.busy_us == doctest::Approx(spans_us(prefix, 3) - wait_spans_us(prefix, 3)));  // waits take 0
    CHECK(deep.wait_us < 0.05 * deep.end_us);
    double everything = 0;
    for (int r = 0; r < 4; ++r) everything += spans_us(prefix, r);
    CHECK(pp.ttft_ms * 1e3 < 0.6 * everything);  // far from the serialized sum
    // Stripe: loads 1.5, 2.5, 1.5, 2.5 pairs; the gang is faster, rank 3 still ends last.
    CHECK(ps.ttft_ms < pp.ttft_ms - 3 * 0.9 * kPairUs / 1e3);
    CHECK(ps.ranks[3].end_us == doctest::Approx(ps.ttft_ms * 1e3));
    CHECK(ps.ranks[0].end_us < ps.ranks[3].end_us);
    const std::string text = format_projection("all", ps);
    CHECK(contains(text, "    3*"));
  }
}

TEST_CASE("projection: slowing one span by d never lowers the TTFT and raises it by at most d") {
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int cp = uniform(2, 4);
    const bool streams = seed % 2 == 0;
    Gang g(cp);
    // rings[s][r]: how many windows s has published to r so far (values seq 0, 1, ...).
    std::vector<std::vector<int>> rings(size_t(cp), std::vector<int>(size_t(cp), 0));
    for (int rank = 0; rank < cp; ++rank) g.span(rank, "gemm.wfu", uniform(1, 40));
    for (int step = 0; step < 40; ++step) {
      const int rank = uniform(0, cp - 1);
      const int stream = streams ? uniform(0, 1) : 0;
      std::vector<int> senders;
      for (int s = 0; s < cp; ++s)
        if (s != rank && rings[size_t(s)][size_t(rank)] > 0) senders.push_back(s);
      if (!senders.empty() && uniform(0, 2) == 0) {  // a wait on a window already published
        const int s = senders[size_t(uniform(0, int(senders.size()) - 1))];
        const int64_t row = g.span(rank, "fabric.wait_window", uniform(0, 3), step, stream);
        g.wait(row, s, Bell::window, doorbell_value(uniform(0, rings[size_t(s)][size_t(rank)] - 1), 0));
        continue;
      }
      const int64_t row = g.span(rank, uniform(0, 1) ? "gemm.wfu" : "fmha.dense", uniform(1, 40), step, stream);
      if (uniform(0, 2) == 0) {
        int to = uniform(0, cp - 2);
        if (to >= rank) ++to;
        g.ring(row, to, Bell::window, doorbell_value(rings[size_t(rank)][size_t(to)]++, 0));
      }
    }
    const Projection base = g.project();
    check_invariants(base);
    const double ttft = base.ttft_ms * 1e3;
    for (size_t i = 0; i < g.v.spans.size(); ++i)
      for (double d : {0.25, 3.0, 50.0}) {
        CAPTURE(i);
        CAPTURE(d);
        Gang slower = g;
        slower.v.spans[i].time_us += d;
        const double t = slower.project().ttft_ms * 1e3;
        CHECK(t >= ttft - 1e-9);
        CHECK(t <= ttft + d + 1e-9);
      }
  }
}

TEST_CASE("projection: every rep, details of the median one") {
  Gang g(2);
  for (int32_t rep = 0; rep < 3; ++rep) {
    g.rep = rep;
    g.span(0, "gemm.wfu", rep == 1 ? 30 : rep == 2 ? 10 : 20);
    g.publish(0, 1, rep);
    g.await(1, 0, rep);
    g.span(1, "fmha.dense", 5);
    g.v.ttft_ms.push_back(100.0 + rep);
  }
  const Projection p = project_variant(g.v, kMeasuredLink);
  REQUIRE(p.reps.size() == 3);
  CHECK(p.reps[0].ttft_ms == doctest::Approx(0.026));
  CHECK(p.reps[1].ttft_ms == doctest::Approx(0.036));
  CHECK(p.reps[2].ttft_ms == doctest::Approx(0.016));
  CHECK(p.rep == 0);  // the median
  CHECK(p.ttft_ms == p.reps[0].ttft_ms);
  CHECK(p.reps[1].serialized_ttft_ms == 101.0);
  CHECK(p.reps[1].host_ms == doctest::Approx(101.0 - 0.036));
  for (const ProjectedSpan& s : p.timeline) CHECK(g.v.spans[size_t(s.span)].rep == 0);
  CHECK(contains(format_projection("x", p), "3 reps: min 0.02 / median 0.03 / max 0.04"));
}

TEST_CASE("projection: stored in the results file, and checked against a real gang's file") {
  const test::TempDir dir("pb-test-projection");
  // The serialized run: the prefix MLA at cp 4, two reps, its projections stored.
  Gang serialized = mla_gang(4, Schedule::prefix, 2);
  const size_t rep0 = serialized.v.spans.size(), bells0 = serialized.v.bells.size();
  for (size_t i = 0; i < rep0; ++i) {
    Span s = serialized.v.spans[i];
    s.rep = 1;
    s.time_us *= 1.01;
    serialized.v.spans.push_back(s);
  }
  for (size_t i = 0; i < bells0; ++i) {
    BellOp b = serialized.v.bells[i];
    b.rep = 1;
    b.span += int64_t(rep0);
    serialized.v.bells.push_back(b);
  }
  serialized.v.ttft_ms = {9.0, 9.1};
  serialized.v.projections = {project_variant(serialized.v, kMeasuredLink), project_variant(serialized.v, "nvlink4")};
  RunResult run;
  run.variants.push_back(serialized.v);
  write_results(dir.file("serialized.h5"), run, false);
  const VariantResult stored = read_results(dir.file("serialized.h5")).variants.at(0);
  REQUIRE(stored.projections.size() == 2);
  CHECK(stored.projections[1].link == "nvlink4");
  CHECK(stored.projections[0].ttft_ms == serialized.v.projections[0].ttft_ms);
  CHECK(stored.projections[0].path.size() == serialized.v.projections[0].path.size());
  CHECK(project_variant(stored, kMeasuredLink).ttft_ms == stored.projections[0].ttft_ms);

  // The gang: each rank's wall 2% over the projected end, TTFT 5% over.
  const Projection& projected = stored.projections[0];
  std::vector<double> projected_ttft;
  for (const ProjectedRep& rep : projected.reps) projected_ttft.push_back(rep.ttft_ms);
  const double projected_median = (projected_ttft[0] + projected_ttft[1]) / 2;
  RunResult gang_run;
  VariantResult gang;
  gang.name = "baseline";
  for (int32_t rep = 0; rep < 3; ++rep) {
    for (const RankProjection& rank : projected.ranks)
      gang.rank_reps.push_back({rep, rank.rank, rank.end_us * (rep == 1 ? 1.02 : rep == 0 ? 1.0 : 1.04),
                                rank.wait_us + 1e3, 0, 0});
    gang.ttft_ms.push_back(projected_median * 1.05 + (rep - 1) * 0.01);
  }
  gang_run.variants.push_back(gang);
  write_results(dir.file("gang.h5"), gang_run, false);
  const VariantResult measured = read_results(dir.file("gang.h5")).variants.at(0);

  const GangCheck check = compare_projection_to_gang(projected, measured);
  CHECK(check.link == "measured");
  CHECK(check.projected_ttft_ms == doctest::Approx(projected_median));
  CHECK(check.measured_ttft_ms == doctest::Approx(projected_median * 1.05));
  CHECK(check.ttft_error == doctest::Approx(1 / 1.05 - 1));
  REQUIRE(check.ranks.size() == 4);
  for (const GangCheckRank& rank : check.ranks) {
    CHECK(rank.end_error == doctest::Approx(1 / 1.02 - 1));
    CHECK(rank.measured_wait_ms == doctest::Approx(rank.projected_wait_ms + 1));
  }
  const std::string text = format_gang_check(check);
  CHECK(contains(text, "error -4.76%"));
  CHECK(std::count(text.begin(), text.end(), '\n') == 2 + 4);

  VariantResult missing_rank = measured;
  missing_rank.rank_reps.erase(std::remove_if(missing_rank.rank_reps.begin(), missing_rank.rank_reps.end(),
                                              [](const RankRep& r) { return r.rank == 2; }),
                               missing_rank.rank_reps.end());
  CHECK(contains(error_of([&] { compare_projection_to_gang(projected, missing_rank); }), "no rank_reps of rank 2"));
  VariantResult no_ttft = measured;
  no_ttft.ttft_ms.clear();
  CHECK(contains(error_of([&] { compare_projection_to_gang(projected, no_ttft); }), "has no TTFT"));

  // compare prints the stored projections of a side; none for the gang's file (no doorbells).
  CompareOptions options;
  options.file_a = dir.file("serialized.h5");
  options.file_b = dir.file("gang.h5");
  std::ostringstream out;
  run_compare(options, out);
  CHECK(contains(out.str(), "\nA: projected gang, variant test, link measured"));
  CHECK(contains(out.str(), "\nA: projected gang, variant test, link nvlink4"));
  CHECK_FALSE(contains(out.str(), "B: projected gang"));
}

TEST_CASE("projection: compare replays a file whose spans carry doorbells, and reports a replay that fails") {
  const test::TempDir dir("pb-test-projection");
  Gang g(2);
  g.span(0, "gemm.wfu", 10);
  g.publish(0, 1, 0);
  g.await(1, 0, 0);
  g.span(1, "fmha.dense", 5);
  g.v.ttft_ms = {1.0};
  RunResult run;
  run.variants.push_back(g.v);
  run.variants.back().name = "baseline";
  g.v.bells.back().value = doorbell_value(1, 0);  // never rung
  run.variants.push_back(g.v);
  run.variants.back().name = "broken";
  write_results(dir.file("run.h5"), run, false);
  CompareOptions options;
  options.file_a = dir.file("run.h5");
  options.variant_a = "baseline";
  options.variant_b = "broken";
  std::ostringstream out;
  run_compare(options, out);
  CHECK(contains(out.str(), "\nA: projected gang, variant baseline, link measured"));
  CHECK(contains(out.str(), "TTFT 0.02 ms"));
  CHECK(contains(out.str(), "\nB: no projected gang: "));
  CHECK(contains(out.str(), "projection of variant 'broken' rep 0: rank 1 span 2 (layer 0, fabric.wait_window)"));
}
