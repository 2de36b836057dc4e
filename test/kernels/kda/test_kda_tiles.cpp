// The KDA kernels' shared-memory addressing (kernels/kda/kda_tiles.h), emulated on
// the host: tiles are written through the kernels' layouts (swizzled rows of
// 128 or 256 bytes), read back by an emulated
// ldmatrix.x4 (plain and .trans) at the lanes' addresses the kernels compute,
// and the registers are decoded by the mma.m16n8k16 fragment layout (PTX ISA):
//   A: reg0 (g, 2t..2t+1), reg1 (g+8, 2t..), reg2 (g, 2t+8..), reg3 (g+8, 2t+8..)
//   B: reg0 (k 2t..2t+1, n g), reg1 (k 2t+8..2t+9, n g)
// Each use in the KDA kernels must yield exactly the intended 16x16 A block or 16x8 B
// tiles. Also: every ldmatrix phase (8 rows) hits 8 distinct bank groups.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "kda_tiles.h"

namespace {

using pb::kda_tiles::lane_k_then_rows;
using pb::kda_tiles::lane_rows_then_k;
using pb::kda_tiles::RowChunk;
using pb::kda_tiles::swz;

using Layout = std::function<uint32_t(int row, int chunk)>;  // byte offset of a 16-byte chunk

uint16_t tag(int r, int c) { return uint16_t((r << 8) | c); }

// A [rows][cols] tile of tags written through `layout`.
std::vector<uint8_t> make_tile(int rows, int cols, const Layout& layout, size_t bytes) {
  std::vector<uint8_t> img(bytes, 0xee);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const uint32_t off = layout(r, c / 8) + uint32_t(c % 8) * 2;
      REQUIRE(off + 2 <= bytes);
      const uint16_t t = tag(r, c);
      img[off] = uint8_t(t & 0xff);
      img[off + 1] = uint8_t(t >> 8);
    }
  return img;
}

uint16_t load16(const std::vector<uint8_t>& img, uint32_t off) { return uint16_t(img[off] | (img[off + 1] << 8)); }

// regs[lane][i]: two 16-bit halves (lo = lower column), as ldmatrix.x4 returns them.
struct Regs {
  uint16_t lo[32][4], hi[32][4];
};

Regs ldmatrix_x4(const std::vector<uint8_t>& img, const uint32_t (&addr)[32], bool trans) {
  Regs r{};
  for (int m = 0; m < 4; ++m) {
    // matrix m, row j at addr[8m + j], 8 elements
    uint16_t M[8][8];
    for (int j = 0; j < 8; ++j) {
      CHECK(addr[8 * m + j] % 16 == 0);
      for (int e = 0; e < 8; ++e) M[j][e] = load16(img, addr[8 * m + j] + 2 * e);
    }
    for (int l = 0; l < 32; ++l) {
      const int row = l / 4, col = 2 * (l % 4);
      r.lo[l][m] = trans ? M[col][row] : M[row][col];
      r.hi[l][m] = trans ? M[col + 1][row] : M[row][col + 1];
    }
  }
  // bank groups: the 8 addresses of each matrix fall in distinct 16-byte bank groups
  for (int m = 0; m < 4; ++m) {
    std::set<uint32_t> groups;
    for (int j = 0; j < 8; ++j) groups.insert((addr[8 * m + j] / 16) % 8);
    CHECK(groups.size() == 8);
  }
  return r;
}

// The 16x16 A operand the registers hold.
void decode_a(const Regs& r, uint16_t (&A)[16][16]) {
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int q = 0; q < 4; ++q) {
      A[rows[q]][cols[q]] = r.lo[l][q];
      A[rows[q]][cols[q] + 1] = r.hi[l][q];
    }
  }
}

// The 16x8 B operand held by registers (q0, q1).
void decode_b(const Regs& r, int q0, uint16_t (&B)[16][8]) {
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    B[2 * t][g] = r.lo[l][q0];
    B[2 * t + 1][g] = r.hi[l][q0];
    B[2 * t + 8][g] = r.lo[l][q0 + 1];
    B[2 * t + 9][g] = r.hi[l][q0 + 1];
  }
}

Layout swizzled(int row_bytes) {
  return [row_bytes](int row, int chunk) { return swz(row, chunk, row_bytes); };
}

