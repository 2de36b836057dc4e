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

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::prefix: return "prefix";
    case Schedule::stripe: return "stripe";
    case Schedule::balance: return "balance";
    case Schedule::zigzag: return "zigzag";
  }
  return "?";
}

Schedule attention_schedule(const CutSet& cuts, Layout layout, int cp) {
  if (layout == Layout::zigzag) return Schedule::zigzag;
  if (!cuts[Cut::stripe]) return Schedule::prefix;
  return cuts[Cut::balance] && balance_moves(cp) ? Schedule::balance : Schedule::stripe;
}

std::vector<int> rank_chunks(Layout layout, int cp, int rank) {
  PB_CHECK(cp >= 1 && rank >= 0 && rank < cp, "rank_chunks: rank out of range");
  if (layout == Layout::zigzag) return {rank, 2 * cp - 1 - rank};
  return {2 * rank, 2 * rank + 1};
}

std::vector<Segment> rank_tokens(Layout layout, int64_t context, int cp, int rank) {
  if (layout == Layout::contiguous) return {contiguous_segments(context, cp).at(size_t(rank))};
  PB_CHECK(cp >= 1 && context % (2 * cp) == 0, "rank_tokens: the zigzag layout needs context divisible by 2*cp");
  const int64_t chunk = context / (2 * cp);
  std::vector<Segment> out;
  for (int c : rank_chunks(layout, cp, rank)) out.push_back({c * chunk, chunk});
  return out;
}

std::vector<int64_t> rank_rows(Layout layout, int64_t context, int cp) {
  std::vector<int64_t> rows;
  for (int r = 0; r < cp; ++r) {
    int64_t n = 0;
    for (const Segment& s : rank_tokens(layout, context, cp, r)) n += s.len;
    rows.push_back(n);
  }
  return rows;
}

std::vector<Segment> lane_segments(Layout layout, int64_t context, int cp) {
  if (layout == Layout::contiguous) return contiguous_segments(context, cp);
  std::vector<Segment> segs;
  for (int r = 0; r < cp; ++r) {
    const std::vector<Segment> mine = rank_tokens(layout, context, cp, r);
    segs.push_back({mine.front().begin, mine.front().len + mine.back().len});
  }
  return segs;
}

int last_token_rank(Layout layout, int cp) {
  PB_CHECK(cp >= 1, "last_token_rank: cp < 1");
  return layout == Layout::zigzag ? 0 : cp - 1;
}

RowRange part_rows(int64_t rows, Parts parts) {
  PB_CHECK(parts.begin >= 0 && parts.begin < parts.end && parts.end <= 2, "part_rows: parts out of range");
  const int64_t half = rows / 2;
  return {parts.begin == 0 ? 0 : half, parts.end == 1 ? half : rows};
}

double window_pairs(const FmhaWindow& w) {
  return (w.causal ? 0.5 : 1.0) * w.q_parts.count() * w.k_parts.count() / 4.0;
}

