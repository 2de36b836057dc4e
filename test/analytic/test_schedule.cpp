// The CP schedule (docs/design.md §3, §11): coverage, mirrored views, loads,
// merge orders, window shapes, lane segments and cut 8's overlap order (the
// KDA pieces' folds: test_schedule_kda).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <tuple>
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

TEST_CASE("the *_any sets are the union over the contiguous protocol's schedules and mirror each other") {
  for (int cp = 1; cp <= 9; ++cp)
    for (int s = 0; s < cp; ++s)
      for (int k = 0; k < cp; ++k) {
        const std::vector<int> read = windows_read_any(cp, s), readers = window_readers_any(cp, k);
        const bool reads = std::find(read.begin(), read.end(), k) != read.end();
        CHECK(reads == (std::find(readers.begin(), readers.end(), s) != readers.end()));
        // Prefix: every upstream window; stripe adds the owners a rank helps;
        // balance (even cp) the odd neighbour of an even rank.
        CHECK(reads == (k < s || (k > s && (k - s) % 2 == 0) || (cp % 2 == 0 && s % 2 == 0 && k == s + 1)));
      }
}

// ---- balance (cut 7) and zigzag ----

namespace {

// Every cut, balance included (CutSet::all() holds the cuts the device blocks run).
pb::CutSet all_cuts() {
  pb::CutSet c = pb::CutSet::all();
  c.set(pb::Cut::balance, true);
  return c;
}

const Schedule kAllSchedules[] = {Schedule::prefix, Schedule::stripe, Schedule::balance, Schedule::zigzag};

Layout layout_of(Schedule s) { return s == Schedule::zigzag ? Layout::zigzag : Layout::contiguous; }

std::vector<FmhaWindow> windows_of(const RankAttention& a) {
  std::vector<FmhaWindow> ws;
  for (const auto& step : a.steps)
    if (!step.is_merge) ws.push_back(step.window);
  return ws;
}

std::vector<MergeStep> merges_of(const RankAttention& a) {
  std::vector<MergeStep> ms;
  for (const auto& step : a.steps)
    if (step.is_merge) ms.push_back(step.merge);
  return ms;
}

bool same_window(const FmhaWindow& a, const FmhaWindow& b) {
  return a.q == b.q && a.k == b.k && a.causal == b.causal && a.runner == b.runner && a.slot == b.slot &&
         a.q_parts == b.q_parts && a.k_parts == b.k_parts;
}

bool same_steps(const RankAttention& a, const RankAttention& b) {
  if (a.steps.size() != b.steps.size() || a.key_segments != b.key_segments) return false;
  for (size_t i = 0; i < a.steps.size(); ++i) {
    const auto &x = a.steps[i], &y = b.steps[i];
    if (x.is_merge != y.is_merge) return false;
    if (x.is_merge && !(x.merge.k == y.merge.k && x.merge.slot == y.merge.slot && x.merge.rows == y.merge.rows &&
                        x.merge.reset == y.merge.reset))
      return false;
    if (!x.is_merge && !same_window(x.window, y.window)) return false;
  }
  return true;
}

// The global token of a rank's local row.
int64_t token_of(const std::vector<Segment>& ranges, int64_t row) {
  for (const Segment& s : ranges) {
    if (row < s.len) return s.begin + row;
    row -= s.len;
  }
  FAIL("local row past the rank's tokens");
  return -1;
}

// Contexts to try per layout and cp: even, odd and uneven segments (contiguous), 1 and 3 tokens a chunk (zigzag).
std::vector<int64_t> contexts(Layout layout, int cp) {
  if (layout == Layout::zigzag) return {2 * cp, 6 * cp};
  return {int64_t(cp), 2 * cp, 3 * cp, 4 * cp + (cp > 1 ? cp - 1 : 0), 5 * cp + 1};
}

// fn(schedule, cp, context, every rank's rows) for every schedule at cp 1..16 over the contexts above.
template <class Fn>
void for_each_gang(Fn fn) {
  for (Schedule sched : kAllSchedules)
    for (int cp = 1; cp <= 16; ++cp)
      for (int64_t context : contexts(layout_of(sched), cp)) {
        CAPTURE(schedule_name(sched));
        CAPTURE(cp);
        CAPTURE(context);
        fn(sched, cp, context, rank_rows(layout_of(sched), context, cp));
      }
}

// fn(schedule, cp, a rank's attention) for every rank of every schedule at cp 1..16.
template <class Fn>
void for_each_rank_attention(Fn fn) {
  for (Schedule sched : kAllSchedules)
    for (int cp = 1; cp <= 16; ++cp)
      for (const RankAttention& a : gang_attention(sched, cp)) {
        CAPTURE(schedule_name(sched));
        CAPTURE(cp);
        CAPTURE(a.rank);
        fn(sched, cp, a);
      }
}

}  // namespace

