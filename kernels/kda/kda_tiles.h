// Shared-memory tile addressing of the KDA kernels (kda_prepare.cu, kda_walks.cu, kda_walk_wgmma.cu), host- and
// device-callable so that test/kernels/kda/test_kda_tiles.cpp can emulate ldmatrix and
// mma.m16n8k16 on the very same address formulas.
//
// Swizzled tile: 16-byte chunk j of row r sits at chunk j ^ (r & 7) of the row
// (row_bytes a multiple of 128), so the 8 rows an ldmatrix reads fall in 8
// distinct bank groups.
//
// ldmatrix.x4: lane l gives the address of row l % 8 of 8x8 matrix l / 8.
// The two lane patterns (row offset, chunk offset) the kernels use:
//   kPatternRowsThenK:  matrices (rows 0-7, c), (rows 8-15, c), (rows 0-7, c+1), (rows 8-15, c+1)
//     - the A operand [m][k] of an m16 x k16 step (non-transposed), and
//     - the B operand stored [k][n] (transposed load): regs 0,1 = n-tile c, regs 2,3 = n-tile c+1
//   kPatternKThenRows:  matrices (rows 0-7, c), (rows 0-7, c+1), (rows 8-15, c), (rows 8-15, c+1)
//     - the B operand stored [n][k] (non-transposed): regs 0,1 = n rows 0-7, regs 2,3 = n rows 8-15, and
//     - the A operand stored [k][m] (transposed load)
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define PB_HD __host__ __device__ __forceinline__
#else
#define PB_HD inline
#endif

namespace pb::kda_tiles {

PB_HD uint32_t swz(int row, int chunk, int row_bytes) {
  return uint32_t(row * row_bytes + ((chunk ^ (row & 7)) << 4));
}

struct RowChunk {
  int row, chunk;
};

// Offsets (row within the 16-row block, 16-byte chunk) of this lane's ldmatrix address.
PB_HD RowChunk lane_rows_then_k(int lane) { return {(lane & 7) + ((lane >> 3) & 1) * 8, lane >> 4}; }
PB_HD RowChunk lane_k_then_rows(int lane) { return {(lane & 7) + (lane >> 4) * 8, (lane >> 3) & 1}; }


// ---- The wgmma walk's tiles (kda_walk_wgmma.cu) -------------------------------------------
// A bf16 [rows][cols] tile (cols 64 or 128) in the sm_90 warpgroup-MMA canonical layout with
// the 128-byte swizzle: column block b = c / 64 is a [rows][64] sub-tile of 128-byte rows at
// byte b * rows * 128; within it, 16-byte chunk j = (c % 64) / 8 of row r sits at chunk
// j ^ (r & 7). The tile base is 1024-byte aligned, so the chunk XOR equals the hardware's
// address swizzle (address bits [4, 7) ^= bits [7, 10)). The same tile serves as a K-major
// operand (rows = M or N, columns = K) and as an MN-major one (rows = K, columns = M or N).
PB_HD uint32_t wg_at(int r, int c, int rows) {
  return uint32_t((c >> 6) * rows * 128 + r * 128 + ((((c >> 3) & 7) ^ (r & 7)) << 4) + ((c & 7) << 1));
}

// The 64-bit wgmma shared-memory matrix descriptor (sm_90): start address >> 4 in bits
// [0, 14), leading-dimension byte offset >> 4 in [16, 30), stride-dimension byte offset >> 4 in
// [32, 46), base offset 0 in [49, 52), layout type in [62, 64) (1 = 128-byte swizzle).
PB_HD uint64_t gmma_desc_sw128(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32) | (uint64_t(1) << 62);
}