// addr[lane] = layout(row0 + p.row, chunk0 + p.chunk) for the lane pattern p.
template <class Pattern>
void lane_addresses(const Layout& layout, int row0, int chunk0, Pattern pattern, uint32_t (&addr)[32]) {
  for (int l = 0; l < 32; ++l) {
    const RowChunk p = pattern(l);
    addr[l] = layout(row0 + p.row, chunk0 + p.chunk);
  }
}

TEST_CASE("swizzle is a permutation of each row's chunks") {
  for (int rb : {128, 256, 512}) {
    for (int r = 0; r < 64; ++r) {
      std::set<uint32_t> seen;
      for (int c = 0; c < rb / 16; ++c) {
        const uint32_t off = swz(r, c, rb);
        CHECK(off >= uint32_t(r * rb));
        CHECK(off < uint32_t((r + 1) * rb));
        seen.insert(off);
      }
      CHECK(seen.size() == size_t(rb / 16));
    }
  }
}

TEST_CASE("A operand, row-major tile, plain ldmatrix (W, Qg, qe, ke, Aqk)") {
  for (int rb : {256, 128}) {
    const int cols = rb / 2;
    const Layout lay = swizzled(rb);
    const auto img = make_tile(64, cols, lay, size_t(64 * rb));
    for (int rblk = 0; rblk < 4; ++rblk)
      for (int ks = 0; ks < cols / 16; ++ks) {
        uint32_t addr[32];
        lane_addresses(lay, 16 * rblk, 2 * ks, lane_rows_then_k, addr);
        uint16_t A[16][16];
        decode_a(ldmatrix_x4(img, addr, false), A);
        for (int i = 0; i < 16; ++i)
          for (int j = 0; j < 16; ++j) CHECK(A[i][j] == tag(16 * rblk + i, 16 * ks + j));
      }
  }
}

TEST_CASE("B operand stored [n][k], plain ldmatrix (S0 in W S0^T, Qg S0^T)") {
  const Layout lay = swizzled(256);
  const auto img = make_tile(64, 128, lay, 64 * 256);
  for (int dh = 0; dh < 4; ++dh)
    for (int ks = 0; ks < 8; ++ks) {
      uint32_t addr[32];
      lane_addresses(lay, 16 * dh, 2 * ks, lane_k_then_rows, addr);
      const Regs r = ldmatrix_x4(img, addr, false);
      for (int nt = 0; nt < 2; ++nt) {
        uint16_t B[16][8];
        decode_b(r, 2 * nt, B);
        for (int k = 0; k < 16; ++k)
          for (int n = 0; n < 8; ++n) CHECK(B[k][n] == tag(16 * dh + 8 * nt + n, 16 * ks + k));
      }
    }
}

// A [64][cols] bf16 tile in one of the walks' layouts (bytes: its size).
struct TileUse {
  Layout lay;
  int cols;
  size_t bytes;
};

TEST_CASE("B operand stored [k][n], ldmatrix.trans (kg, v, K-hat, U)") {
  const TileUse uses[] = {{swizzled(256), 128, 64 * 256}, {swizzled(128), 64, 64 * 128}};
  for (const TileUse& u : uses) {
    const auto img = make_tile(64, u.cols, u.lay, u.bytes);
    for (int ks = 0; ks < 4; ++ks)
      for (int np = 0; np < u.cols / 16; ++np) {
        uint32_t addr[32];
        lane_addresses(u.lay, 16 * ks, 2 * np, lane_rows_then_k, addr);
        const Regs r = ldmatrix_x4(img, addr, true);
        for (int nt = 0; nt < 2; ++nt) {
          uint16_t B[16][8];
          decode_b(r, 2 * nt, B);
          for (int k = 0; k < 16; ++k)
            for (int n = 0; n < 8; ++n) CHECK(B[k][n] == tag(16 * ks + k, 16 * np + 8 * nt + n));
        }
      }
  }
}

