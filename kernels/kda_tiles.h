// Shared-memory tile addressing of the KDA kernels (kda.cu), host- and
// device-callable so that test/cpu/test_kda_tiles.cpp can emulate ldmatrix and
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

}  // namespace pb::kda_tiles
