// The CP lane's doorbell protocol, simulated on the host. Per call, every wait,
// ring, slab write and slab read that MlaBlock (harness/superstep/mla_block.cu)
// and KdaBlock (harness/superstep/kda_block.cu) issue, in their order, built from
// the same schedule and slab-layout functions the blocks use. This file
// mirrors those two: change it with them.
//
// Checked for cp 1..8 over call sequences that switch schedules the way
// `verify` (prefix runs, then stripe runs) and `run` (variants interleaved) do,
// balance (cut 7) among them, under the contiguous protocol the MLA block
// honours in every call (schedule.h protocol_schedules), and under layout
// zigzag (MLA's zigzag protocol; KDA's two pieces a rank, kda_pieces):
//   - serialized turns (serialize_ranks): when a rank's turn runs, each of its
//     waits already holds (a wait on a later turn is a hang; zigzag's KDA
//     has one, which is why the superstep refuses serialize_ranks there);
//   - concurrent ranks, many random interleavings of the ranks' streams: no
//     deadlock, and every read finds its own call's content (nothing
//     overwritten before its readers are done, nothing read before written).
// Calls run with cut 8 (overlap) on or off, switching between calls: MLA's
// attention then runs its steps in overlap_order (schedule.h), which moves
// waits and reads; KDA's overlap moves only launches that touch no slab and
// ring no doorbell (kda_block.h), so its ops are the same either way.
// Each rank's stream starts with what its blocks' constructors write into its
// own slab: no collective separates them from the peers' first calls (the
// fabric's construction is the last before them), so an IPC peer may already
// have delivered into that slab.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "schedule.h"
#include "slab_layout.h"

using namespace pb;