TEST_CASE("every (query token, key token <= it) is attended exactly once, through the FMHA's bottom-right mask") {
  for_each_gang([](Schedule sched, int cp, int64_t context, const std::vector<int64_t>& rows) {
    const Layout layout = layout_of(sched);
    std::map<std::pair<int64_t, int64_t>, int> seen;  // (query token, key token) -> times attended
    int64_t above = 0;                                // pairs seen with key > query
    for (const RankAttention& a : gang_attention(sched, cp))
      for (const FmhaWindow& w : windows_of(a)) {
        const WindowShape shape = window_shape(w, rows);
        const auto q_tokens = rank_tokens(layout, context, cp, w.q), k_tokens = rank_tokens(layout, context, cp, w.k);
        for (int64_t i = 0; i < shape.tq(); ++i)
          for (int64_t j = 0; j < shape.tk(); ++j) {
            if (shape.causal && j > i + shape.mask_offset()) continue;  // fmha.h: bottom-right aligned
            const int64_t tq = token_of(q_tokens, shape.q_rows.begin + i);
            const int64_t tk = token_of(k_tokens, shape.k_rows.begin + j);
            if (tk > tq) ++above;
            ++seen[{tq, tk}];
          }
      }
    CHECK(above == 0);
    CHECK(seen.size() == size_t(context * (context + 1) / 2));
    for (const auto& [pair, n] : seen) {
      CAPTURE(pair.first);
      CAPTURE(pair.second);
      CHECK(n == 1);
    }
  });
}

TEST_CASE("every (query row, key segment) is run once and merged once by its owner, rows modelled exactly") {
  for_each_gang([](Schedule sched, int cp, int64_t context, const std::vector<int64_t>& rows) {
    // (q, local row, k) -> count
    std::map<std::tuple<int, int64_t, int>, int> run, merged;
    for (const RankAttention& a : gang_attention(sched, cp)) {
      for (const FmhaWindow& w : windows_of(a)) {
        CHECK(w.runner == a.rank);
        CHECK((w.runner == w.q) == (w.slot < 0));  // helped windows, and only they, fill a return slot
        CHECK(w.causal == (w.q == w.k));
        if (w.causal) CHECK((w.q_parts == kWholeRank && w.k_parts == kWholeRank));  // no partial causal window
        const RowRange q_rows = part_rows(rows[w.q], w.q_parts);
        for (int64_t i = q_rows.begin; i < q_rows.end; ++i) ++run[{w.q, i, w.k}];
      }
      for (const MergeStep& m : merges_of(a)) {
        const RowRange r = part_rows(rows[a.rank], m.rows);
        for (int64_t i = r.begin; i < r.end; ++i) ++merged[{a.rank, i, m.k}];
      }
    }
    CHECK(run == merged);
    for (const auto& [key, n] : run) CHECK(n == 1);
    // a row meets rank k's keys exactly when k holds a token at or before the row's (k's first range is
    // its earliest): contiguous k <= q; zigzag k <= q for chunk q's rows, every k for chunk 2cp - 1 - q's
    const Layout layout = layout_of(sched);
    for (int q = 0; q < cp; ++q)
      for (int64_t i = 0; i < rows[q]; ++i)
        for (int k = 0; k < cp; ++k) {
          const bool needed = rank_tokens(layout, context, cp, k)[0].begin <= token_of(rank_tokens(layout, context, cp, q), i);
          CHECK(run.count({q, i, k}) == (needed ? 1u : 0u));
        }
  });
}

