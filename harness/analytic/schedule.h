// The CP lane's schedule (docs/design.md §3, §11): a pure function of cp, no CUDA.
//
// Work unit: the segment pair (q, k) = FMHA of rank q's queries over rank k's
// keys, k <= q. The diagonal (q, q) is causal (half a pair); the rest dense.
// A window may cover part of a rank's rows: every rank's local rows split in
// two halves ("parts"), part 0 = rows [0, t/2), part 1 = rows [t/2, t) of its
// t rows, and a window names the parts of the query rank and of the key rank
// it covers (Parts; whole ranks unless said). Its work in pairs is
// |q parts| / 2 · |k parts| / 2, halved when causal.
//
//   prefix (baseline): rank r attends every k <= r itself; load r + 1/2.
//   stripe (cut 3):    off-diagonal (q, k) goes to the owner q when q - k is
//                      odd ("kept"), to the key holder k when even ("helped"):
//                      the helper reads q's published queries in place, runs a
//                      dense FMHA with its own K/V and writes (o, lse) into q's
//                      return slot. Slot i of helper h serves owner h + 2(i+1);
//                      (cp - 1) / 2 slots, two return slabs alternating (slot i
//                      uses slab i % 2). Merge order on the owner: kept
//                      ascending, the own causal diagonal, then helpers by slot.
//                      Loads: cp/2 at odd cp; cp/2 - 1/2 (even ranks) and
//                      cp/2 + 1/2 (odd ranks) at even cp.
//   balance (cut 7, refines the stripe; at odd cp it is the stripe): at even
//                      cp every odd rank o hands part 1 of its last kept pair
//                      (o, o - 1) to o - 1, which holds those keys already
//                      (only the half window of queries and its (o, lse)
//                      rows travel). Every rank then does exactly cp/2.
//                      The moved half's return slot is balance_slot(cp) =
//                      (cp - 1) / 2, one past the stripe's slots; it holds
//                      the half window as the FMHA writes it: o [t - t/2, H, dv],
//                      lse [H, t - t/2].
//                      Helper e = o - 1 (even) runs the moved window first:
//                        expand its own keys; fmha (q = o, q parts [1, 2),
//                        k = e, dense) -> o's balance slot; then its stripe steps.
//                      Owner o: its stripe steps, except that the kept pair
//                        (o, o - 1) becomes
//                          fmha (q = o, q parts [0, 1), k = o - 1, dense)
//                          merge rows [0, 1) from its own output
//                          merge rows [1, 2) from the balance slot (helper o - 1)
//                        at the place where the stripe merged (o, o - 1).
//                      Per row the merge order is the stripe's: kept ascending,
//                      diagonal, helpers by slot; rows of part 0 take (o, o - 1)
//                      from o's own half window, rows of part 1 from the slot.
//                      Why the outputs equal the stripe's bit for bit, with an
//                      engine whose per-row arithmetic does not depend on the
//                      window's query count (the native FMHA on dense windows:
//                      every query tile walks all key tiles in the same order):
//                       1. lse_merge is a per-row map (kernels/cuts/lse_merge.h):
//                          row i after a merge depends only on row i before and
//                          row i of the window. Merging a window in two row
//                          ranges, at the same place in each row's order, gives
//                          the stripe's accumulator rows.
//                       2. Each half window reads the bytes the whole window
//                          would: o's published queries, rows of the half; the
//                          keys of o - 1, expanded by the same kv_b GEMM and
//                          expand_k on the same latent and shape (on o - 1 for
//                          the moved half, on o for the kept half, as under the
//                          stripe). With such an engine its (o, lse) rows equal
//                          the whole window's rows.
//                       3. Every other window, and every merge of every other
//                          row, is the stripe's. So o_acc and lse_acc, and all
//                          that follows, are the stripe's bits.
//                      With cuDNN, whose tiling may depend on tq, the moved rows
//                      equal the stripe's within summation order.
//   zigzag (layout):   the context in 2·cp equal chunks; rank r holds chunks r
//                      (part 0) and 2cp - 1 - r (part 1), in that local order.
//                      Local order follows token order, so rank r's own window
//                      [0, 2) x [0, 2) is exactly a causal window (query i sees
//                      local key j <= i). Windows of rank r, all run by r, none
//                      helped, merged in ascending k:
//                        k < r:  q parts [0, 2) over k's part 0 (chunk k), dense
//                        k == r: q parts [0, 2) over parts [0, 2), causal
//                        k > r:  q part  [1, 2) over k's parts [0, 2), dense
//                      each half a pair: every rank exactly cp/2.
//
// Windows as FMHA launches (kernels/fmha/fmha.h): window_shape gives the rows
// of the queries and keys and the mask; a causal mask is bottom-right aligned
// (local query i sees local key j <= i + tk - tq). No schedule here has a
// causal window over part of the rows: every causal window is a rank's own
// rows over its own rows (tq == tk, offset 0). A causal window over query
// rows [a, b) of a segment and keys [0, b) of it would have tk - tq = a, which
// is what the bottom-right mask needs; window_shape computes it in general.
//
// A rank's launch order (without cut 8; overlap_order gives it with): its FMHA windows in the order above (each key
// segment's keys are expanded right before the first window over them), in
// each return slot first the window it runs for another owner, then the merge
// of what its own slot helper returned. key_segments lists the expansions,
// ascending; key_parts says which rows of each.
//
// KDA across ranks (kda_pieces): a rank's rows are one or two pieces, each a
// run of consecutive chunks. The state entering a piece is the fold of the
// (M, D) packages of every piece before it in token order, whoever holds them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuts.h"
#include "layout.h"