namespace {

enum class OpKind { wait, ring, write, read };
enum class Buf { window, ret, halo, package };

// A buffer in some rank's slab: (kind, holder, index, sub-index).
using BufKey = std::tuple<Buf, int, int, int>;

struct Op {
  OpKind kind;
  int holder = 0;  // wait: the waiting rank; ring: the rank whose flag is set; read/write: the slab's rank
  int sender = 0;  // the flag's sender (wait, ring)
  Bell bell = Bell::window;
  uint64_t value = 0;
  BufKey buf{};
  int64_t seq = 0;  // read/write: the call whose content it is
  std::string what;
};

using Ops = std::vector<Op>;

Op wait_op(int me, int sender, Bell b, uint64_t v, const std::string& what) {
  return {OpKind::wait, me, sender, b, v, {}, 0, what};
}
Op ring_op(int me, int target, Bell b, uint64_t v) { return {OpKind::ring, target, me, b, v, {}, 0, ""}; }
Op write_op(BufKey k, int64_t seq, const std::string& what) { return {OpKind::write, 0, 0, Bell::window, 0, k, seq, what}; }
Op read_op(BufKey k, int64_t seq, const std::string& what) { return {OpKind::read, 0, 0, Bell::window, 0, k, seq, what}; }

// The schedules whose doorbell sets every contiguous call of the MLA block honours.
const std::vector<Schedule> kDeviceProtocol = protocol_schedules(Schedule::stripe);

// ---- MlaBlock ----
// project: wait until last call's readers released the window, write it, publish it.
void mla_project(Ops& ops, int cp, int me, int64_t seq, const std::vector<Schedule>& protocol) {
  const std::vector<int> readers = window_readers_any(protocol, cp, me);
  for (int r : readers) ops.push_back(wait_op(me, r, Bell::released, doorbell_value_done(seq, 1), "released"));
  ops.push_back(write_op({Buf::window, me, 0, 0}, seq, "window"));
  for (int r : readers) ops.push_back(ring_op(me, r, Bell::window, doorbell_value(seq, 0)));
}

// attend: the schedule's steps; then release every window possibly read and
// acknowledge the return slots of the protocol's helpers this call did not
// merge (ack_unmerged = false drops that acknowledgement).
void mla_attend(Ops& ops, int cp, int me, int64_t seq, Schedule sched, bool ack_unmerged,
                const std::vector<Schedule>& protocol, bool overlap) {
  const RankAttention a = overlap ? overlap_order(rank_attention(sched, cp, me)) : rank_attention(sched, cp, me);
  const int slab = return_slab(seq);
  std::vector<bool> expanded(size_t(cp), false);
  for (const auto& step : a.steps) {
    if (step.is_merge) {
      if (step.merge.slot >= 0) {
        ops.push_back(wait_op(me, step.merge.k, Bell::returned, doorbell_value(seq, step.merge.slot), "returned"));
        ops.push_back(read_op({Buf::ret, me, slab, step.merge.slot}, seq, "return slot"));
        ops.push_back(ring_op(me, step.merge.k, Bell::consumed, doorbell_value(seq, 0)));
      }
      continue;
    }
    const FmhaWindow& w = step.window;
    if (!expanded[size_t(w.k)]) {
      expanded[size_t(w.k)] = true;
      if (w.k != me) {
        ops.push_back(wait_op(me, w.k, Bell::window, doorbell_value(seq, 0), "keys' window"));
        ops.push_back(read_op({Buf::window, w.k, 0, 0}, seq, "keys' window"));
      }
    }
    if (w.q != me) {  // helped: the owner's queries in, the result into its return slot
      ops.push_back(wait_op(me, w.q, Bell::window, doorbell_value(seq, 0), "queries' window"));
      if (seq >= 2) ops.push_back(wait_op(me, w.q, Bell::consumed, doorbell_value_done(seq, 2), "consumed"));
      ops.push_back(read_op({Buf::window, w.q, 0, 0}, seq, "queries"));
      ops.push_back(write_op({Buf::ret, w.q, slab, w.slot}, seq, "return slot"));
      ops.push_back(ring_op(me, w.q, Bell::returned, doorbell_value(seq, w.slot)));
    }
  }
  for (int k : windows_read_any(protocol, cp, me))
    ops.push_back(ring_op(me, k, Bell::released, doorbell_value(seq, 0)));
  if (ack_unmerged)
    for (int k : unmerged_helpers(protocol, sched, cp, me))
      ops.push_back(ring_op(me, k, Bell::consumed, doorbell_value(seq, 0)));
}

// ---- KdaBlock ----
// The content of a slab part that a constructor cleared (-1 reads as never written).
constexpr int64_t kCleared = -2;

// Halo buffers: (Buf::halo, receiver, parity, 2 * slot) the delivered rows of
// the receiver's piece `slot`, 2 * slot + 1 its padding row. Packages:
// (Buf::package, packaging rank, parity, piece).
int halo_rows(int slot) { return 2 * slot; }
int halo_padding(int slot) { return 2 * slot + 1; }

// The constructor: zeros the padding row of every halo slot of both parities
// (the upstream pieces' ranks deliver the rows). clear_rows: zeros the rows too
// (the whole slots). MlaBlock's constructor writes nothing of the slab.
void kda_construct(Ops& ops, Layout layout, int me, bool clear_rows) {
  const int slots = layout == Layout::zigzag ? 2 : 1;
  for (int p = 0; p < 2; ++p)
    for (int slot = 0; slot < slots; ++slot) {
      ops.push_back(write_op({Buf::halo, me, p, halo_padding(slot)}, kCleared, "halo padding row"));
      if (clear_rows) ops.push_back(write_op({Buf::halo, me, p, halo_rows(slot)}, kCleared, "halo rows"));
    }
}

// project (the halo): each piece sends its last rows to the rank of the piece
// after it, into that piece's slot; each piece with a carry from a peer receives it.
void kda_project(Ops& ops, Layout layout, int cp, int me, int64_t seq) {
  const int par = kda_parity(seq);
  const std::vector<KdaPiece> pieces = kda_pieces(layout, cp, me);
  for (const KdaPiece& piece : pieces)
    for (int r : piece.halo_readers) {
      int slot = -1;
      for (const KdaPiece& theirs : kda_pieces(layout, cp, r))
        if (theirs.halo == piece.self) slot = theirs.self.piece;
      REQUIRE(slot >= 0);
      ops.push_back(wait_op(me, r, Bell::halo_read, doorbell_value_done(seq, 2), "halo_read"));
      ops.push_back(write_op({Buf::halo, r, par, halo_rows(slot)}, seq, "halo"));
      ops.push_back(ring_op(me, r, Bell::halo, doorbell_value(seq, 0)));
    }
  for (const KdaPiece& piece : pieces) {
    const int from = piece.halo.rank;
    if (from < 0) continue;
    ops.push_back(wait_op(me, from, Bell::halo, doorbell_value(seq, 0), "halo"));
    ops.push_back(read_op({Buf::halo, me, par, halo_rows(piece.self.piece)}, seq, "halo"));
    ops.push_back(read_op({Buf::halo, me, par, halo_padding(piece.self.piece)}, kCleared, "halo padding row"));
    ops.push_back(ring_op(me, from, Bell::halo_read, doorbell_value(seq, 0)));
  }
}

// recur: every package this rank's pieces publish (window = the piece), then
// per piece the fold past the previous piece's, acknowledging each peer after
// the fold that reads it last.
void kda_recur(Ops& ops, Layout layout, int cp, int me, int64_t seq) {
  const int par = kda_parity(seq);
  const std::vector<KdaPiece> pieces = kda_pieces(layout, cp, me);
  for (const KdaPiece& piece : pieces) {
    if (!piece.package) continue;
    for (int r : piece.package_readers)
      ops.push_back(wait_op(me, r, Bell::state_read, doorbell_value_done(seq, 2), "state_read"));
    ops.push_back(write_op({Buf::package, me, par, piece.self.piece}, seq, "package"));
    for (int r : piece.package_readers)
      ops.push_back(ring_op(me, r, Bell::state, doorbell_value(seq, piece.self.piece)));
  }
  // Per peer, the piece whose fold (past the previous piece's) reads it last.
  std::vector<size_t> last(size_t(cp), pieces.size());
  for (size_t i = 0, folded = 0; i < pieces.size(); folded = pieces[i].fold.size(), ++i)
    for (size_t j = folded; j < pieces[i].fold.size(); ++j)
      if (pieces[i].fold[j].rank != me) last[size_t(pieces[i].fold[j].rank)] = i;
  size_t folded = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::vector<PieceRef>& fold = pieces[i].fold;
    for (size_t j = folded; j < fold.size(); ++j)
      if (fold[j].rank != me)
        ops.push_back(wait_op(me, fold[j].rank, Bell::state, doorbell_value(seq, fold[j].piece), "state"));
    for (size_t j = folded; j < fold.size(); ++j)
      ops.push_back(read_op({Buf::package, fold[j].rank, par, fold[j].piece}, seq, "package"));
    std::vector<int> acked;
    for (size_t j = folded; j < fold.size(); ++j) {
      const int k = fold[j].rank;
      if (k == me || last[size_t(k)] != i || std::find(acked.begin(), acked.end(), k) != acked.end()) continue;
      acked.push_back(k);
      ops.push_back(ring_op(me, k, Bell::state_read, doorbell_value(seq, 0)));
    }
    folded = fold.size();
  }
}