TEST_CASE("loads: balance takes every rank to exactly cp/2 at even cp and is the stripe at odd cp; zigzag cp/2") {
  for (int cp = 1; cp <= 16; ++cp) {
    CAPTURE(cp);
    for (int r = 0; r < cp; ++r) {
      CAPTURE(r);
      const RankAttention stripe = rank_attention(Schedule::stripe, cp, r);
      const RankAttention balance = rank_attention(Schedule::balance, cp, r);
      const RankAttention zigzag = rank_attention(Schedule::zigzag, cp, r);
      if (cp % 2 == 0) {
        CHECK(balance.load_pairs == cp / 2.0);  // exact: quarters of a pair add exactly
        CHECK_FALSE(same_steps(balance, stripe));
      } else {
        CHECK(same_steps(balance, stripe));
        CHECK(balance.load_pairs == stripe.load_pairs);
      }
      CHECK(zigzag.load_pairs == cp / 2.0);
      for (Schedule sched : kAllSchedules) {
        const RankAttention a = rank_attention(sched, cp, r);
        CHECK(a.load_pairs == doctest::Approx(expected_load(sched, cp, r)));
        double counted = 0;  // from the steps, in rows of an even segment: tq tk / t^2, halved when causal
        const int64_t t = 64;
        for (const FmhaWindow& w : windows_of(a)) {
          const WindowShape shape = window_shape(w, std::vector<int64_t>(cp, t));
          counted += double(shape.tq()) * double(shape.tk()) / double(t * t) * (w.causal ? 0.5 : 1.0);
        }
        CHECK(counted == a.load_pairs);
      }
    }
  }
  CHECK(rank_attention(Schedule::balance, 8, 7).load_pairs == 4.0);
  CHECK(rank_attention(Schedule::balance, 8, 0).load_pairs == 4.0);
  CHECK(rank_attention(Schedule::balance, 4, 3).load_pairs == 2.0);
}

TEST_CASE("attention_schedule: the layout, then cuts 3 and 7; balance only where it moves windows") {
  CutSet stripe = CutSet::none();
  stripe.set(Cut::stripe, true);
  const CutSet balance = all_cuts();
  for (int cp = 1; cp <= 16; ++cp) {
    CHECK(attention_schedule(CutSet::none(), Layout::contiguous, cp) == Schedule::prefix);
    CHECK(attention_schedule(stripe, Layout::contiguous, cp) == Schedule::stripe);
    CHECK(attention_schedule(balance, Layout::contiguous, cp) ==
          (cp % 2 == 0 && cp > 1 ? Schedule::balance : Schedule::stripe));
    for (const CutSet& cuts : {CutSet::none(), stripe, balance})
      CHECK(attention_schedule(cuts, Layout::zigzag, cp) == Schedule::zigzag);
  }
}