TEST_CASE("A operand stored [k][m], ldmatrix.trans (U^T in the state update)") {
  // U [64 tokens][rows]: swizzled 256-byte rows (head walk), swizzled 128-byte rows (halves walk)
  const TileUse uses[] = {{swizzled(256), 128, 64 * 256}, {swizzled(128), 64, 64 * 128}};
  for (const TileUse& u : uses) {
    const auto img = make_tile(64, u.cols, u.lay, u.bytes);
    for (int ks = 0; ks < 4; ++ks)
      for (int mt = 0; mt < u.cols / 16; ++mt) {
        uint32_t addr[32];
        lane_addresses(u.lay, 16 * ks, 2 * mt, lane_k_then_rows, addr);
        uint16_t A[16][16];
        decode_a(ldmatrix_x4(img, addr, true), A);
        for (int m = 0; m < 16; ++m)
          for (int k = 0; k < 16; ++k) CHECK(A[m][k] == tag(16 * ks + k, 16 * mt + m));
      }
  }
}

// ---- The wgmma walk (kda_walk_wgmma.cu): tiles in the wgmma canonical 128-byte-swizzle
// layout (kda_tiles::wg_at), read through each product's descriptors (kda_tiles::wgwalk) by
// the canonical-layout address model (kda_tiles::gmma_sw128_addr). Every (mn, k) of every
// k-step of every product must reach exactly the intended element.

using pb::kda_tiles::gmma_sw128_addr;
using pb::kda_tiles::wg_at;
namespace ww = pb::kda_tiles::wgwalk;

// An image of the kernel's shared memory (from its 1024-aligned base) with one [rows][cols]
// tile of tags (r * 128 + c + 1; 0 elsewhere) written at `at` through wg_at.
std::vector<uint8_t> wg_image(uint32_t at, int rows, int cols) {
  std::vector<uint8_t> img(2 * ww::kStage, 0);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const uint32_t off = at + wg_at(r, c, rows);
      REQUIRE(off + 2 <= img.size());
      const uint16_t t = uint16_t(r * 128 + c + 1);
      img[off] = uint8_t(t & 0xff);
      img[off + 1] = uint8_t(t >> 8);
    }
  return img;
}
uint16_t wg_tag(int r, int c) { return uint16_t(r * 128 + c + 1); }

TEST_CASE("wgmma tiles: wg_at is a bijection onto the tile's bytes, 16-byte chunks intact") {
  for (const auto& [rows, cols] : {std::pair{64, 128}, std::pair{128, 128}, std::pair{64, 64}}) {
    std::set<uint32_t> seen;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        const uint32_t off = wg_at(r, c, rows);
        CHECK(off < uint32_t(rows * cols * 2));
        CHECK(off % 2 == 0);
        if (c % 8) CHECK(off == wg_at(r, c - c % 8, rows) + 2u * uint32_t(c % 8));
        seen.insert(off);
      }
    CHECK(seen.size() == size_t(rows * cols));
  }
}

TEST_CASE("wgmma walk: every descriptor reads the intended operand element") {
  for (uint32_t stage = 0; stage < 2; ++stage) {
    const uint32_t st = stage * ww::kStage;
    // Pᵀ = S0 Wᵀ, Oᵀ = S0 Qgᵀ: B (n = token, k = key 16 ks + k) K-major
    for (uint32_t tile : {ww::kW, ww::kQg}) {
      const auto img = wg_image(st + tile, 64, 128);
      for (int ks = 0; ks < 8; ++ks)
        for (int n = 0; n < 64; ++n)
          for (int k = 0; k < 16; ++k)
            CHECK(load16(img, gmma_sw128_addr(ww::desc_tok_k(st + tile, ks), false, n, k)) == wg_tag(n, 16 * ks + k));
    }
    // Oᵀ += Uᵀ Aqkᵀ: B (n = token t, k = token s = 16 ks + k) K-major
    {
      const auto img = wg_image(st + ww::kAqk, 64, 64);
      for (int ks = 0; ks < 4; ++ks)
        for (int n = 0; n < 64; ++n)
          for (int k = 0; k < 16; ++k)
            CHECK(load16(img, gmma_sw128_addr(ww::desc_aqk(st, ks), false, n, k)) == wg_tag(n, 16 * ks + k));
    }
    // S += Uᵀ K̂: B (n = key channel, k = token 16 ks + k) MN-major
    {
      const auto img = wg_image(st + ww::kKh, 64, 128);
      for (int ks = 0; ks < 4; ++ks)
        for (int n = 0; n < 128; ++n)
          for (int k = 0; k < 16; ++k)
            CHECK(load16(img, gmma_sw128_addr(ww::desc_kh(st, ks), true, n, k)) == wg_tag(16 * ks + k, n));
    }
  }
}

