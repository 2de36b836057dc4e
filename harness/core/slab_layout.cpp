#include "slab_layout.h"

#include "model.h"

#include "check.h"

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

SlabLayout slab_layout(int cp, int64_t seg, int heads, int kv_rank, int rope_dim, int qk_dim, int v_dim) {
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
  L.slots = (cp - 1) / 2;

  const int64_t bf16 = 2, f32 = 4, u64 = 8;
  int64_t cursor = 0;
  L.doorbells = place(cursor, int64_t(L.n_doorbells()) * u64);
  L.kv = place(cursor, seg * (kv_rank + rope_dim) * bf16);
  L.q = place(cursor, seg * int64_t(heads) * qk_dim * bf16);
  L.window = {L.kv.offset, L.q.end() - L.kv.offset};
  for (int s = 0; s < 2; ++s) {
    int64_t begin = align_up(cursor);
    for (int i = 0; i < L.slots; ++i) {
      L.o[s].push_back(place(cursor, seg * int64_t(heads) * v_dim * bf16));
      L.lse[s].push_back(place(cursor, int64_t(heads) * seg * f32));
    }
    L.return_slab[s] = {begin, align_up(cursor) - begin};
  }
  L.total_bytes = align_up(cursor);
  return L;
}

SlabLayout slab_layout_with_kda(int cp, int64_t seg, int heads, int kv_rank, int rope_dim, int qk_dim, int v_dim,
                                int64_t hidden, int kda_heads, int kda_dim) {
  PB_CHECK(hidden >= 1 && kda_heads >= 1 && kda_dim >= 1, "slab_layout_with_kda: every shape must be positive");
  SlabLayout L = slab_layout(cp, seg, heads, kv_rank, rope_dim, qk_dim, v_dim);
  L.hidden = hidden;
  L.kda_heads = kda_heads;
  L.kda_dim = kda_dim;
  int64_t cursor = L.total_bytes;
  const int64_t package = int64_t(kda_heads) * kda_dim * kda_dim * 4;
  for (int p = 0; p < 2; ++p) {
    L.halo[p] = place(cursor, 4 * hidden * 2);
    L.M[p] = place(cursor, package);
    L.D[p] = place(cursor, package);
  }
  L.total_bytes = align_up(cursor);
  return L;
}

SlabLayout model_slab_layout(const ModelShape& m, int cp, int64_t rows) {
  return slab_layout_with_kda(cp, rows, int(m.heads), int(m.kv_lora), int(m.qk_rope), int(m.d_qk()), int(m.v_head),
                              m.hidden, int(m.kda_heads), int(m.kda_head_dim));
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
  return out;
}

}  // namespace pb
