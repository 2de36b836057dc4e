// The CP lane's schedule (docs/design.md §3): a pure function of cp, no CUDA.
//
// Work unit: the segment pair (q, k) = FMHA of rank q's queries over rank k's
// keys, k <= q. The diagonal (q, q) is causal (half a pair); the rest dense.
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
//
// A rank's launch order: its FMHA windows in merge order (each segment's keys
// are expanded right before the first window over them), and in each return
// slot first the window it runs for another owner, then the merge of what its
// own slot helper returned. key_segments lists the expansions, ascending.
#pragma once

#include <cstdint>
#include <vector>

namespace pb {

struct Segment {
  int64_t begin = 0;
  int64_t len = 0;
};

// Contiguous segments of `context` tokens over cp ranks; the remainder goes to
// the earlier ranks (one token each).
std::vector<Segment> contiguous_segments(int64_t context, int cp);

enum class Schedule { prefix, stripe };

// One FMHA launch: rank q's queries over rank k's keys, run on `runner`.
// For a helped window runner == k != q and the output lands in q's `slot`.
struct FmhaWindow {
  int q = 0;
  int k = 0;
  bool causal = false;
  int runner = 0;
  int slot = -1;  // return slot for helped windows, else -1
};

// One lse_merge into a rank's accumulator: the window (q = this rank, k), and
// where its (o, lse) comes from: this rank's own FMHA output, or return slot
// `slot` written by helper `k`.
struct MergeStep {
  int k = 0;
  int slot = -1;  // -1: local
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
  double load_pairs = 0;  // dense windows count 1, the causal diagonal 1/2
};

std::vector<int> kept(int cp, int owner);   // {k < owner : (owner - k) odd}, ascending
std::vector<int> helped(int cp, int helper);  // {q > helper : (q - helper) even, q < cp}, ascending
int return_slots(int cp);                   // (cp - 1) / 2
// The stripe's helpers of an owner, i.e. the ranks whose returns it merges:
// {owner - 2(s + 1) >= 0 : s < return_slots(cp)}, ascending (k is one exactly
// when owner is in helped(cp, k)).
std::vector<int> stripe_helpers(int cp, int owner);

RankAttention rank_attention(Schedule schedule, int cp, int rank);
std::vector<RankAttention> gang_attention(Schedule schedule, int cp);

// The published windows a rank reads in one layer: the keys of every foreign
// key segment it expands, and the queries of every owner it helps (ascending,
// itself excluded). window_readers is the mirror: who reads rank k's window.
// A rank tells each window it read that it is done (the `released` doorbell)
// and waits for its own readers before it overwrites its window next layer.
std::vector<int> windows_read(Schedule schedule, int cp, int rank);
std::vector<int> window_readers(Schedule schedule, int cp, int k);
// The same over both schedules (their union): the doorbell sets a rank uses,
// so that consecutive calls may switch schedules (A/B of cut 3 in one run).
std::vector<int> windows_read_any(int cp, int rank);
std::vector<int> window_readers_any(int cp, int k);

// docs/design.md §3's load: r + 1/2 (prefix); 1/2 + |kept| + |helped| (stripe).
double expected_load(Schedule schedule, int cp, int rank);

}  // namespace pb