// The kernel's 2-byte reads of Ũ [64 tokens][128 rows] for Uᵀ = Ũᵀ − Pᵀ: for each accumulator
// pair i and each of its two tokens, lane (g, t) of warp w in warpgroup h reads element
// (token 8 (i >> 2) + 2 t + e, row 64 h + 16 w + g + 8 ((i >> 1) & 1)). No two distinct 4-byte
// words of one instruction may share a bank (lanes reading the same word are a broadcast).
TEST_CASE("wgmma walk: the transposed reads of Ũ are free of bank conflicts") {
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 4; ++w)
      for (int i = 0; i < 32; i += 2)
        for (int e = 0; e < 2; ++e) {
          std::map<uint32_t, std::set<uint32_t>> words_of_bank;
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane >> 2, t = lane & 3;
            const uint32_t word = wg_at(8 * (i >> 2) + 2 * t + e, 64 * h + 16 * w + g + 8 * ((i >> 1) & 1), 64) / 4;
            words_of_bank[word % 32].insert(word);
          }
          for (const auto& [bank, words] : words_of_bank) CHECK(words.size() == 1);
        }
}

// o's staging in the wgmma walk: each warp packs its Oᵀ fragment (element i of lane 4 g + t: S
// row / o channel g + 8 ((i >> 1) & 1), token 8 (i >> 2) + 2 t + (i & 1)) into 16 8x8 matrices,
// stores them with four stmatrix.x4.trans (matrix mm of store q: token block 2 q + mm / 2,
// channel half mm % 2; lane 8 m + j addresses token row 8 (2 q + m / 2) + j, half m % 2), and
// then reads 16-byte halves of token rows (lane L, step k: token 16 k + L / 2, half L % 2).
// Emulated here: every lane must read exactly its token's 8 channels, and every stmatrix matrix
// and every 8-lane phase of the reads must hit 8 distinct bank groups.
TEST_CASE("wgmma walk: o staged by stmatrix.trans lands as token rows, free of bank conflicts") {
  auto value = [](int ch, int tok) { return uint16_t(ch * 64 + tok + 1); };  // ch < 16, tok < 64
  std::vector<uint16_t> tile(64 * 16, 0);  // 2048 bytes as 16-bit words
  for (int q = 0; q < 4; ++q) {
    for (int mm = 0; mm < 4; ++mm) {
      const int nb = 2 * q + (mm >> 1), hh = mm & 1;
      std::set<uint32_t> groups;
      for (int j = 0; j < 8; ++j) {  // the row address lane 8 mm + j gives receives column j
        const uint32_t at = ww::obuf_at(8 * nb + j, hh);
        groups.insert((at / 16) % 8);
        for (int k = 0; k < 8; ++k) {
          // fragment element (row k, column j) is lane 4 k + j / 2's register mm, half j % 2:
          // its pair i = 4 nb + 2 hh, i.e. channel k + 8 hh, token 8 nb + j
          const int lane = 4 * k + j / 2, e = j % 2, g = lane >> 2, t = lane & 3;
          const int i = 4 * nb + 2 * hh + e;
          tile[at / 2 + k] = value(g + 8 * ((i >> 1) & 1), 8 * (i >> 2) + 2 * t + (i & 1));
        }
      }
      CHECK(groups.size() == 8);
    }
  }
  for (int k = 0; k < 4; ++k)
    for (int phase = 0; phase < 4; ++phase) {
      std::set<uint32_t> groups;
      for (int lane = 8 * phase; lane < 8 * phase + 8; ++lane) {
        const int tok = 16 * k + (lane >> 1), half = lane & 1;
        const uint32_t at = ww::obuf_at(tok, half);
        groups.insert((at / 16) % 8);
        for (int e = 0; e < 8; ++e) CHECK(tile[at / 2 + e] == value(8 * half + e, tok));
      }
      CHECK(groups.size() == 8);
    }
}

}  // namespace