// One layer call of the superstep: its kind and, for MLA, the schedule.
struct Call {
  bool mla;
  Schedule sched;
  bool overlap = false;  // cut 8
};

// ops[rank][phase] over the whole sequence: phase 0 = the blocks'
// construction, 2i + 1 = layer i's projection turn, 2i + 2 = its attention /
// recurrence turn (the output turn has no bells). clear_halo_rows: KdaBlock's
// constructor zeros its whole halo slots (kda_construct).
std::vector<std::vector<Ops>> build(int cp, const std::vector<Call>& calls, bool ack_unmerged,
                                     const std::vector<Schedule>& protocol = kDeviceProtocol,
                                     bool clear_halo_rows = false) {
  std::vector<std::vector<Ops>> ops(size_t(cp), std::vector<Ops>(2 * calls.size() + 1));
  const bool any_kda = std::any_of(calls.begin(), calls.end(), [](const Call& c) { return !c.mla; });
  const Layout layout = protocol == protocol_schedules(Schedule::zigzag) ? Layout::zigzag : Layout::contiguous;
  for (int r = 0; r < cp && cp > 1 && any_kda; ++r) kda_construct(ops[size_t(r)][0], layout, r, clear_halo_rows);
  int64_t mla_seq = 0, kda_seq = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    for (int r = 0; r < cp; ++r) {
      if (cp == 1) continue;  // no fabric at cp 1
      if (c.mla) {
        mla_project(ops[size_t(r)][2 * i + 1], cp, r, mla_seq, protocol);
        mla_attend(ops[size_t(r)][2 * i + 2], cp, r, mla_seq, c.sched, ack_unmerged, protocol, c.overlap);
      } else {
        kda_project(ops[size_t(r)][2 * i + 1], layout, cp, r, kda_seq);
        kda_recur(ops[size_t(r)][2 * i + 2], layout, cp, r, kda_seq);
      }
    }
    if (c.mla) ++mla_seq;
    else ++kda_seq;
  }
  return ops;
}

