// Cut 1 — land: f32 GEMM partials -> bf16 (docs/design.md §4).
//
//   p [rows, split_k, nt] f32   split_k partial slabs per row, dense
//   o [rows, n] bf16            dense; column c is partial column off + c
//
// Contract, per (r, c):
//   acc = 0.0f; for s = 0 .. split_k-1 ascending: acc += p[r][s][off + c];
//   o[r][c] = __float2bfloat16_rn(acc)
// Starting from +0.0f lands a -0 partial as +0. Baseline, cut and reference
// agree bit for bit on every input.
//
// Preconditions (checked by every launcher): rows, nt, off, n >= 0,
// split_k >= 1, off + n <= nt, p and o non-null unless rows * n == 0, and the
// two ranges do not overlap. rows == 0 or n == 0 launches nothing.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "variant.h"

namespace pb {

struct LandShape {
  int64_t rows;  // b: rows of the partial and of the output
  int split_k;   // partial slabs per row, summed in ascending order
  int64_t nt;    // width of one partial slab (f32 elements)
  int64_t off;   // first landed column of the slab
  int64_t n;     // landed columns = width of o
};

// Throws pb::Error when the shape breaks the preconditions above.
void check_land_shape(const LandShape& s);

// One output element per thread, 2-byte stores (the retired TileLang kernel).
void land_baseline(const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream);
// 8 columns per thread: two float4 loads per slab, one 16-byte store,
// grid-stride over rows x n/8. Shapes or pointers the vector path cannot take
// (p or o not 16-byte aligned, nt % 4, off % 4 or n % 8 != 0) run the scalar
// baseline kernel.
void land_cut(const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream);
// The one dispatch point on the cut switch.
void land(Variant v, const float* p, __nv_bfloat16* o, const LandShape& s, cudaStream_t stream);

namespace ref {
// Plain C++ reference; o holds bf16 bit patterns [rows, n].
void land(const float* p, uint16_t* o, const LandShape& s);
}  // namespace ref

}  // namespace pb