Parts key_parts(const RankAttention& a, int k) {
  Parts hull{2, 0};
  for (const auto& step : a.steps)
    if (!step.is_merge && step.window.k == k) {
      hull.begin = std::min(hull.begin, step.window.k_parts.begin);
      hull.end = std::max(hull.end, step.window.k_parts.end);
    }
  PB_CHECK(hull.begin < hull.end, "key_parts: rank " + std::to_string(a.rank) + " runs no window over keys " +
                                      std::to_string(k));
  return hull;
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

int balance_slot(int cp) { return return_slots(cp); }

bool balance_moves(int cp) { return cp >= 2 && cp % 2 == 0; }

int return_slots(Schedule schedule, int cp) {
  switch (schedule) {
    case Schedule::stripe: return return_slots(cp);
    case Schedule::balance: return return_slots(cp) + (balance_moves(cp) ? 1 : 0);
    default: return 0;
  }
}

namespace {

RankAttention::Step fmha_step(int q, int k, int runner, int slot, Parts q_parts = kWholeRank,
                              Parts k_parts = kWholeRank) {
  RankAttention::Step s;
  s.window = {q, k, q == k, runner, slot, q_parts, k_parts};
  return s;
}

RankAttention::Step merge_step(int k, int slot, Parts rows = kWholeRank) {
  RankAttention::Step s;
  s.is_merge = true;
  s.merge = {k, slot, rows, false};
  return s;
}

// The derived fields: expansions (ascending), load, and each merge's reset
// (the first merge into its rows).
RankAttention finished(RankAttention a) {
  std::set<int> keys;
  bool merged[2] = {false, false};
  a.load_pairs = 0;
  for (auto& step : a.steps) {
    if (!step.is_merge) {
      keys.insert(step.window.k);  // every window a rank lists it runs
      a.load_pairs += window_pairs(step.window);
      continue;
    }
    const Parts rows = step.merge.rows;
    const bool fresh = !merged[rows.begin] && !merged[rows.end - 1];
    PB_CHECK(fresh || (merged[rows.begin] && merged[rows.end - 1]),
             "schedule: a merge covers rows of which only some were merged before");
    step.merge.reset = fresh;
    for (int p = rows.begin; p < rows.end; ++p) merged[p] = true;
  }
  a.key_segments.assign(keys.begin(), keys.end());
  return a;
}

RankAttention prefix_attention(int rank) {
  RankAttention a;
  a.rank = rank;
  for (int k = 0; k <= rank; ++k) {
    a.steps.push_back(fmha_step(rank, k, rank, -1));
    a.steps.push_back(merge_step(k, -1));
  }
  return finished(a);
}

// The stripe, with balance's moved half windows when `balanced` (even cp).
RankAttention stripe_attention(int cp, int rank, bool balanced) {
  RankAttention a;
  a.rank = rank;
  const std::vector<int> own_kept = kept(cp, rank);
  const std::vector<int> own_helped = helped(cp, rank);
  const bool gives = balanced && rank % 2 == 1;                  // owner of a moved half
  const bool takes = balanced && rank % 2 == 0 && rank + 1 < cp;  // its helper
  if (takes) a.steps.push_back(fmha_step(rank + 1, rank, rank, balance_slot(cp), Parts{1, 2}));
  for (int k : own_kept) {
    if (gives && k == rank - 1) {
      a.steps.push_back(fmha_step(rank, k, rank, -1, Parts{0, 1}));
      a.steps.push_back(merge_step(k, -1, Parts{0, 1}));
      a.steps.push_back(merge_step(k, balance_slot(cp), Parts{1, 2}));
      continue;
    }
    a.steps.push_back(fmha_step(rank, k, rank, -1));
    a.steps.push_back(merge_step(k, -1));
  }
  a.steps.push_back(fmha_step(rank, rank, rank, -1));
  a.steps.push_back(merge_step(rank, -1));
  for (int slot = 0; slot < return_slots(cp); ++slot) {
    if (slot < int(own_helped.size())) a.steps.push_back(fmha_step(own_helped[slot], rank, rank, slot));
    const int helper = rank - 2 * (slot + 1);
    if (helper >= 0) a.steps.push_back(merge_step(helper, slot));
  }
  return finished(a);
}

RankAttention zigzag_attention(int cp, int rank) {
  RankAttention a;
  a.rank = rank;
  for (int k = 0; k < cp; ++k) {
    const Parts q_parts = k > rank ? Parts{1, 2} : kWholeRank;
    const Parts k_parts = k < rank ? Parts{0, 1} : kWholeRank;
    a.steps.push_back(fmha_step(rank, k, rank, -1, q_parts, k_parts));
    a.steps.push_back(merge_step(k, -1, q_parts));
  }
  return finished(a);
}

}  // namespace

RankAttention rank_attention(Schedule schedule, int cp, int rank) {
  PB_CHECK(cp >= 1 && rank >= 0 && rank < cp, "rank_attention: rank out of range");
  switch (schedule) {
    case Schedule::prefix: return prefix_attention(rank);
    case Schedule::stripe: return stripe_attention(cp, rank, false);
    case Schedule::balance: return stripe_attention(cp, rank, balance_moves(cp));
    case Schedule::zigzag: return zigzag_attention(cp, rank);
  }
  PB_CHECK(false, "rank_attention: unknown schedule");
  return {};
}

RankAttention overlap_order(const RankAttention& a) {
  const int me = a.rank;
  const auto is_causal_window = [&](const RankAttention::Step& s) {
    return !s.is_merge && s.window.q == me && s.window.k == me;
  };
  const auto is_causal_merge = [&](const RankAttention::Step& s) {
    return s.is_merge && s.merge.slot < 0 && s.merge.k == me;
  };
  const auto is_helped = [&](const RankAttention::Step& s) { return !s.is_merge && s.window.q != me; };
  const auto causal = std::find_if(a.steps.begin(), a.steps.end(), is_causal_window);
  const auto causal_merge = std::find_if(a.steps.begin(), a.steps.end(), is_causal_merge);
  const bool has_causal = causal != a.steps.end();
  PB_CHECK(has_causal == (causal_merge != a.steps.end()) && (!has_causal || causal < causal_merge),
           "overlap_order: a causal window without its merge after it");
  const bool merge_before = std::any_of(a.steps.begin(), causal_merge, [](const auto& s) { return s.is_merge; });
  RankAttention out = a;
  out.steps.clear();
  if (has_causal) {
    out.steps.push_back(*causal);
    out.steps.back().window.held = merge_before;
    if (!merge_before) out.steps.push_back(*causal_merge);
  }
  for (const auto& s : a.steps)
    if (is_helped(s)) out.steps.push_back(s);
  for (const auto& s : a.steps) {
    if (is_helped(s) || is_causal_window(s) || (!merge_before && is_causal_merge(s))) continue;
    out.steps.push_back(s);
    if (is_causal_merge(s)) out.steps.back().merge.held = true;
  }
  return out;
}

RankAttention launch_attention(const CutSet& cuts, Layout layout, int cp, int rank) {
  const RankAttention a = rank_attention(attention_schedule(cuts, layout, cp), cp, rank);
  return cuts[Cut::overlap] ? overlap_order(a) : a;
}

std::vector<RankAttention> gang_attention(Schedule schedule, int cp) {
  std::vector<RankAttention> gang;
  for (int r = 0; r < cp; ++r) gang.push_back(rank_attention(schedule, cp, r));
  return gang;
}

std::vector<int> helpers_of(Schedule schedule, int cp, int owner) {
  std::set<int> hs;
  for (const auto& step : rank_attention(schedule, cp, owner).steps)
    if (step.is_merge && step.merge.slot >= 0) hs.insert(step.merge.k);
  return {hs.begin(), hs.end()};
}

WindowShape window_shape(const FmhaWindow& w, const std::vector<int64_t>& rows_of_rank) {
  PB_CHECK(w.q >= 0 && w.k >= 0 && w.q < int(rows_of_rank.size()) && w.k < int(rows_of_rank.size()),
           "window_shape: a window's ranks lie outside the gang");
  return {part_rows(rows_of_rank[size_t(w.q)], w.q_parts), part_rows(rows_of_rank[size_t(w.k)], w.k_parts), w.causal};
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

std::vector<Schedule> protocol_schedules(Schedule schedule) {
  if (schedule == Schedule::zigzag) return {Schedule::zigzag};
  return {Schedule::prefix, Schedule::stripe, Schedule::balance};
}

std::vector<int> windows_read_any(const std::vector<Schedule>& schedules, int cp, int rank) {
  std::set<int> u;
  for (Schedule s : schedules)
    for (int k : windows_read(s, cp, rank)) u.insert(k);
  return {u.begin(), u.end()};
}

std::vector<int> window_readers_any(const std::vector<Schedule>& schedules, int cp, int k) {
  std::set<int> u;
  for (Schedule s : schedules)
    for (int r : window_readers(s, cp, k)) u.insert(r);
  return {u.begin(), u.end()};
}

std::vector<int> windows_read_any(int cp, int rank) {
  return windows_read_any(protocol_schedules(Schedule::stripe), cp, rank);
}

std::vector<int> window_readers_any(int cp, int k) {
  return window_readers_any(protocol_schedules(Schedule::stripe), cp, k);
}

std::vector<int> unmerged_helpers(const std::vector<Schedule>& protocol, Schedule schedule, int cp, int owner) {
  std::set<int> any;
  for (Schedule s : protocol)
    for (int k : helpers_of(s, cp, owner)) any.insert(k);
  for (int k : helpers_of(schedule, cp, owner)) any.erase(k);
  return {any.begin(), any.end()};
}

std::vector<FmhaWindow> helped_windows_any(const std::vector<Schedule>& protocol, int cp, int rank) {
  std::vector<FmhaWindow> out;
  for (Schedule s : protocol)
    for (const auto& step : rank_attention(s, cp, rank).steps) {
      const FmhaWindow& w = step.window;
      if (step.is_merge || w.q == rank) continue;
      bool seen = false;
      for (const FmhaWindow& o : out) seen = seen || (o.q == w.q && o.slot == w.slot);
      if (!seen) out.push_back(w);
    }
  std::sort(out.begin(), out.end(), [](const FmhaWindow& a, const FmhaWindow& b) { return a.slot < b.slot; });
  return out;
}

double expected_load(Schedule schedule, int cp, int rank) {
  switch (schedule) {
    case Schedule::prefix: return rank + 0.5;
    case Schedule::zigzag: return cp / 2.0;
    case Schedule::balance:
      if (balance_moves(cp)) return cp / 2.0;
      [[fallthrough]];
    case Schedule::stripe: return 0.5 + double(kept(cp, rank).size()) + double(helped(cp, rank).size());
  }
  return 0;
}

// ---- KDA across ranks ----

namespace {

// Every rank's pieces with their chunks and parts; fold, halo and readers left empty.
std::vector<std::vector<KdaPiece>> bare_pieces(Layout layout, int cp) {
  std::vector<std::vector<KdaPiece>> gang(cp);
  for (int r = 0; r < cp; ++r) {
    const std::vector<int> chunks = rank_chunks(layout, cp, r);
    for (int p = 0; p < int(chunks.size()); ++p) {
      if (p > 0 && chunks[p] == chunks[p - 1] + 1) {  // continues the previous piece
        gang[r].back().last_chunk = chunks[p];
        gang[r].back().parts.end = p + 1;
        continue;
      }
      KdaPiece piece;
      piece.self = {r, int(gang[r].size())};
      piece.parts = {p, p + 1};
      piece.first_chunk = piece.last_chunk = chunks[p];
      gang[r].push_back(piece);
    }
  }
  return gang;
}

}  // namespace

std::vector<KdaPiece> kda_pieces(Layout layout, int cp, int rank) {
  PB_CHECK(cp >= 1 && rank >= 0 && rank < cp, "kda_pieces: rank out of range");
  std::vector<std::vector<KdaPiece>> gang = bare_pieces(layout, cp);
  std::vector<KdaPiece*> in_order;  // every piece of the gang, in token order
  for (auto& pieces : gang)
    for (auto& piece : pieces) in_order.push_back(&piece);
  std::sort(in_order.begin(), in_order.end(),
            [](const KdaPiece* a, const KdaPiece* b) { return a->first_chunk < b->first_chunk; });
  for (size_t i = 0; i < in_order.size(); ++i) {
    KdaPiece& piece = *in_order[i];
    for (size_t j = 0; j < i; ++j) {
      KdaPiece& earlier = *in_order[j];
      piece.fold.push_back(earlier.self);
      earlier.package = true;
      if (earlier.self.rank != piece.self.rank) earlier.package_readers.push_back(piece.self.rank);
    }
    if (i > 0) {
      KdaPiece& before = *in_order[i - 1];
      PB_CHECK(before.last_chunk + 1 == piece.first_chunk, "kda_pieces: the pieces do not tile the chunks");
      piece.halo = before.self;
      if (before.self.rank != piece.self.rank) before.halo_readers.push_back(piece.self.rank);
    }
  }
  std::vector<KdaPiece> mine = gang[size_t(rank)];
  for (KdaPiece& piece : mine) {
    std::set<int> readers(piece.package_readers.begin(), piece.package_readers.end());
    piece.package_readers.assign(readers.begin(), readers.end());
  }
  return mine;
}

}  // namespace pb
