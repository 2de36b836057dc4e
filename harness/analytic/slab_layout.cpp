#include "slab_layout.h"

#include "model.h"

#include "check.h"
#include "schedule.h"

namespace pb {

namespace {

int64_t align_up(int64_t x) { return (x + kSlabAlign - 1) / kSlabAlign * kSlabAlign; }

// Places `bytes` at the next aligned offset and advances the cursor.
Region place(int64_t& cursor, int64_t bytes) {
  Region r{align_up(cursor), bytes};
  cursor = r.end();
  return r;
}

}  // namespace

int64_t SlabLayout::slot_rows(int slot) const {
  PB_CHECK(slot >= 0 && slot < slots, "SlabLayout::slot_rows: slot " + std::to_string(slot) + " outside [0, " +
                                          std::to_string(slots) + ")");
  return balance_moves(cp) && slot == balance_slot(cp) ? seg - seg / 2 : seg;
}

namespace {

Region kda_slot(const std::array<Region, 2>& regions, int slots, int parity, int piece, const char* what) {
  PB_CHECK(slots > 0, std::string("SlabLayout::") + what + ": the layout has no KDA regions");
  PB_CHECK(parity >= 0 && parity < 2 && piece >= 0 && piece < slots,
           std::string("SlabLayout::") + what + ": parity " + std::to_string(parity) + " or piece " +
               std::to_string(piece) + " outside [0, 2) x [0, " + std::to_string(slots) + ")");
  const int64_t bytes = regions[size_t(parity)].bytes / slots;
  return {regions[size_t(parity)].offset + piece * bytes, bytes};
}

// The region of `regions` (either parity) that holds `r`, or null.
const Region* holder(const std::array<Region, 2>& regions, const Region& r) {
  for (const Region& x : regions)
    if (x.bytes > 0 && r.offset >= x.offset && r.offset < x.end()) return &x;
  return nullptr;
}

}  // namespace

Region SlabLayout::halo_slot(int parity, int piece) const {
  return kda_slot(halo, kda_slots, parity, piece, "halo_slot");
}
Region SlabLayout::M_slot(int parity, int piece) const { return kda_slot(M, kda_slots, parity, piece, "M_slot"); }
Region SlabLayout::D_slot(int parity, int piece) const { return kda_slot(D, kda_slots, parity, piece, "D_slot"); }

const char* bell_name(Bell kind) {
  switch (kind) {
    case Bell::window: return "window";
    case Bell::returned: return "returned";
    case Bell::consumed: return "consumed";
    case Bell::released: return "released";
    case Bell::halo: return "halo";
    case Bell::halo_read: return "halo_read";
    case Bell::state: return "state";
    case Bell::state_read: return "state_read";
  }
  return "?";
}

Bell acknowledged(Bell ack) {
  switch (ack) {
    case Bell::released: return Bell::window;
    case Bell::consumed: return Bell::returned;
    case Bell::halo_read: return Bell::halo;
    case Bell::state_read: return Bell::state;
    default: break;
  }
  throw_error(__FILE__, __LINE__, std::string("acknowledged: ") + bell_name(ack) + " is not an acknowledgement");
}

int doorbell_index(int cp, int sender, Bell kind) {
  PB_CHECK(sender >= 0 && sender < cp, "doorbell_index: sender " + std::to_string(sender) + " outside [0, cp)");
  return int(kind) * cp + sender;
}

uint64_t doorbell_value(int64_t seq, int window) {
  PB_CHECK(seq >= 0, "doorbell_value: negative seq");
  PB_CHECK(window >= 0 && window < kWindowsPerSeq, "doorbell_value: window outside [0, 4096)");
  return uint64_t(seq + 1) * uint64_t(kWindowsPerSeq) + uint64_t(window);
}

uint64_t doorbell_value_done(int64_t seq, int back) {
  PB_CHECK(seq >= 0 && back >= 1, "doorbell_value_done: seq >= 0 and back >= 1");
  return seq >= back ? doorbell_value(seq - back, 0) : 0;
}

int64_t doorbell_seq(uint64_t value) { return int64_t(value / uint64_t(kWindowsPerSeq)) - 1; }
int doorbell_window(uint64_t value) { return int(value % uint64_t(kWindowsPerSeq)); }

SlabLayout slab_layout(int cp, int64_t seg, int heads, int kv_rank, int rope_dim, int qk_dim, int v_dim,
                       Layout layout) {
  PB_CHECK(cp >= 1, "slab_layout: cp < 1");
  PB_CHECK(seg >= 1 && heads >= 1 && kv_rank >= 1 && rope_dim >= 1 && qk_dim >= 1 && v_dim >= 1,
           "slab_layout: every shape must be positive");
  SlabLayout L;
  L.cp = cp;
  L.seg = seg;
  L.heads = heads;
  L.kv_rank = kv_rank;
  L.rope_dim = rope_dim;
  L.qk_dim = qk_dim;
  L.v_dim = v_dim;
  L.layout = layout;
  L.slots = layout == Layout::zigzag ? 0 : return_slots(Schedule::balance, cp);

  const int64_t bf16 = 2, f32 = 4, u64 = 8;
  int64_t cursor = 0;
  L.doorbells = place(cursor, int64_t(L.n_doorbells()) * u64);
  L.kv = place(cursor, seg * (kv_rank + rope_dim) * bf16);
  L.q = place(cursor, seg * int64_t(heads) * qk_dim * bf16);
  L.window = {L.kv.offset, L.q.end() - L.kv.offset};
  for (int s = 0; s < 2; ++s) {
    int64_t begin = align_up(cursor);
    for (int i = 0; i < L.slots; ++i) {
      L.o[s].push_back(place(cursor, L.slot_rows(i) * int64_t(heads) * v_dim * bf16));
      L.lse[s].push_back(place(cursor, int64_t(heads) * L.slot_rows(i) * f32));
    }
    L.return_slab[s] = {begin, align_up(cursor) - begin};
  }
  L.total_bytes = L.shared_bytes = align_up(cursor);
  return L;
}

SlabLayout slab_layout_with_kda(int cp, int64_t seg, int heads, int kv_rank, int rope_dim, int qk_dim, int v_dim,
                                int64_t hidden, int kda_heads, int kda_dim, Layout layout) {
  PB_CHECK(hidden >= 1 && kda_heads >= 1 && kda_dim >= 1, "slab_layout_with_kda: every shape must be positive");
  SlabLayout L = slab_layout(cp, seg, heads, kv_rank, rope_dim, qk_dim, v_dim, layout);
  L.hidden = hidden;
  L.kda_heads = kda_heads;
  L.kda_dim = kda_dim;
  L.kda_slots = layout == Layout::zigzag ? 2 : 1;
  int64_t cursor = L.total_bytes;
  // Slots of a region follow each other unaligned: halo rows and packages are
  // multiples of 16 bytes (hidden and kda_dim^2 even).
  const int64_t package = int64_t(kda_heads) * kda_dim * kda_dim * 4;
  for (int p = 0; p < 2; ++p) {
    L.halo[p] = place(cursor, L.kda_slots * 4 * hidden * 2);
    L.M[p] = place(cursor, L.kda_slots * package);
    L.D[p] = place(cursor, L.kda_slots * package);
  }
  L.total_bytes = L.shared_bytes = align_up(cursor);
  return L;
}

SlabLayout with_nccl_staging(const SlabLayout& shared, int rank, const std::vector<bool>& nccl_peer) {
  const int cp = shared.cp;
  PB_CHECK(rank >= 0 && rank < cp && int(nccl_peer.size()) == cp,
           "with_nccl_staging: the rank and the peer list must fit cp " + std::to_string(cp));
  PB_CHECK(shared.total_bytes == shared.shared_bytes, "with_nccl_staging: the layout already has staging");
  PB_CHECK(!nccl_peer[size_t(rank)], "with_nccl_staging: a rank does not reach itself over NCCL");
  SlabLayout L = shared;
  const auto over_nccl = [&](int peer) { return nccl_peer[size_t(peer)]; };
  bool any = false;
  for (int p = 0; p < cp; ++p) any |= over_nccl(p);
  if (!any) return L;
  int64_t cursor = L.shared_bytes;
  L.bells_out = place(cursor, int64_t(L.n_doorbells()) * 8);
  L.in_kv.assign(size_t(cp), Region{});
  L.in_q.assign(size_t(cp), Region{});
  const bool zigzag = L.layout == Layout::zigzag;
  for (int k = 0; k < cp; ++k)  // every other rank's keys under zigzag, the earlier ranks' else
    if (over_nccl(k) && (zigzag ? k != rank : k < rank)) L.in_kv[size_t(k)] = place(cursor, L.kv.bytes);
  // The owners it helps under any schedule of the layout's protocol, by slot (none under zigzag).
  const std::vector<FmhaWindow> owners =
      helped_windows_any(protocol_schedules(zigzag ? Schedule::zigzag : Schedule::stripe), cp, rank);
  for (int q = 0; q < cp; ++q)  // in peer order: regions() lists them so
    for (const FmhaWindow& h : owners)
      if (h.q == q && over_nccl(q) && L.in_q[size_t(q)].bytes == 0) L.in_q[size_t(q)] = place(cursor, L.q.bytes);
  for (int s = 0; s < 2; ++s) {
    L.out_o[s].assign(size_t(L.slots), Region{});
    L.out_lse[s].assign(size_t(L.slots), Region{});
    for (const FmhaWindow& h : owners) {
      if (!over_nccl(h.q)) continue;
      L.out_o[s][size_t(h.slot)] = place(cursor, L.o[s][size_t(h.slot)].bytes);
      L.out_lse[s][size_t(h.slot)] = place(cursor, L.lse[s][size_t(h.slot)].bytes);
    }
  }
  if (L.hidden > 0) {
    L.in_M.assign(size_t(cp), Region{});
    L.in_D.assign(size_t(cp), Region{});
    const std::vector<KdaPiece> pieces = kda_pieces(L.layout, cp, rank);
    std::vector<bool> folds(size_t(cp), false);
    bool halo_to_nccl = false;
    for (const KdaPiece& piece : pieces) {
      for (const PieceRef& f : piece.fold)
        if (f.rank != rank) folds[size_t(f.rank)] = true;
      for (int r : piece.halo_readers) halo_to_nccl = halo_to_nccl || over_nccl(r);
    }
    for (int j = 0; j < cp; ++j)
      if (folds[size_t(j)] && over_nccl(j)) {
        L.in_M[size_t(j)] = place(cursor, L.M[0].bytes);
        L.in_D[size_t(j)] = place(cursor, L.D[0].bytes);
      }
    if (halo_to_nccl)
      for (int p = 0; p < 2; ++p) L.out_halo[p] = place(cursor, L.halo[p].bytes);
  }
  L.total_bytes = align_up(cursor);
  return L;
}

Region SlabLayout::inbox(int sender, const Region& pulled) const {
  PB_CHECK(sender >= 0 && sender < cp, "SlabLayout::inbox: sender " + std::to_string(sender) + " outside [0, cp)");
  const auto at = [&](const std::vector<Region>& v) { return v.empty() ? Region{} : v[size_t(sender)]; };
  Region r;
  int64_t within = 0;  // a piece of M or D (one package slot) lands at the same place of the inbox
  if (pulled.offset == kv.offset) r = at(in_kv);
  else if (pulled.offset == q.offset) r = at(in_q);
  else if (const Region* m = hidden > 0 ? holder(M, pulled) : nullptr) r = at(in_M), within = pulled.offset - m->offset;
  else if (const Region* d = hidden > 0 ? holder(D, pulled) : nullptr) r = at(in_D), within = pulled.offset - d->offset;
  else throw_error(__FILE__, __LINE__, "SlabLayout::inbox: the region at offset " + std::to_string(pulled.offset) +
                                           " is not pulled (kv, q, M, D)");
  PB_CHECK(r.bytes >= within + pulled.bytes && r.bytes > 0,
           "SlabLayout::inbox: no NCCL inbox for that region of rank " + std::to_string(sender));
  return {r.offset + within, r.bytes - within};
}

Region SlabLayout::outbox(const Region& delivered) const {
  Region r;
  bool found = false;
  int64_t within = 0;  // a piece of a halo region (one slot) waits at the same place of the outbox
  for (int p = 0; p < 2 && !found; ++p) {
    if (hidden > 0 && delivered.offset >= halo[p].offset && delivered.offset < halo[p].end())
      r = out_halo[p], within = delivered.offset - halo[p].offset, found = true;
    for (int i = 0; i < slots && !found && !out_o[p].empty(); ++i) {
      if (delivered.offset == o[p][size_t(i)].offset) r = out_o[p][size_t(i)], found = true;
      else if (delivered.offset == lse[p][size_t(i)].offset) r = out_lse[p][size_t(i)], found = true;
    }
  }
  PB_CHECK(found && r.bytes >= within + delivered.bytes && r.bytes > 0,
           "SlabLayout::outbox: no NCCL outbox for the region at offset " + std::to_string(delivered.offset));
  return {r.offset + within, r.bytes - within};
}

SlabLayout model_slab_layout(const ModelShape& m, int cp, int64_t rows, Layout layout) {
  return slab_layout_with_kda(cp, rows, int(m.heads), int(m.kv_lora), int(m.qk_rope), int(m.d_qk()), int(m.v_head),
                              m.hidden, int(m.kda_heads), int(m.kda_head_dim), layout);
}

std::vector<std::pair<std::string, Region>> SlabLayout::regions() const {
  std::vector<std::pair<std::string, Region>> out = {
      {"doorbells", doorbells}, {"kv", kv}, {"q", q}};
  for (int s = 0; s < 2; ++s)
    for (int i = 0; i < slots; ++i) {
      std::string tag = "[" + std::to_string(s) + "][" + std::to_string(i) + "]";
      out.push_back({"o" + tag, o[s][i]});
      out.push_back({"lse" + tag, lse[s][i]});
    }
  if (hidden > 0)
    for (int p = 0; p < 2; ++p) {
      const std::string tag = "[" + std::to_string(p) + "]";
      out.push_back({"halo" + tag, halo[p]});
      out.push_back({"M" + tag, M[p]});
      out.push_back({"D" + tag, D[p]});
    }
  // The staging, in placement order.
  const auto add = [&](const std::string& name, const Region& r) {
    if (r.bytes > 0) out.push_back({name, r});
  };
  add("bells_out", bells_out);
  const auto per_peer = [&](const std::string& name, const std::vector<Region>& v) {
    for (size_t p = 0; p < v.size(); ++p) add(name + "[" + std::to_string(p) + "]", v[p]);
  };
  per_peer("in_kv", in_kv);
  per_peer("in_q", in_q);
  for (int s = 0; s < 2; ++s)
    for (size_t i = 0; i < out_o[s].size(); ++i) {
      const std::string tag = "[" + std::to_string(s) + "][" + std::to_string(i) + "]";
      add("out_o" + tag, out_o[s][i]);
      add("out_lse" + tag, out_lse[s][i]);
    }
  for (size_t j = 0; j < in_M.size(); ++j) {
    add("in_M[" + std::to_string(j) + "]", in_M[j]);
    add("in_D[" + std::to_string(j) + "]", in_D[j]);
  }
  for (int p = 0; p < 2; ++p) add("out_halo[" + std::to_string(p) + "]", out_halo[p]);
  return out;
}

}  // namespace pb