namespace pb {

struct Segment {
  int64_t begin = 0;
  int64_t len = 0;
};

// Contiguous segments of `context` tokens over cp ranks; the remainder goes to
// the earlier ranks (one token each).
std::vector<Segment> contiguous_segments(int64_t context, int cp);

enum class Schedule { prefix, stripe, balance, zigzag };
const char* schedule_name(Schedule s);

// The schedule an MLA call runs: zigzag under layout zigzag (nothing is helped,
// so cuts 3 and 7 change nothing there); else prefix without cut 3, the
// stripe with it, balance with cuts 3 and 7 at even cp (at odd cp balance
// changes nothing: the stripe).
Schedule attention_schedule(const CutSet& cuts, Layout layout, int cp);

// The global token ranges a rank holds, in the order of its local rows:
// contiguous: contiguous_segments; zigzag: chunks r and 2cp - 1 - r of 2cp
// equal chunks (context divisible by 2cp).
std::vector<Segment> rank_tokens(Layout layout, int64_t context, int cp, int rank);
// Each rank's row count under a layout.
std::vector<int64_t> rank_rows(Layout layout, int64_t context, int cp);
// Each rank's rows as one segment: contiguous_segments under contiguous;
// under zigzag begin = its first chunk's first token, len = its two chunks'
// rows (the blocks' lanes take lengths only).
std::vector<Segment> lane_segments(Layout layout, int64_t context, int cp);
// The rank holding the context's last token, which computes the first
// generated token: cp - 1 (contiguous); 0 under zigzag (chunk 2cp - 1 is rank
// 0's part 1, its local last row).
int last_token_rank(Layout layout, int cp);

// A range [begin, end) of a rank's two parts.
struct Parts {
  int begin = 0, end = 2;
  int count() const { return end - begin; }
  bool operator==(const Parts& o) const { return begin == o.begin && end == o.end; }
  bool operator!=(const Parts& o) const { return !(*this == o); }
};
constexpr Parts kWholeRank{0, 2};

struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t len() const { return end - begin; }
};
// Local rows of `parts` of a rank with `rows` rows: part 0 [0, rows/2), part 1 [rows/2, rows).
RowRange part_rows(int64_t rows, Parts parts);

// One FMHA launch: rank q's queries (q_parts) over rank k's keys (k_parts), run
// on `runner`. For a helped window runner == k != q and the output lands in q's `slot`.
struct FmhaWindow {
  int q = 0;
  int k = 0;
  bool causal = false;
  int runner = 0;
  int slot = -1;  // return slot for helped windows, else -1
  Parts q_parts = kWholeRank;
  Parts k_parts = kWholeRank;
  // A local window whose (o, lse) is kept in the held buffer until its merge
  // (overlap_order: other windows run in between); else it lands in the window buffer.
  bool held = false;
};
// Its work in segment pairs.
double window_pairs(const FmhaWindow& w);