TEST_CASE("owner and helper views mirror each other under balance: slots, rows, helpers") {
  for (Schedule sched : {Schedule::stripe, Schedule::balance})
    for (int cp = 1; cp <= 16; ++cp) {
      CAPTURE(schedule_name(sched));
      CAPTURE(cp);
      std::set<std::tuple<int, int, int, int, int>> produced, consumed;  // (owner, helper, slot, parts begin, end)
      for (const RankAttention& a : gang_attention(sched, cp)) {
        for (const FmhaWindow& w : windows_of(a))
          if (w.slot >= 0) produced.insert({w.q, w.runner, w.slot, w.q_parts.begin, w.q_parts.end});
        for (const MergeStep& m : merges_of(a))
          if (m.slot >= 0) consumed.insert({a.rank, m.k, m.slot, m.rows.begin, m.rows.end});
      }
      CHECK(produced == consumed);
      std::set<std::pair<int, int>> pairs;  // one slot per (owner, helper): one consumed bell per pair and call
      for (const auto& [owner, helper, slot, b, e] : produced) {
        CHECK(pairs.insert({owner, helper}).second);
        CHECK(slot < return_slots(sched, cp));
        const bool moved = sched == Schedule::balance && slot == balance_slot(cp);
        if (moved) {
          CHECK(helper == owner - 1);
          CHECK(owner % 2 == 1);
          CHECK(b == 1);
          CHECK(e == 2);
        } else {
          CHECK(helper == owner - 2 * (slot + 1));
          CHECK(b == 0);
          CHECK(e == 2);
        }
      }
      int moved_halves = 0;
      for (const auto& entry : produced) moved_halves += std::get<2>(entry) == balance_slot(cp) && sched == Schedule::balance;
      CHECK(moved_halves == (sched == Schedule::balance && cp % 2 == 0 ? cp / 2 : 0));
      CHECK(return_slots(sched, cp) == return_slots(cp) + (sched == Schedule::balance && cp % 2 == 0 ? 1 : 0));
      for (int owner = 0; owner < cp; ++owner) {
        std::vector<int> hs;
        for (const auto& [o, helper, slot, b, e] : consumed)
          if (o == owner) hs.push_back(helper);
        std::sort(hs.begin(), hs.end());
        CHECK(helpers_of(sched, cp, owner) == hs);
        if (sched == Schedule::stripe) CHECK(stripe_helpers(cp, owner) == hs);
      }
    }
  CHECK(return_slots(Schedule::prefix, 8) == 0);
  CHECK(return_slots(Schedule::zigzag, 8) == 0);
  CHECK(balance_slot(8) == 3);
  CHECK(return_slots(Schedule::balance, 8) == 4);
}

TEST_CASE("balance: per row the merge order is the stripe's; moved rows take (o, o-1) from the slot in its place") {
  for (int cp = 1; cp <= 16; ++cp)
    for (int r = 0; r < cp; ++r) {
      CAPTURE(cp);
      CAPTURE(r);
      const std::vector<MergeStep> stripe = merges_of(rank_attention(Schedule::stripe, cp, r));
      const std::vector<MergeStep> balance = merges_of(rank_attention(Schedule::balance, cp, r));
      for (int part = 0; part < 2; ++part) {
        std::vector<int> want, got;  // the key segments merged into the part's rows, in order
        std::vector<int> got_slots;
        for (const MergeStep& m : stripe)
          if (m.rows.begin <= part && part < m.rows.end) want.push_back(m.k);
        for (const MergeStep& m : balance)
          if (m.rows.begin <= part && part < m.rows.end) {
            got.push_back(m.k);
            got_slots.push_back(m.slot);
            CHECK(m.reset == (got.size() == 1));  // the first merge into a row initializes it, and only that one
          }
        CHECK(got == want);
        // where (o, o - 1) comes from: part 0 from the owner's own half window, part 1 from the balance slot
        if (cp % 2 == 0 && r % 2 == 1) {
          const size_t at = size_t(std::find(got.begin(), got.end(), r - 1) - got.begin());
          REQUIRE(at < got.size());
          CHECK(got_slots[at] == (part == 0 ? -1 : balance_slot(cp)));
          CHECK(got[at + 1] == r);  // right before the own diagonal, as the stripe merges kept r - 1
        }
      }
    }
}

TEST_CASE("a local merge directly follows the window it merges (one o_win buffer); the helper's moved window leads") {
  for_each_rank_attention([](Schedule sched, int cp, const RankAttention& a) {
    for (size_t i = 0; i < a.steps.size(); ++i) {
      const auto& step = a.steps[i];
      if (!step.is_merge || step.merge.slot >= 0) continue;
      REQUIRE(i > 0);
      const auto& before = a.steps[i - 1];
      REQUIRE_FALSE(before.is_merge);
      CHECK(before.window.q == a.rank);
      CHECK(before.window.k == step.merge.k);
      CHECK(before.window.q_parts == step.merge.rows);
    }
    if (sched == Schedule::balance && cp % 2 == 0 && a.rank % 2 == 0) {
      const FmhaWindow& first = a.steps.front().window;
      CHECK((first.q == a.rank + 1 && first.k == a.rank && first.slot == balance_slot(cp)));
      CHECK(first.q_parts == (Parts{1, 2}));
    }
  });
}