struct World {
  std::map<std::tuple<int, int, Bell>, uint64_t> flags;  // (holder, sender, bell)
  std::map<BufKey, int64_t> content;                     // the seq of a buffer's content
};

std::string describe(int rank, const Op& op) {
  return "rank " + std::to_string(rank) + " " + op.what + " (seq " + std::to_string(op.seq) + ", value seq " +
         std::to_string(doorbell_seq(op.value)) + ")";
}

bool runnable(const World& w, const Op& op) {
  if (op.kind != OpKind::wait) return true;
  auto it = w.flags.find({op.holder, op.sender, op.bell});
  return (it == w.flags.end() ? 0 : it->second) >= op.value;
}

// Runs one op; returns "" or what went wrong.
std::string apply(World& w, int rank, const Op& op) {
  switch (op.kind) {
    case OpKind::wait:
      return runnable(w, op) ? "" : "stuck: " + describe(rank, op);
    case OpKind::ring:
      w.flags[{op.holder, op.sender, op.bell}] = op.value;
      return "";
    case OpKind::write:
      w.content[op.buf] = op.seq;
      return "";
    case OpKind::read: {
      auto it = w.content.find(op.buf);
      const int64_t got = it == w.content.end() ? -1 : it->second;
      return got == op.seq ? "" : describe(rank, op) + " found the content of seq " + std::to_string(got);
    }
  }
  return "unknown op";
}

// Serialized turns: every phase, rank by rank, each rank's ops in order.
std::string run_serialized(int cp, const std::vector<std::vector<Ops>>& ops) {
  World w;
  const size_t phases = ops.empty() ? 0 : ops[0].size();
  for (size_t p = 0; p < phases; ++p)
    for (int r = 0; r < cp; ++r)
      for (const Op& op : ops[size_t(r)][p])
        if (std::string e = apply(w, r, op); !e.empty()) return "phase " + std::to_string(p) + ": " + e;
  return "";
}

// Concurrent ranks: each rank's stream runs its ops in order; a random runnable
// rank moves one op at a time.
std::string run_concurrent(int cp, const std::vector<std::vector<Ops>>& ops, uint32_t seed) {
  std::vector<Ops> flat(static_cast<size_t>(cp));
  for (int r = 0; r < cp; ++r)
    for (const Ops& phase : ops[size_t(r)]) flat[size_t(r)].insert(flat[size_t(r)].end(), phase.begin(), phase.end());
  std::vector<size_t> next(static_cast<size_t>(cp), 0);
  World w;
  std::mt19937 rng(seed);
  for (;;) {
    std::vector<int> ready;
    bool done = true;
    for (int r = 0; r < cp; ++r) {
      if (next[size_t(r)] == flat[size_t(r)].size()) continue;
      done = false;
      if (runnable(w, flat[size_t(r)][next[size_t(r)]])) ready.push_back(r);
    }
    if (done) return "";
    if (ready.empty()) {
      std::string e = "deadlock:";
      for (int r = 0; r < cp; ++r)
        if (next[size_t(r)] < flat[size_t(r)].size()) e += " " + describe(r, flat[size_t(r)][next[size_t(r)]]) + ";";
      return e;
    }
    const int r = ready[std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng)];
    if (std::string e = apply(w, r, flat[size_t(r)][next[size_t(r)]++]); !e.empty()) return e;
  }
}

