// The CP lane's per-rank slab (docs/design.md §3 "Fabric"): one device
// allocation per rank that its node-local peers map over CUDA IPC. A pure
// function of the shapes, no CUDA.
//
//   doorbells  [cp * kBellKinds] u64       flags that peers store into; this rank waits on them
//   kv         [seg, kv_rank + rope_dim] bf16  | the published window (one layer
//                                              | at a time): per token the normed
//                                              | latent, then the rope half
//   q          [seg, heads * qk_dim] bf16      |
//   return slab s in {0, 1}, slot i in [0, slots), slots = return_slots(
//   Schedule::balance, cp) (schedule.h): the stripe's (cp - 1) / 2, and at
//   even cp balance's slot (cp - 1) / 2 after them, which holds a half window:
//     o        [rows, heads, v_dim] bf16   a helper's FMHA output for this rank's queries
//     lse      [heads, rows]     f32       its log-sum-exp, natural log
//     rows = slot_rows(i): seg, or seg - seg / 2 for balance's slot
//   KDA (when the layout is given KDA shapes), parity p = seq % 2 of the KDA call,
//   one slot per KDA piece of a rank (schedule.h kda_pieces: 1 contiguous, 2 zigzag):
//     halo[p]    [pieces][4, hidden] bf16        per piece, the last 3 normed rows of
//                                                the piece before it (row 3 unused)
//     M[p], D[p] [pieces][kda_heads, d, d] f32   per piece, its affine state package,
//                                                read in place by the pieces after it
//   Under layout zigzag there are no return slots (nothing is helped).
//
// NCCL staging (with_nccl_staging), appended per rank after the regions
// above, for the peers this rank reaches over NCCL (fabric.h): a copy of
// each pulled window (kv, q) and package (M, D) lands in an inbox per sender;
// what this rank delivers (returns, halo rows) waits in an outbox until its
// send completes; bells_out holds the doorbell value each message carries.
// A piece of a region (a piece's halo slot or package) lands at the same
// place of the region's inbox or outbox.
// The shared regions keep their offsets on every rank (IPC peers address
// them); the staging differs per rank and no peer addresses it.
//
// Every region starts on a kAlign-byte boundary. Both return slabs hold every
// slot (docs/design.md's sizing, plus balance's half slot) and alternate by
// the call's sequence number (return_slab): a helper writing call seq's result
// only needs the owner to have merged call seq - 2's, so helpers run a call
// ahead of owners.
//
// Doorbell values: (seq + 1) * 4096 + window, waited on with GEQ, so a flag only
// ever grows and a wait for an older (seq, window) passes at once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "schedule.h"

namespace pb {

constexpr int64_t kSlabAlign = 256;     // bytes; every region starts on this boundary
constexpr int64_t kWindowsPerSeq = 4096;  // doorbell value stride per sequence number

// Who stores a flag into whose doorbell, and what it announces.
enum class Bell : int {
  window = 0,    // sender's window (kv_norm, rope, q) for this seq is published
  returned = 1,  // sender (a helper) wrote (o, lse) into this rank's return slot
  consumed = 2,  // sender (an owner) merged its slot: this rank may overwrite it
  released = 3,  // sender read this rank's window for the last time this seq: it may be overwritten
  halo = 4,       // sender (upstream) copied its halo rows for this KDA seq into this rank's slab
  halo_read = 5,  // sender (downstream) projected the halo this rank sent it for this KDA seq
  state = 6,      // sender (upstream) wrote its package for this KDA seq in its own slab
  state_read = 7, // sender (downstream) folded this rank's package of this KDA seq
};
constexpr int kBellKinds = 8;
const char* bell_name(Bell kind);
// The message an acknowledgement answers: released -> window, consumed ->
// returned, halo_read -> halo, state_read -> state.
Bell acknowledged(Bell ack);

// Doorbell index on the receiving rank for flags stored by `sender`.
int doorbell_index(int cp, int sender, Bell kind);
// (seq + 1) * 4096 + window; 0 <= window < 4096, seq >= 0.
uint64_t doorbell_value(int64_t seq, int window);
// What a reader's acknowledgement of call seq - back reads as: doorbell_value(
// seq - back, 0), or 0 (a value every flag already holds) when that call does
// not exist, so the first calls' waits pass at once. back >= 1.
uint64_t doorbell_value_done(int64_t seq, int back);
// The inverse, for messages: seq -1 for the initial value 0.
int64_t doorbell_seq(uint64_t value);
int doorbell_window(uint64_t value);

struct Region {
  int64_t offset = 0;  // bytes from the slab base
  int64_t bytes = 0;
  int64_t end() const { return offset + bytes; }
};

struct SlabLayout {
  int cp = 0;
  int64_t seg = 0;  // token capacity of one segment (the bucket's seg_cap)
  int heads = 0, kv_rank = 0, rope_dim = 0, qk_dim = 0, v_dim = 0;
  Layout layout = Layout::contiguous;
  int slots = 0;  // return slots per slab: return_slots(Schedule::balance, cp); 0 under zigzag