TEST_CASE("the gang runs to the end: every return is produced before the owner merges it, none waits on balance") {
  // Unit-time replay: a window takes its pairs, an expansion or merge nothing;
  // a slot merge waits for the helper's window. Every rank finishes, and the
  // owner reaches balance's slot merge no earlier than its helper wrote it.
  for (Schedule sched : kAllSchedules)
    for (int cp = 1; cp <= 16; ++cp) {
      CAPTURE(schedule_name(sched));
      CAPTURE(cp);
      const std::vector<RankAttention> gang = gang_attention(sched, cp);
      std::vector<size_t> next(cp, 0);
      std::vector<double> clock(cp, 0);
      std::map<std::tuple<int, int, int>, double> written;  // (owner, helper, slot) -> time
      bool progress = true;
      while (progress) {
        progress = false;
        for (int r = 0; r < cp; ++r) {
          while (next[r] < gang[r].steps.size()) {
            const auto& step = gang[r].steps[next[r]];
            if (step.is_merge && step.merge.slot >= 0) {
              const auto it = written.find({r, step.merge.k, step.merge.slot});
              if (it == written.end()) break;
              if (sched == Schedule::balance && step.merge.slot == balance_slot(cp)) CHECK(it->second <= clock[r]);
              clock[r] = std::max(clock[r], it->second);
            } else if (!step.is_merge) {
              clock[r] += window_pairs(step.window);
              if (step.window.slot >= 0) written[{step.window.q, r, step.window.slot}] = clock[r];
            }
            ++next[r];
            progress = true;
          }
        }
      }
      for (int r = 0; r < cp; ++r) CHECK(next[r] == gang[r].steps.size());
    }
}

TEST_CASE("window shapes: balance's half windows and zigzag's chunks, with their masks") {
  const std::vector<int64_t> rows(8, 16384);
  // cp8, helper 0: the moved half of owner 1, rows [8192, 16384) over keys 0, dense, into slot 3
  const RankAttention helper = rank_attention(Schedule::balance, 8, 0);
  const FmhaWindow moved = helper.steps.front().window;
  const WindowShape m = window_shape(moved, rows);
  CHECK((moved.q == 1 && moved.k == 0 && moved.runner == 0 && moved.slot == 3 && !moved.causal));
  CHECK((m.q_rows.begin == 8192 && m.q_rows.end == 16384 && m.k_rows.begin == 0 && m.k_rows.end == 16384));
  CHECK((m.tq() == 8192 && m.tk() == 16384));
  // owner 1: its half over keys 0, rows [0, 8192)
  const RankAttention owner = rank_attention(Schedule::balance, 8, 1);
  const WindowShape kept_half = window_shape(owner.steps.front().window, rows);
  CHECK((kept_half.q_rows.begin == 0 && kept_half.q_rows.end == 8192 && kept_half.tk() == 16384));
  // its diagonal: whole, causal, offset 0
  for (const FmhaWindow& w : windows_of(owner))
    if (w.causal) CHECK(window_shape(w, rows).mask_offset() == 0);
  // a causal window over query part 1 of a segment and its keys [0, t): offset t/2 (bottom-right)
  FmhaWindow half_diagonal{3, 3, true, 3, -1, Parts{1, 2}, kWholeRank};
  CHECK(window_shape(half_diagonal, rows).mask_offset() == 8192);
  // zigzag cp4, 4096 tokens a chunk: rank 1 holds chunks 1 and 6
  const std::vector<int64_t> zz = rank_rows(Layout::zigzag, 8 * 4096, 4);
  CHECK(zz == std::vector<int64_t>(4, 8192));
  const auto tokens = rank_tokens(Layout::zigzag, 8 * 4096, 4, 1);
  REQUIRE(tokens.size() == 2);
  CHECK((tokens[0].begin == 4096 && tokens[1].begin == 6 * 4096));
  const std::vector<FmhaWindow> ws = windows_of(rank_attention(Schedule::zigzag, 4, 1));
  REQUIRE(ws.size() == 4);
  // k = 0: both chunks over chunk 0 (keys [0, 4096) of rank 0), dense
  CHECK((window_shape(ws[0], zz).tq() == 8192 && window_shape(ws[0], zz).k_rows.end == 4096 && !ws[0].causal));
  // k = 1: own rows, causal, offset 0
  CHECK((ws[1].causal && window_shape(ws[1], zz).tq() == 8192 && window_shape(ws[1], zz).mask_offset() == 0));
  // k = 2, 3: chunk 6 (rows [4096, 8192)) over both of k's chunks, dense
  for (int i : {2, 3}) {
    const WindowShape s = window_shape(ws[i], zz);
    CHECK((s.q_rows.begin == 4096 && s.q_rows.end == 8192 && s.tk() == 8192 && !s.causal));
  }
}

