#include "schedule.h"

#include <algorithm>
#include <set>

#include "check.h"

namespace pb {

std::vector<Segment> contiguous_segments(int64_t context, int cp) {
  PB_CHECK(cp >= 1 && context >= cp, "contiguous_segments needs cp >= 1 and context >= cp");
  std::vector<Segment> segs(cp);
  const int64_t base = context / cp, extra = context % cp;
  int64_t begin = 0;
  for (int r = 0; r < cp; ++r) {
    segs[r] = {begin, base + (r < extra ? 1 : 0)};
    begin += segs[r].len;
  }
  return segs;
}

std::vector<int> kept(int cp, int owner) {
  std::vector<int> ks;
  for (int k = 0; k < owner && k < cp; ++k)
    if ((owner - k) % 2 == 1) ks.push_back(k);
  return ks;
}

std::vector<int> helped(int cp, int helper) {
  std::vector<int> qs;
  for (int q = helper + 2; q < cp; q += 2) qs.push_back(q);
  return qs;
}

int return_slots(int cp) { return (cp - 1) / 2; }

std::vector<int> stripe_helpers(int cp, int owner) {
  std::vector<int> ks;
  for (int slot = return_slots(cp) - 1; slot >= 0; --slot)
    if (owner - 2 * (slot + 1) >= 0) ks.push_back(owner - 2 * (slot + 1));
  return ks;
}

namespace {

RankAttention::Step fmha_step(int q, int k, int runner, int slot) {
  RankAttention::Step s;
  s.window = {q, k, q == k, runner, slot};
  return s;
}

RankAttention::Step merge_step(int k, int slot) {
  RankAttention::Step s;
  s.is_merge = true;
  s.merge = {k, slot};
  return s;
}

RankAttention prefix_attention(int rank) {
  RankAttention a;
  a.rank = rank;
  for (int k = 0; k <= rank; ++k) {
    a.key_segments.push_back(k);
    a.steps.push_back(fmha_step(rank, k, rank, -1));
    a.steps.push_back(merge_step(k, -1));
  }
  a.load_pairs = rank + 0.5;
  return a;
}

RankAttention stripe_attention(int cp, int rank) {
  RankAttention a;
  a.rank = rank;
  const std::vector<int> own_kept = kept(cp, rank);
  const std::vector<int> own_helped = helped(cp, rank);
  a.key_segments = own_kept;
  a.key_segments.push_back(rank);
  for (int k : own_kept) {
    a.steps.push_back(fmha_step(rank, k, rank, -1));
    a.steps.push_back(merge_step(k, -1));
  }
  a.steps.push_back(fmha_step(rank, rank, rank, -1));
  a.steps.push_back(merge_step(rank, -1));
  for (int slot = 0; slot < return_slots(cp); ++slot) {
    if (slot < int(own_helped.size()))
      a.steps.push_back(fmha_step(own_helped[slot], rank, rank, slot));
    const int helper = rank - 2 * (slot + 1);
    if (helper >= 0) a.steps.push_back(merge_step(helper, slot));
  }
  a.load_pairs = 0.5 + double(own_kept.size()) + double(own_helped.size());
  return a;
}

}  // namespace

RankAttention rank_attention(Schedule schedule, int cp, int rank) {
  PB_CHECK(cp >= 1 && rank >= 0 && rank < cp, "rank_attention: rank out of range");
  return schedule == Schedule::prefix ? prefix_attention(rank) : stripe_attention(cp, rank);
}

std::vector<RankAttention> gang_attention(Schedule schedule, int cp) {
  std::vector<RankAttention> gang;
  for (int r = 0; r < cp; ++r) gang.push_back(rank_attention(schedule, cp, r));
  return gang;
}

std::vector<int> windows_read(Schedule schedule, int cp, int rank) {
  const RankAttention a = rank_attention(schedule, cp, rank);
  std::set<int> read;
  for (int k : a.key_segments)
    if (k != rank) read.insert(k);
  for (const auto& step : a.steps)
    if (!step.is_merge && step.window.q != rank) read.insert(step.window.q);
  return {read.begin(), read.end()};
}

std::vector<int> window_readers(Schedule schedule, int cp, int k) {
  PB_CHECK(cp >= 1 && k >= 0 && k < cp, "window_readers: rank out of range");
  std::vector<int> readers;
  for (int s = 0; s < cp; ++s) {
    const std::vector<int> read = windows_read(schedule, cp, s);
    if (std::find(read.begin(), read.end(), k) != read.end()) readers.push_back(s);
  }
  return readers;
}

namespace {
std::vector<int> sorted_union(const std::vector<int>& a, const std::vector<int>& b) {
  std::set<int> u(a.begin(), a.end());
  u.insert(b.begin(), b.end());
  return {u.begin(), u.end()};
}
}  // namespace

std::vector<int> windows_read_any(int cp, int rank) {
  return sorted_union(windows_read(Schedule::prefix, cp, rank), windows_read(Schedule::stripe, cp, rank));
}

std::vector<int> window_readers_any(int cp, int k) {
  return sorted_union(window_readers(Schedule::prefix, cp, k), window_readers(Schedule::stripe, cp, k));
}

double expected_load(Schedule schedule, int cp, int rank) {
  if (schedule == Schedule::prefix) return rank + 0.5;
  return 0.5 + double(kept(cp, rank).size()) + double(helped(cp, rank).size());
}

}  // namespace pb