// A superstep's layers (MLA every 4th and the last, as in K3) under one schedule.
void append_superstep(std::vector<Call>& calls, int layers, Schedule sched) {
  for (int l = 0; l < layers; ++l) calls.push_back({l % 4 == 3 || l == layers - 1, sched});
}

// verify: the baseline and the exact cuts (prefix), then the stripe and all cuts.
std::vector<Call> verify_order(int layers) {
  std::vector<Call> calls;
  for (int i = 0; i < 6; ++i) append_superstep(calls, layers, Schedule::prefix);
  for (int i = 0; i < 2; ++i) append_superstep(calls, layers, Schedule::stripe);
  return calls;
}

// run: warm-up and reps of baseline and all, interleaved.
std::vector<Call> run_order(int layers) {
  std::vector<Call> calls;
  for (int rep = 0; rep < 3; ++rep) {
    append_superstep(calls, layers, Schedule::prefix);
    append_superstep(calls, layers, Schedule::stripe);
  }
  return calls;
}

std::vector<Call> random_order(int n, uint32_t seed, const std::vector<Schedule>& schedules = kDeviceProtocol,
                               bool random_overlap = false) {
  std::mt19937 rng(seed);
  std::vector<Call> calls;
  for (int i = 0; i < n; ++i) {
    const bool mla = rng() % 2 == 0;
    const Schedule sched = schedules[rng() % schedules.size()];
    calls.push_back({mla, sched, random_overlap && rng() % 2 == 0});
  }
  return calls;
}

// The calls with cut 8 on: in every call (period 0), or in every other run of `period` calls.
std::vector<Call> with_overlap(std::vector<Call> calls, size_t period = 0) {
  for (size_t i = 0; i < calls.size(); ++i) calls[i].overlap = period == 0 || (i / period) % 2 == 1;
  return calls;
}

void check_all(int cp, const std::vector<Call>& calls, const char* order,
               const std::vector<Schedule>& protocol = kDeviceProtocol) {
  CAPTURE(cp);
  CAPTURE(order);
  const auto ops = build(cp, calls, true, protocol);
  CHECK(run_serialized(cp, ops) == "");
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    CHECK(run_concurrent(cp, ops, seed) == "");
  }
}

}  // namespace

TEST_CASE("the lane's doorbells never hang and never expose a stale buffer, cp 1..8") {
  for (int cp = 1; cp <= 8; ++cp) {
    check_all(cp, verify_order(6), "verify");
    check_all(cp, run_order(5), "run");
    check_all(cp, random_order(40, 7u * uint32_t(cp)), "random");
  }
}

TEST_CASE("calls under balance, and zigzag's protocol, never hang and never expose a stale buffer, cp 1..8") {
  const std::vector<Schedule> contiguous = protocol_schedules(Schedule::balance);
  for (int cp = 1; cp <= 8; ++cp) {
    std::vector<Call> verify = verify_order(6);  // verify with balance: its cut sets after the stripe's
    for (int i = 0; i < 2; ++i) append_superstep(verify, 6, Schedule::balance);
    check_all(cp, verify, "verify: prefix, stripe, then balance", contiguous);
    std::vector<Call> interleaved;  // run: baseline, stripe, balance variants interleaved
    for (int rep = 0; rep < 3; ++rep)
      for (Schedule s : contiguous) append_superstep(interleaved, 5, s);
    check_all(cp, interleaved, "run: prefix, stripe, balance", contiguous);
    check_all(cp, random_order(40, 11u * uint32_t(cp), contiguous), "random over the three", contiguous);
  }
}