TEST_CASE("zigzag: no helped windows, one causal and cp - 1 dense half pairs per rank, merged in ascending k") {
  for (int cp = 1; cp <= 16; ++cp)
    for (const RankAttention& a : gang_attention(Schedule::zigzag, cp)) {
      CAPTURE(cp);
      CAPTURE(a.rank);
      int causal = 0;
      std::vector<int> order;
      for (const FmhaWindow& w : windows_of(a)) {
        CHECK(w.q == a.rank);
        CHECK(w.slot < 0);
        CHECK(window_pairs(w) == 0.5);
        causal += w.causal;
      }
      CHECK(causal == 1);
      for (const MergeStep& m : merges_of(a)) {
        order.push_back(m.k);
        CHECK(m.slot < 0);
        CHECK(m.reset == (order.size() == 1));
        CHECK(m.rows == (m.k > a.rank ? Parts{1, 2} : kWholeRank));
      }
      CHECK(std::is_sorted(order.begin(), order.end()));
      CHECK(int(order.size()) == cp);
      for (int k = 0; k < cp; ++k) CHECK(key_parts(a, k) == (k < a.rank ? Parts{0, 1} : kWholeRank));
    }
}

TEST_CASE("windows read: balance adds the helper o - 1 as a reader of o's window; zigzag reads every window") {
  for (Schedule sched : kAllSchedules)
    for (int cp = 1; cp <= 12; ++cp)
      for (int s = 0; s < cp; ++s)
        for (int k = 0; k < cp; ++k) {
          const std::vector<int> read = windows_read(sched, cp, s), readers = window_readers(sched, cp, k);
          const bool s_reads_k = std::find(read.begin(), read.end(), k) != read.end();
          CHECK(s_reads_k == (std::find(readers.begin(), readers.end(), s) != readers.end()));
          const std::vector<int> stripe = windows_read(Schedule::stripe, cp, s);
          const bool stripe_reads = std::find(stripe.begin(), stripe.end(), k) != stripe.end();
          if (sched == Schedule::balance)
            CHECK(s_reads_k == (stripe_reads || (cp % 2 == 0 && s % 2 == 0 && k == s + 1)));
          if (sched == Schedule::zigzag) CHECK(s_reads_k == (s != k));
        }
  // the protocol sets: every contiguous call honours prefix, stripe and balance; zigzag alone
  const std::vector<Schedule> contiguous = {Schedule::prefix, Schedule::stripe, Schedule::balance};
  for (Schedule s : {Schedule::prefix, Schedule::stripe, Schedule::balance}) CHECK(protocol_schedules(s) == contiguous);
  CHECK(protocol_schedules(Schedule::zigzag) == std::vector<Schedule>{Schedule::zigzag});
  CHECK(windows_read_any(protocol_schedules(Schedule::balance), 2, 0) == std::vector<int>{1});
  CHECK(windows_read_any(2, 0) == std::vector<int>{1});
  CHECK(windows_read_any({Schedule::prefix, Schedule::stripe}, 2, 0).empty());
}