  Region doorbells;          // [cp * kBellKinds] u64
  Region kv, q;              // the published window
  Region window;             // kv.offset .. q.end()
  std::array<std::vector<Region>, 2> o, lse;  // [slab][slot]
  std::array<Region, 2> return_slab;          // the whole of slab s
  int64_t hidden = 0;                         // KDA regions present when > 0
  int kda_heads = 0, kda_dim = 0;
  int kda_slots = 0;                          // KDA pieces per rank: 1, or 2 under zigzag
  std::array<Region, 2> halo, M, D;           // [parity], kda_slots slots each
  int64_t shared_bytes = 0;                   // [0, shared_bytes): the regions every rank's slab shares
  // NCCL staging of this rank (bytes 0 where the peer is not over NCCL):
  Region bells_out;                                   // [cp * kBellKinds] u64
  std::vector<Region> in_kv, in_q, in_M, in_D;        // [sender]
  std::array<std::vector<Region>, 2> out_o, out_lse;  // [slab][slot]
  std::array<Region, 2> out_halo;                     // [parity]
  int64_t total_bytes = 0;

  int n_doorbells() const { return cp * kBellKinds; }
  // The rows return slot `slot` holds: seg; seg - seg / 2 for balance's slot
  // (the moved part 1 of an owner's rows, schedule.h).
  int64_t slot_rows(int slot) const;
  // The KDA slot of piece `piece` (kda_pieces' index on the receiving rank for
  // halo_slot, on the packaging rank for M_slot and D_slot) of parity `parity`.
  Region halo_slot(int parity, int piece) const;
  Region M_slot(int parity, int piece) const;
  Region D_slot(int parity, int piece) const;
  // Every region in address order, with a name, for tests and printing
  // (staging regions only where present).
  std::vector<std::pair<std::string, Region>> regions() const;
  // Where a pulled region of `sender`'s slab (kv, q, M[p], D[p]) lands in this
  // rank's slab over NCCL; throws when this layout has no such inbox.
  Region inbox(int sender, const Region& pulled) const;
  // Where this rank keeps what it delivers into a region of a peer's slab
  // (halo[p], o[s][i], lse[s][i]) until its NCCL send completes.
  Region outbox(const Region& delivered) const;
};

// Shapes default to the model's MLA: kv latent 512, rope 64, q/k head dim 192
// (128 nope + 64 rope), v head dim 128.
SlabLayout slab_layout(int cp, int64_t seg, int heads, int kv_rank = 512, int rope_dim = 64, int qk_dim = 192,
                       int v_dim = 128, Layout layout = Layout::contiguous);
// The same plus the KDA regions (halo rows, state packages).
SlabLayout slab_layout_with_kda(int cp, int64_t seg, int heads, int kv_rank, int rope_dim, int qk_dim, int v_dim,
                                int64_t hidden, int kda_heads, int kda_dim, Layout layout = Layout::contiguous);

// `shared` plus rank `rank`'s NCCL staging for the peers p with nccl_peer[p]
// (size cp): inboxes for the windows it may read under any schedule of the
// layout's protocol (contiguous: kv of every k < rank, q of every owner it
// helps under the stripe or balance; zigzag: kv of every other rank) and,
// with KDA regions, for the packages of every rank whose pieces it folds
// (kda_pieces; contiguous: j < rank); outboxes for its returns to the owners
// it helps (in their slots) and for the halo rows to the pieces after its own
// (contiguous: rank + 1).
SlabLayout with_nccl_staging(const SlabLayout& shared, int rank, const std::vector<bool>& nccl_peer);

// The whole CP lane's slab for a model: MLA window and returns, KDA halo and packages.
struct ModelShape;
SlabLayout model_slab_layout(const ModelShape& m, int cp, int64_t rows, Layout layout = Layout::contiguous);

// The parity slot of the KDA call with sequence number seq (halo, M, D).
inline int kda_parity(int64_t seq) { return int(seq % 2); }

// The return slab of the call with sequence number seq.
inline int return_slab(int64_t seq) { return int(seq % 2); }

}  // namespace pb