TEST_CASE("zigzag: MLA and KDA (two pieces a rank, halos both ways, folds over non-contiguous pieces), cp 1..8") {
  const std::vector<Schedule> zz = protocol_schedules(Schedule::zigzag);
  for (int cp = 1; cp <= 8; ++cp) {
    CAPTURE(cp);
    std::vector<Call> calls;
    for (int rep = 0; rep < 3; ++rep) append_superstep(calls, 5, Schedule::zigzag);
    const auto ops = build(cp, calls, true, zz);
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(seed);
      CHECK(run_concurrent(cp, ops, seed) == "");
    }
    // Serialized turns cannot run zigzag's KDA: part 1's carry comes from rank r + 1's later turn
    // (the superstep refuses serialize_ranks under zigzag); its MLA alone they can.
    const std::string e = run_serialized(cp, ops);
    if (cp == 1) {
      CHECK(e == "");
    } else {
      CHECK(e.find("stuck") != std::string::npos);
      CHECK(e.find("halo") != std::string::npos);
    }
    std::vector<Call> mla_only(6, Call{true, Schedule::zigzag});
    CHECK(run_serialized(cp, build(cp, mla_only, true, zz)) == "");
  }
}

TEST_CASE("zigzag KDA: a rank's folds read the pieces before each of its pieces; a peer's under that piece's bell") {
  // cp 4: rank 1 holds chunks 1 and 6; part 0 folds chunk 0 (rank 0); part 1 continues with chunks 1..5: its own,
  // rank 2's, rank 3's (chunks 3 and 4), rank 2's second, waiting for rank 2's bell at window 1 for that one;
  // each peer acknowledged once, after the fold that reads it
  Ops ops;
  kda_recur(ops, Layout::zigzag, 4, 1, 0);
  std::vector<std::tuple<int, int>> reads;
  std::vector<int> acked;
  bool waits_rank2_piece1 = false;
  for (const Op& op : ops) {
    if (op.kind == OpKind::read) reads.push_back({std::get<1>(op.buf), std::get<3>(op.buf)});
    if (op.kind == OpKind::ring && op.bell == Bell::state_read) acked.push_back(op.holder);
    if (op.kind == OpKind::wait && op.sender == 2 && op.bell == Bell::state && op.value == doorbell_value(0, 1))
      waits_rank2_piece1 = true;
  }
  CHECK(reads == std::vector<std::tuple<int, int>>{{0, 0}, {1, 0}, {2, 0}, {3, 0}, {2, 1}});
  CHECK(acked == std::vector<int>{0, 2, 3});
  CHECK(waits_rank2_piece1);
}

TEST_CASE("with balance, a stripe call must acknowledge the balance slot too, else run hangs at even cp") {
  // acknowledging only the stripe's helpers (in non-stripe calls) is not enough: the owner
  // acknowledges balance's helper o - 1 in stripe calls too (unmerged_helpers)
  const std::vector<Schedule> contiguous = protocol_schedules(Schedule::balance);
  for (int cp : {2, 4}) {
    CAPTURE(cp);
    std::vector<Call> calls;
    for (int i = 0; i < 3; ++i) append_superstep(calls, 4, Schedule::stripe);
    append_superstep(calls, 4, Schedule::balance);
    const auto good = build(cp, calls, true, contiguous);
    CHECK(run_serialized(cp, good) == "");
    const auto none = build(cp, calls, false, contiguous);
    const std::string e = run_serialized(cp, none);
    CHECK(e.find("stuck") != std::string::npos);
    CHECK(e.find("consumed") != std::string::npos);
  }
}

TEST_CASE("without the prefix call's acknowledgement of return slots, verify and run hang from cp 3 on") {
  for (int cp = 2; cp <= 8; ++cp) {
    CAPTURE(cp);
    const auto ops = build(cp, verify_order(6), false);
    const std::string e = run_serialized(cp, ops);
    if (cp < 3) {
      CHECK(e == "");  // no return slots below cp 3
    } else {
      CHECK(e.find("stuck") != std::string::npos);
      CHECK(e.find("consumed") != std::string::npos);
    }
    const std::string e_run = run_serialized(cp, build(cp, run_order(5), false));
    CHECK((cp < 3 ? e_run == "" : e_run.find("stuck") != std::string::npos));
  }
}