// One lse_merge into a rank's accumulator: the window (q = this rank, k), and
// where its (o, lse) comes from: this rank's own FMHA output, or return slot
// `slot` written by helper `k`. It covers the accumulator rows of `rows`; the
// window's (o, lse) are those rows only (o [n, H, dv], lse [H, n]). `reset`:
// the first merge into these rows this call (it initializes them).
struct MergeStep {
  int k = 0;
  int slot = -1;  // -1: local
  Parts rows = kWholeRank;
  bool reset = false;
  bool held = false;  // a local merge from the held buffer (its window is held)
};

// Everything one rank does in one MLA layer's attention, in launch order.
struct RankAttention {
  int rank = 0;
  std::vector<int> key_segments;  // kv_b expansions, ascending (own segment included)
  // Steps in order: each is either an FMHA window this rank runs or a merge of
  // a window into this rank's accumulator.
  struct Step {
    bool is_merge = false;
    FmhaWindow window;  // when !is_merge
    MergeStep merge;    // when is_merge
  };
  std::vector<Step> steps;
  double load_pairs = 0;  // the sum of window_pairs over the windows it runs
};

// The rows of key segment k a rank expands: the hull of its windows' k_parts
// over k (kWholeRank but for zigzag's k < rank, part 0).
Parts key_parts(const RankAttention& a, int k);

std::vector<int> kept(int cp, int owner);   // {k < owner : (owner - k) odd}, ascending
std::vector<int> helped(int cp, int helper);  // {q > helper : (q - helper) even, q < cp}, ascending
int return_slots(int cp);                   // (cp - 1) / 2
// The stripe's helpers of an owner, i.e. the ranks whose returns it merges:
// {owner - 2(s + 1) >= 0 : s < return_slots(cp)}, ascending (k is one exactly
// when owner is in helped(cp, k)).
std::vector<int> stripe_helpers(int cp, int owner);
// The return slot of balance's moved half windows: return_slots(cp).
int balance_slot(int cp);
// Whether balance moves anything: even cp >= 2.
bool balance_moves(int cp);
// Return slots a rank's slab needs per return slab under a schedule: the
// stripe's; one more under balance at even cp; none under prefix and zigzag.
int return_slots(Schedule schedule, int cp);
// The ranks whose returns an owner merges under a schedule, ascending.
std::vector<int> helpers_of(Schedule schedule, int cp, int owner);

RankAttention rank_attention(Schedule schedule, int cp, int rank);
std::vector<RankAttention> gang_attention(Schedule schedule, int cp);

// Cut 8 (overlap): the same steps, launched so that the windows that wait on
// no peer's keys come first. Order: the rank's own causal window (its keys
// and queries are its own: no wait), then every helped window it runs (over
// its own keys; they wait only for the owner's queries and slot, and their
// returns reach the owners sooner), then the remaining steps in the
// schedule's order. The merges keep the schedule's order exactly, so every
// accumulator row sees the same merges in the same order: the outputs are
// the schedule's bit for bit. When some merge comes before the causal
// window's in the schedule, that window is `held` (its output waits in a
// second buffer, [t, H, dv] bf16 and [H, t] f32, until its merge, which reads
// it from there); otherwise its merge follows it at once. Every other local
// window is still merged before the next window runs. Unchanged when the
// causal window and the helped windows already come first.
RankAttention overlap_order(const RankAttention& a);
// The steps a rank launches under `cuts`: rank_attention, through
// overlap_order when cut 8 is on.
RankAttention launch_attention(const CutSet& cuts, Layout layout, int cp, int rank);

// A window as an FMHA launch, given each rank's row count: its query rows in
// rank q's local rows, its key rows in rank k's, and the mask (kernels/fmha/
// fmha.h: causal is bottom-right aligned, local query i sees local key
// j <= i + mask_offset()).
struct WindowShape {
  RowRange q_rows, k_rows;
  bool causal = false;
  int64_t tq() const { return q_rows.len(); }
  int64_t tk() const { return k_rows.len(); }
  int64_t mask_offset() const { return tk() - tq(); }
};
WindowShape window_shape(const FmhaWindow& w, const std::vector<int64_t>& rows_of_rank);