// The byte address the hardware reads for element (mn, k) (k < 16) of a wgmma operand with
// descriptor `desc`, 128-byte swizzle, bf16 — the canonical layouts of
// cute/atom/mma_traits_sm90_gmma.hpp (make_gmma_desc), before the swizzle:
//   K-major:  start + (mn % 8) * 128 + (mn / 8) * SBO + 2 k           (LBO unused)
//   MN-major: start + 2 (mn % 64) + (mn / 64) * LBO + (k % 8) * 128 + (k / 8) * SBO
// then bits [4, 7) ^= bits [7, 10). Used by the CPU test to check the kernel's descriptors.
PB_HD uint32_t gmma_sw128_addr(uint64_t desc, bool mn_major, int mn, int k) {
  const uint32_t start = uint32_t(desc & 0x3FFFu) << 4;
  const uint32_t lbo = uint32_t((desc >> 16) & 0x3FFFu) << 4, sbo = uint32_t((desc >> 32) & 0x3FFFu) << 4;
  const uint32_t pre = mn_major ? start + 2u * uint32_t(mn % 64) + uint32_t(mn / 64) * lbo + uint32_t(k % 8) * 128u +
                                      uint32_t(k / 8) * sbo
                                : start + uint32_t(mn % 8) * 128u + uint32_t(mn / 8) * sbo + 2u * uint32_t(k);
  return pre ^ (((pre >> 7) & 7u) << 4);
}

// The wgmma walk's shared memory (byte offsets from a 1024-aligned base) and the descriptor
// of k-step ks of each of its B operands (st = the stage's address).
namespace wgwalk {
// one stage (chunk) of workspace tiles; two stages
constexpr uint32_t kW = 0, kUt = 16384, kKh = 32768, kQg = 49152, kAqk = 65536, kGam = 73728;
constexpr uint32_t kStage = 74752;  // 73 KiB: every tile base 1024-aligned
static_assert(kW % 1024 == 0 && kUt % 1024 == 0 && kKh % 1024 == 0 && kQg % 1024 == 0 && kAqk % 1024 == 0 &&
                  kStage % 1024 == 0 && kGam + 512 <= kStage,
              "wgwalk: tiles must be 1024-byte aligned (128-byte swizzle atoms)");

// Pᵀ = S0 Wᵀ and Oᵀ = S0 Qgᵀ (k = key channels 16 ks..): B = W or Qg [64 tok][128] K-major
// (n = token). K-major: k-step ks in column block ks / 4 at byte 32 (ks % 4) of the 128-byte
// row; SBO = 1024 (8-row groups), LBO unused (16).
PB_HD uint64_t desc_tok_k(uint32_t tile, int ks) {
  return gmma_desc_sw128(tile + (ks >> 2) * 8192 + (ks & 3) * 32, 16, 1024);
}
// Oᵀ += Uᵀ Aqkᵀ (k = tokens s = 16 ks..): B = Aqk [64 t][64 s] K-major (n = token t).
PB_HD uint64_t desc_aqk(uint32_t st, int ks) { return gmma_desc_sw128(st + kAqk + ks * 32, 16, 1024); }
// S += Uᵀ K̂ (k = tokens 16 ks..): B = K̂ [64 tok][128 key] MN-major (n = key channel): k-step ks at
// row 16 ks (byte 2048 ks), SBO = 1024 (next 8 tokens), LBO = 8192 (key channels 64..127).
PB_HD uint64_t desc_kh(uint32_t st, int ks) { return gmma_desc_sw128(st + kKh + ks * 2048, 8192, 1024); }
// o's staging tile of one warp (its 16 S rows = o channels × the chunk's 64 tokens, bf16): token
// tok's channels 8 half .. 8 half + 7 at byte obuf_at(tok, half) of 32-byte token rows; the two
// halves swap on tokens 4..7 mod 8, so that 8 consecutive token rows fall in 8 bank groups.
PB_HD uint32_t obuf_at(int tok, int half) { return uint32_t(tok) * 32u + (uint32_t(half ^ ((tok >> 2) & 1)) << 4); }
}  // namespace wgwalk

}  // namespace pb::kda_tiles