TEST_CASE("a KDA block's constructor that zeros its whole halo slots erases call 0's rows when the upstream rank is ahead") {
  // The padding row only (the blocks' constructor) is covered by the cases above.
  std::vector<Call> calls;
  for (int i = 0; i < 4; ++i) calls.push_back({false, Schedule::prefix});
  for (int cp = 2; cp <= 8; ++cp) {
    CAPTURE(cp);
    const auto ops = build(cp, calls, true, kDeviceProtocol, /*clear_halo_rows=*/true);
    CHECK(run_serialized(cp, ops) == "");  // every construction ahead of every call: no harm
    std::string e;
    for (uint32_t seed = 1; seed <= 200 && e.empty(); ++seed) e = run_concurrent(cp, ops, seed);
    CHECK(e.find("halo (seq 0") != std::string::npos);
    CHECK(e.find("found the content of seq " + std::to_string(kCleared)) != std::string::npos);
  }
}

TEST_CASE("cut 8 (overlap): overlapped launch orders, alone and switching with the plain ones, cp 1..8") {
  const std::vector<Schedule> contiguous = protocol_schedules(Schedule::balance);
  const std::vector<Schedule> zz = protocol_schedules(Schedule::zigzag);
  for (int cp = 1; cp <= 8; ++cp) {
    check_all(cp, with_overlap(verify_order(6)), "verify, every call overlapped");
    check_all(cp, with_overlap(run_order(5), 5), "run: plain and overlapped supersteps interleaved");
    std::vector<Call> three;  // prefix, stripe, balance, each plain and overlapped
    for (int rep = 0; rep < 2; ++rep)
      for (Schedule s : contiguous) append_superstep(three, 5, s);
    check_all(cp, with_overlap(three, 5), "run: the three schedules, plain and overlapped", contiguous);
    check_all(cp, random_order(40, 13u * uint32_t(cp), contiguous, true), "random, overlap switched per call",
              contiguous);
    // Zigzag's MLA overlapped, and its KDA (whose ops overlap does not move), concurrently; MLA alone serialized.
    std::vector<Call> zig;
    for (int rep = 0; rep < 3; ++rep) append_superstep(zig, 5, Schedule::zigzag);
    const auto ops = build(cp, with_overlap(zig, 5), true, zz);
    for (uint32_t seed = 1; seed <= 20; ++seed) {
      CAPTURE(seed);
      CHECK(run_concurrent(cp, ops, seed) == "");
    }
    CHECK(run_serialized(cp, build(cp, with_overlap(std::vector<Call>(6, Call{true, Schedule::zigzag})), true, zz)) ==
          "");
  }
}

TEST_CASE("cut 8 (overlap) moves the MLA waits: the diagonal before the peer keys, helped windows before them") {
  // stripe cp 4, rank 3: plain, its first wait is on rank 0's keys; overlapped, its first op is still rank 0's keys
  // (the diagonal and helped windows wait on nothing / rank 3 helps nobody), but at cp 6 rank 2 helps rank 4 and
  // waits for rank 4's queries before rank 1's keys.
  const auto first_wait = [](int cp, int me, bool overlap) {
    Ops ops;
    mla_attend(ops, cp, me, 0, Schedule::stripe, true, kDeviceProtocol, overlap);
    for (const Op& op : ops)
      if (op.kind == OpKind::wait) return std::make_tuple(op.sender, op.what);
    return std::make_tuple(-1, std::string());
  };
  CHECK(first_wait(4, 3, false) == std::make_tuple(0, std::string("keys' window")));
  CHECK(first_wait(4, 3, true) == std::make_tuple(0, std::string("keys' window")));
  CHECK(first_wait(6, 2, false) == std::make_tuple(1, std::string("keys' window")));
  CHECK(first_wait(6, 2, true) == std::make_tuple(4, std::string("queries' window")));
}