TEST_CASE("unmerged helpers: what a call acknowledges without merging, under the contiguous protocol") {
  for (int cp = 1; cp <= 12; ++cp)
    for (int owner = 0; owner < cp; ++owner) {
      CAPTURE(cp);
      CAPTURE(owner);
      const std::vector<Schedule> protocol = protocol_schedules(Schedule::stripe);
      std::vector<int> balance_helper;  // balance's helper of an odd owner at even cp
      if (cp % 2 == 0 && owner % 2 == 1) balance_helper.push_back(owner - 1);
      // A balance call merges every helper of the protocol.
      CHECK(unmerged_helpers(protocol, Schedule::balance, cp, owner).empty());
      CHECK(unmerged_helpers(protocol, Schedule::stripe, cp, owner) == balance_helper);
      std::vector<int> all = stripe_helpers(cp, owner);
      all.insert(all.end(), balance_helper.begin(), balance_helper.end());
      std::sort(all.begin(), all.end());
      CHECK(unmerged_helpers(protocol, Schedule::prefix, cp, owner) == all);
      // Over prefix and stripe alone: the stripe's helpers, in a prefix call.
      CHECK(unmerged_helpers({Schedule::prefix, Schedule::stripe}, Schedule::prefix, cp, owner) ==
            stripe_helpers(cp, owner));
    }
}

TEST_CASE("lane segments: each rank's rows as one segment; the last token's rank") {
  for (int cp = 1; cp <= 16; ++cp)
    for (Layout layout : {Layout::contiguous, Layout::zigzag})
      for (int64_t context : contexts(layout, cp)) {
        CAPTURE(cp);
        CAPTURE(context);
        CAPTURE(layout_name(layout));
        const std::vector<Segment> segs = lane_segments(layout, context, cp);
        const std::vector<int64_t> rows = rank_rows(layout, context, cp);
        REQUIRE(int(segs.size()) == cp);
        for (int r = 0; r < cp; ++r) {
          CHECK(segs[size_t(r)].len == rows[size_t(r)]);
          CHECK(segs[size_t(r)].begin == rank_tokens(layout, context, cp, r).front().begin);
        }
        // the last token is the last local row of last_token_rank
        const std::vector<Segment> last = rank_tokens(layout, context, cp, last_token_rank(layout, cp));
        CHECK(last.back().begin + last.back().len == context);
      }
  CHECK(lane_segments(Layout::contiguous, 203, 4)[0].len == 51);
  CHECK(last_token_rank(Layout::contiguous, 8) == 7);
  CHECK(last_token_rank(Layout::zigzag, 8) == 0);
  CHECK(last_token_rank(Layout::zigzag, 1) == 0);
  CHECK_THROWS(last_token_rank(Layout::zigzag, 0));
}

namespace {

// The merges of a rank's steps (merges_of), in order, as comparable keys
// without the held mark.
std::vector<std::tuple<int, int, int, int, bool>> merge_keys(const RankAttention& a) {
  std::vector<std::tuple<int, int, int, int, bool>> m;
  for (const MergeStep& x : merges_of(a)) m.emplace_back(x.k, x.slot, x.rows.begin, x.rows.end, x.reset);
  return m;
}

// The windows of a rank's steps (windows_of), sorted, as comparable keys
// without the held mark.
std::vector<std::tuple<int, int, int, int, int, int, int>> window_keys(const RankAttention& a) {
  std::vector<std::tuple<int, int, int, int, int, int, int>> w;
  for (const FmhaWindow& x : windows_of(a))
    w.emplace_back(x.q, x.k, x.slot, x.q_parts.begin, x.q_parts.end, x.k_parts.begin, x.k_parts.end);
  std::sort(w.begin(), w.end());
  return w;
}

}  // namespace

