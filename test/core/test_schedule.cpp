// The CP schedule (docs/design.md §3): coverage, mirrored views, loads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <tuple>
#include <set>
#include <utility>

#include "schedule.h"

using namespace pb;

TEST_CASE("segments are contiguous, cover the context, remainder to the earlier ranks") {
  auto segs = contiguous_segments(10, 4);
  REQUIRE(segs.size() == 4);
  CHECK(segs[0].len == 3);
  CHECK(segs[1].len == 3);
  CHECK(segs[2].len == 2);
  CHECK(segs[3].len == 2);
  int64_t next = 0;
  for (const auto& s : segs) {
    CHECK(s.begin == next);
    next += s.len;
  }
  CHECK(next == 10);
  CHECK(contiguous_segments(131072, 8)[7].begin == 7 * 16384);
}

TEST_CASE("every pair (q, k <= q) is attended exactly once, for cp 1..16, both schedules") {
  for (Schedule sched : {Schedule::prefix, Schedule::stripe}) {
    for (int cp = 1; cp <= 16; ++cp) {
      CAPTURE(cp);
      std::map<std::pair<int, int>, int> runs, merges;
      for (const auto& rank : gang_attention(sched, cp)) {
        for (const auto& step : rank.steps) {
          if (step.is_merge) {
            ++merges[{rank.rank, step.merge.k}];
          } else {
            CHECK(step.window.runner == rank.rank);
            CHECK(step.window.k <= step.window.q);
            CHECK(step.window.causal == (step.window.q == step.window.k));
            ++runs[{step.window.q, step.window.k}];
          }
        }
      }
      for (int q = 0; q < cp; ++q) {
        for (int k = 0; k <= q; ++k) {
          CHECK(runs[{q, k}] == 1);
          CHECK(merges[{q, k}] == 1);  // and merged exactly once, by the owner
        }
      }
      CHECK(runs.size() == size_t(cp * (cp + 1) / 2));
    }
  }
}

TEST_CASE("owner and helper views mirror each other") {
  for (int cp = 1; cp <= 16; ++cp) {
    CAPTURE(cp);
    for (int h = 0; h < cp; ++h) {
      for (int q : helped(cp, h)) {
        CHECK(q > h);
        CHECK((q - h) % 2 == 0);
        auto owner_kept = kept(cp, q);
        CHECK(std::find(owner_kept.begin(), owner_kept.end(), h) == owner_kept.end());
      }
    }
    // The helper's slot-i window for owner q is what q merges from slot i.
    auto gang = gang_attention(Schedule::stripe, cp);
    std::set<std::tuple<int, int, int>> produced, consumed;  // (owner, helper, slot)
    for (const auto& rank : gang) {
      for (const auto& step : rank.steps) {
        if (step.is_merge && step.merge.slot >= 0) consumed.insert({rank.rank, step.merge.k, step.merge.slot});
        if (!step.is_merge && step.window.slot >= 0)
          produced.insert({step.window.q, step.window.runner, step.window.slot});
      }
    }
    CHECK(produced == consumed);
    for (const auto& [owner, helper, slot] : produced) {
      CHECK(slot < return_slots(cp));
      CHECK(helper == owner - 2 * (slot + 1));
    }
    // stripe_helpers(owner): exactly the helpers whose returns the owner merges, ascending.
    for (int owner = 0; owner < cp; ++owner) {
      std::vector<int> merged;
      for (const auto& [o, helper, slot] : consumed)
        if (o == owner) merged.push_back(helper);
      std::sort(merged.begin(), merged.end());
      CHECK(stripe_helpers(cp, owner) == merged);
      for (int h : stripe_helpers(cp, owner)) {
        const std::vector<int> q = helped(cp, h);
        CHECK(std::find(q.begin(), q.end(), owner) != q.end());
      }
    }
  }
}

TEST_CASE("the owner's merge order is kept ascending, own diagonal, then helpers by slot") {
  auto a = rank_attention(Schedule::stripe, 8, 6);
  std::vector<std::pair<int, int>> order;  // (k, slot)
  for (const auto& step : a.steps)
    if (step.is_merge) order.push_back({step.merge.k, step.merge.slot});
  std::vector<std::pair<int, int>> want = {{1, -1}, {3, -1}, {5, -1}, {6, -1}, {4, 0}, {2, 1}, {0, 2}};
  CHECK(order == want);
}