// The published windows a rank reads in one layer: the keys of every foreign
// key segment it expands, and the queries of every owner it helps (ascending,
// itself excluded). window_readers is the mirror: who reads rank k's window.
// A rank tells each window it read that it is done (the `released` doorbell)
// and waits for its own readers before it overwrites its window next layer.
std::vector<int> windows_read(Schedule schedule, int cp, int rank);
std::vector<int> window_readers(Schedule schedule, int cp, int k);
// The schedules whose doorbell sets one call honours, so that consecutive
// calls may switch between them (A/B of cuts 3 and 7 in one run): every
// contiguous call honours prefix, stripe and balance (what the MLA block
// runs; at even cp balance adds a released bell from o - 1 to every odd o,
// at odd cp nothing); zigzag alone.
std::vector<Schedule> protocol_schedules(Schedule schedule);
// The union over a set of schedules.
std::vector<int> windows_read_any(const std::vector<Schedule>& schedules, int cp, int rank);
std::vector<int> window_readers_any(const std::vector<Schedule>& schedules, int cp, int k);
// The same over the contiguous protocol (protocol_schedules(Schedule::stripe)).
std::vector<int> windows_read_any(int cp, int rank);
std::vector<int> window_readers_any(int cp, int k);
// The helpers of `owner` under some schedule of `protocol` whose returns a
// call under `schedule` does not merge, ascending. The owner acknowledges
// their slots (consumed) at the end of such a call, though nothing was
// written there: a helper's wait for "consumed, call seq - 2" must hold
// whichever schedule that call ran.
std::vector<int> unmerged_helpers(const std::vector<Schedule>& protocol, Schedule schedule, int cp, int owner);

// The helped windows a rank runs under any schedule of `protocol` (runner ==
// rank != q), each (q, slot) once, by slot: the owners whose queries it reads
// and the return slots it writes.
std::vector<FmhaWindow> helped_windows_any(const std::vector<Schedule>& protocol, int cp, int rank);

// docs/design.md §3's load: r + 1/2 (prefix); 1/2 + |kept| + |helped| (stripe);
// cp/2 (balance at even cp, zigzag); balance at odd cp is the stripe's.
double expected_load(Schedule schedule, int cp, int rank);

// ---- KDA across ranks ----

// The chunk grid: 2·cp chunks of context / (2cp) tokens. Contiguous rank r
// holds chunks 2r and 2r + 1, zigzag rank r chunks r and 2cp - 1 - r.
std::vector<int> rank_chunks(Layout layout, int cp, int rank);  // in local row order

struct PieceRef {
  int rank = -1;
  int piece = -1;  // index among the rank's pieces
  bool operator==(const PieceRef& o) const { return rank == o.rank && piece == o.piece; }
  bool operator<(const PieceRef& o) const { return rank != o.rank ? rank < o.rank : piece < o.piece; }
};

// One piece: a run of consecutive chunks a rank holds, which its conv and its
// state walk treat as one segment.
struct KdaPiece {
  PieceRef self;
  Parts parts;                      // its local rows
  int first_chunk = 0, last_chunk = 0;
  // The conv carry (the 3 rows before first_chunk): the last rows of piece
  // `halo`; halo.rank == -1 at the sequence start (zeros).
  PieceRef halo;
  // S_in = the fold of these pieces' packages, in this order (every piece
  // before this one in token order): S = D of the first; S = S·M + D for each
  // next. Empty: S_in = 0. A rank's later piece folds its earlier piece's
  // list, then that piece, then more: it may continue from the earlier S_in.
  std::vector<PieceRef> fold;
  // Ranks other than this one whose pieces fold this piece's package
  // (ascending); `package`: some piece folds it, so this rank computes it.
  std::vector<int> package_readers;
  bool package = false;
  // Ranks other than this one whose pieces take their carry from this one's tail.
  std::vector<int> halo_readers;
};
// A rank's pieces in local row order: contiguous, one; zigzag, two, except
// rank cp - 1 (chunks cp - 1 and cp are adjacent: one piece, as at cp 1).
std::vector<KdaPiece> kda_pieces(Layout layout, int cp, int rank);

}  // namespace pb