TEST_CASE("overlap_order: the same windows, the merges in the schedule's order, the waitless windows first") {
  for_each_rank_attention([](Schedule, int, const RankAttention& a) {
    const RankAttention o = overlap_order(a);
    CHECK(o.steps.size() == a.steps.size());
    CHECK(window_keys(o) == window_keys(a));
    CHECK(merge_keys(o) == merge_keys(a));  // every row: the same merges, in the same order, the same resets
    CHECK(o.key_segments == a.key_segments);
    CHECK(o.load_pairs == a.load_pairs);
    // First the own causal window, then every helped window; no window that waits for a peer's keys before them.
    REQUIRE_FALSE(o.steps.front().is_merge);
    CHECK((o.steps.front().window.q == a.rank && o.steps.front().window.k == a.rank));
    bool peer_keys_seen = false;
    for (const auto& s : o.steps) {
      if (s.is_merge) continue;
      if (s.window.k != a.rank) peer_keys_seen = true;
      if (s.window.k == a.rank) CHECK_FALSE(peer_keys_seen);
    }
    // Buffers: a local window lands in the window buffer and is merged before the next window runs, or it
    // is held (at most one, the causal one) and merged from the held buffer later; nothing else reads it.
    int window_buffer = -1, held = -1;  // the step index of the window each buffer holds; -1 empty
    int held_windows = 0;
    for (size_t i = 0; i < o.steps.size(); ++i) {
      const auto& s = o.steps[i];
      if (!s.is_merge) {
        CHECK(window_buffer < 0);  // a local window's output not merged yet would be overwritten
        held_windows += s.window.held;
        if (s.window.held) {
          CHECK((s.window.q == a.rank && s.window.causal));
          held = int(i);
        } else if (s.window.q == a.rank) {
          window_buffer = int(i);
        }
        continue;
      }
      if (s.merge.slot >= 0) continue;
      const int from = s.merge.held ? held : window_buffer;
      REQUIRE(from >= 0);
      CHECK(o.steps[size_t(from)].window.k == s.merge.k);
      CHECK(o.steps[size_t(from)].window.q_parts == s.merge.rows);
      if (s.merge.held) held = -1;
      else if (s.merge.rows.end == o.steps[size_t(from)].window.q_parts.end) window_buffer = -1;
    }
    CHECK(held_windows <= 1);
    CHECK(held < 0);
    CHECK(window_buffer < 0);
    // Without a merge before the causal one (rank 0 of the contiguous schedules), nothing is held.
    const bool merge_first = a.steps.size() > 1 && a.steps[1].is_merge && a.steps[1].merge.k == a.rank &&
                             a.steps[1].merge.slot < 0 && !a.steps[0].is_merge && a.steps[0].window.k == a.rank &&
                             a.steps[0].window.q == a.rank;
    if (merge_first) CHECK(held_windows == 0);
  });
}

TEST_CASE("overlap_order at cp 4, stripe rank 3: its diagonal held ahead of the kept windows") {
  // stripe rank 3: kept 2, 0; diagonal; slot 0 merges helper 1. Overlapped: diagonal (held), then kept (3, 0),
  // (3, 2) with their merges, the diagonal's merge from the held buffer, the slot merge.
  const RankAttention o = overlap_order(rank_attention(Schedule::stripe, 4, 3));
  REQUIRE(o.steps.size() == 7);
  CHECK((o.steps[0].window.k == 3 && o.steps[0].window.held));
  CHECK((o.steps[1].window.k == 0 && !o.steps[1].window.held));
  CHECK((o.steps[2].is_merge && o.steps[2].merge.k == 0 && o.steps[2].merge.reset));
  CHECK(o.steps[3].window.k == 2);
  CHECK((o.steps[5].is_merge && o.steps[5].merge.k == 3 && o.steps[5].merge.held));
  CHECK((o.steps[6].is_merge && o.steps[6].merge.slot == 0 && o.steps[6].merge.k == 1));
  // Rank 0 at cp 4 under the stripe: diagonal, its merge, then its helped window for rank 2: nothing held.
  const RankAttention r0 = overlap_order(rank_attention(Schedule::stripe, 4, 0));
  REQUIRE(r0.steps.size() == 3);
  CHECK((!r0.steps[0].window.held && r0.steps[1].is_merge && !r0.steps[1].merge.held && r0.steps[2].window.q == 2));
  // launch_attention: the schedule's order without cut 8
  CutSet c = CutSet::none();
  c.set(Cut::stripe, true);
  CHECK(merge_keys(launch_attention(c, Layout::contiguous, 4, 3)) == merge_keys(o));
  CHECK(launch_attention(c, Layout::contiguous, 4, 3).steps[0].window.k == 0);
  c.set(Cut::overlap, true);
  CHECK(launch_attention(c, Layout::contiguous, 4, 3).steps[0].window.k == 3);
}