TEST_CASE("loads follow docs/design.md §3") {
  for (int cp = 1; cp <= 16; ++cp) {
    CAPTURE(cp);
    double deep = 0;
    for (int r = 0; r < cp; ++r) {
      CAPTURE(r);
      auto prefix = rank_attention(Schedule::prefix, cp, r);
      auto stripe = rank_attention(Schedule::stripe, cp, r);
      CHECK(prefix.load_pairs == doctest::Approx(r + 0.5));
      CHECK(stripe.load_pairs == doctest::Approx(expected_load(Schedule::stripe, cp, r)));
      // count the work from the steps themselves
      double counted = 0;
      for (const auto& step : stripe.steps)
        if (!step.is_merge) counted += step.window.causal ? 0.5 : 1.0;
      CHECK(counted == doctest::Approx(stripe.load_pairs));
      if (cp % 2 == 1) {
        CHECK(stripe.load_pairs == doctest::Approx(cp / 2.0));
      } else {
        double want = (r % 2 == 0) ? cp / 2.0 - 0.5 : cp / 2.0 + 0.5;
        CHECK(stripe.load_pairs == doctest::Approx(want));
      }
      deep = std::max(deep, stripe.load_pairs);
    }
    CHECK(deep <= (cp - 1 + 3) / 2.0 + 1e-9);  // the seed's "(r + 3)/2" at the deepest rank
  }
  CHECK(rank_attention(Schedule::prefix, 8, 7).load_pairs == doctest::Approx(7.5));
  CHECK(rank_attention(Schedule::stripe, 8, 7).load_pairs == doctest::Approx(4.5));
  CHECK(rank_attention(Schedule::stripe, 8, 0).load_pairs == doctest::Approx(3.5));
  CHECK(rank_attention(Schedule::prefix, 4, 3).load_pairs == doctest::Approx(3.5));
  CHECK(rank_attention(Schedule::stripe, 4, 3).load_pairs == doctest::Approx(2.5));
}

TEST_CASE("a rank expands exactly the keys its windows use") {
  for (Schedule sched : {Schedule::prefix, Schedule::stripe}) {
    for (int cp = 1; cp <= 16; ++cp) {
      for (const auto& rank : gang_attention(sched, cp)) {
        std::set<int> used, expanded(rank.key_segments.begin(), rank.key_segments.end());
        for (const auto& step : rank.steps)
          if (!step.is_merge) used.insert(step.window.k);
        CHECK(used == expanded);
        CHECK(std::is_sorted(rank.key_segments.begin(), rank.key_segments.end()));
      }
    }
  }
}

TEST_CASE("window readers mirror the windows read; prefix readers are the downstream ranks") {
  for (Schedule sched : {Schedule::prefix, Schedule::stripe})
    for (int cp = 1; cp <= 12; ++cp)
      for (int s = 0; s < cp; ++s)
        for (int k = 0; k < cp; ++k) {
          const std::vector<int> read = windows_read(sched, cp, s), readers = window_readers(sched, cp, k);
          const bool s_reads_k = std::find(read.begin(), read.end(), k) != read.end();
          const bool s_is_reader = std::find(readers.begin(), readers.end(), s) != readers.end();
          CHECK(s_reads_k == s_is_reader);
          if (s == k) CHECK(!s_reads_k);
          if (sched == Schedule::prefix) CHECK(s_reads_k == (k < s));
          // Under the stripe, s reads k's keys (s - k odd) or helps k (k - s even, > 0).
          if (sched == Schedule::stripe) CHECK(s_reads_k == ((s > k && (s - k) % 2 == 1) || (k > s && (k - s) % 2 == 0)));
        }
}

TEST_CASE("the *_any sets are the union over both schedules and mirror each other") {
  for (int cp = 1; cp <= 9; ++cp)
    for (int s = 0; s < cp; ++s)
      for (int k = 0; k < cp; ++k) {
        const std::vector<int> read = windows_read_any(cp, s), readers = window_readers_any(cp, k);
        const bool reads = std::find(read.begin(), read.end(), k) != read.end();
        CHECK(reads == (std::find(readers.begin(), readers.end(), s) != readers.end()));
        // Prefix: every upstream window; stripe adds the owners a rank helps.
        CHECK(reads == (k < s || (k > s && (k - s) % 2 == 0)));
      }
}
