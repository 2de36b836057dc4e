// FP8 block-scaled dense projection (DeepSeek-V3's recipe) through cuBLASLt:
// e4m3 activations scaled per 1x128 group along K times e4m3 weights scaled
// per 128x128 block, f32 accumulation. ONE cublasLtMatmul per call; no
// hand-written GEMM. Encoding and scale rules: fp8.h; the operands come from
// quantize_act_fp8 (MN-major scales) and quantize_weight_fp8 (quant.h).
//
// ---- Row-major, PyTorch's linear layout (as kernels/common/gemm.h) ---------
//   xq [m, k] e4m3, row stride ldx            activation codes
//   sx [k/128, lds] f32                        activation scales, MN-major: sx[g * lds + r]
//   wq [n, k] e4m3, row stride ldw            weight codes
//   sw [ceil(n/128), ld_sw] f32                weight scales, K-major: sw[nb * ld_sw + kb]
//   y  [m, n] f32 or bf16, row stride ldy     written with beta 0 (never read)
// Meaning (value() the exact e4m3 value, fp8.h):
//   y[r][c] = Σ_g sx[g][r] · sw[c/128][g] · Σ_{l in group g} value(xq[r][l]) · value(wq[c][l])
// A band of weight rows [n0, n0 + n) with n0 % 128 == 0 is wq + n0 * ldw with
// sw + (n0/128) * ld_sw; a column slice of a wider output is y + c0 with ldy
// the wide stride (16-byte aligned, below).
//
// ---- In cuBLASLt's column-major terms: Dᵀ [n, m] = A · B -------------------
//   A = the weights: CUDA_R_8F_E4M3 stored [k, n], ld ldw, CUBLASLT_MATMUL_DESC_TRANSA = T
//       ("TN" is the only FP8 layout Hopper has); CUBLASLT_MATMUL_DESC_A_SCALE_MODE =
//       CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, A_SCALE_POINTER = sw.
//   B = the activations: CUDA_R_8F_E4M3 stored [k, m], ld ldx, TRANSB = N;
//       B_SCALE_MODE = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, B_SCALE_POINTER = sx.
//   C = D = y: [n, m], ld ldy, CUDA_R_32F (gemm_fp8_f32out) or CUDA_R_16BF
//       (gemm_fp8_bf16out; D may be f32, bf16 or f16 in these modes, never FP8).
//   CUBLAS_COMPUTE_32F, scale type CUDA_R_32F, alpha 1 and beta 0 on the host,
//   CUBLASLT_MATMUL_DESC_FAST_ACCUM left at its default 0.
// BLK x VEC128 is an allowed pairing (so are VEC128 x VEC128 and VEC128 x BLK;
// BLK x BLK is not); NVIDIA's sample (CUDALibrarySamples cuBLASLt/
// LtBlk128x128Fp8Matmul) runs the mirror VEC128 (A) x BLK (B), Transformer
// Engine and other Hopper users run this BLK (A) x VEC128 (B).
//
// ---- The scale layouts cuBLASLt reads in these modes ------------------------
// No stride attribute exists: the layout follows from the operand's shape.
// With O an operand's outer dimension (A: n, B: m) and K its inner one:
//   VEC128_32F      one f32 per (o, 128-block kb of K), outer-major ("M/N-major"):
//                   scale(o, kb) at o + kb * round_up(O, 4)  -> for B: sx[g * lds + r],
//                   lds = act_scale_ld(m) = m (m % 4 == 0 below)
//   BLK128x128_32F  one f32 per 128x128 block, K-major, the K-block count padded
//                   to a multiple of 4: scale(ob, kb) at kb + ob * round_up(K/128, 4)
//                   -> for A: sw[nb * ld_sw + kb], ld_sw = weight_scale_ld(k)
// (Sources: the cuBLAS docs' "scaling factors layouts"; Transformer Engine's
// GEMM-ready Float8Block scales [K/128, round_up(M, 4)] and [M/128,
// round_up(K/128, 4)]; cuBLASMp's test layouts; PyTorch #166752, which found
// silent wrong answers without the multiple-of-4 K-block padding.)
//
// ---- Rules, checked on the host before the call (pb::Error naming the rule) --
//   1. the device is compute capability 9.0 and cuBLASLt (run time, and
//      CUBLAS_VERSION at build time: cublasLt.h has no CUBLASLT_VERSION) >= 12.9:
//      fp8_block_scaling_supported(); Fp8Gemm's constructor refuses otherwise
//   2. m, n, k >= 0; m == 0 or n == 0 launches nothing; otherwise k is a positive
//      multiple of 128 (whole scale groups; cuBLASLt itself needs k % 16)
//   3. m % 4 == 0 and n % 4 == 0
//   4. ldx >= k, ldw >= k, both multiples of 16 (16-byte rows of codes);
//      ldy >= n with ldy * sizeof(y) a multiple of 16 (f32: ldy % 4, bf16: ldy % 8)
//   5. lds == act_scale_ld(m) and ld_sw == weight_scale_ld(k) exactly (0 = those)
//   6. xq, wq, y, sx, sw non-null and 16-byte aligned (cuBLASLt's minimum for
//      FP8 operands and block scales; the heuristic is told each operand's real
//      alignment, 16 .. 256 bytes, as Transformer Engine does)
//   7. y overlaps none of the inputs
// NaN or inf scales or codes propagate as IEEE arithmetic does; that is
// cuBLASLt's business, not a checked rule.
//
// ---- Accuracy ------------------------------------------------------------------
// Hopper's FP8 tensor core accumulates each 128-wide K block with limited
// precision (about 14 bits, DeepSeek-V3 §3.3) before cuBLASLt promotes the
// block's partial, times its two scales, into the f32 accumulator: expect
// ~1e-4 relative to Σ|terms|, not 1e-7. test/kernels/fp8/test_gemm_fp8.cu
// states the floor it holds the GEMM to.
//
// ---- Fp8Gemm -------------------------------------------------------------------
// Holds the cublasLt handle and one workspace (32 MiB unless told), allocated
// once, and a small cache of plans: the matmul descriptor, the three matrix
// layouts and the heuristic's algorithm per (m, n, k, ldx, ldw, ldy, out type)
// and alignment class of (wq, xq, y) (a band or column slice may be only
// 16-byte aligned where a whole buffer is 256).
// The plan takes the heuristic's first algorithm unless the Fp8Gemm was made
// with another rank of its list (heuristic_rank: the gemm benchmark's search
// for a faster one; every block uses 0). Algorithms differ in their summation
// order, so their outputs may differ in the last bits, each within the floor.
// The first call of a shape builds its plan (a heuristic query); later calls
// only set the two scale pointers on the cached descriptor and call
// cublasLtMatmul on `stream`: no allocation. Not thread-safe (one per thread or
// stream); the device must stay the one it was made on.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fp8.h"

namespace pb {

// True when cuBLASLt's block-scaled FP8 GEMM can run on the current device:
// compute capability 9.0 and cuBLASLt >= 12.9, at build and at run time.
// Otherwise false, and *why (when given) says which requirement failed.
bool fp8_block_scaling_supported(std::string* why = nullptr);

enum class Fp8GemmOut { f32, bf16 };

struct Fp8GemmDims {
  int64_t m = 0, n = 0, k = 0;
  int64_t ldx = 0, ldw = 0, ldy = 0;  // 0 = packed (k, k, n)
  int64_t lds = 0;                    // 0 = act_scale_ld(m); the only accepted value
  int64_t ld_sw = 0;                  // 0 = weight_scale_ld(k); the only accepted value
};

// d with its 0 = default strides filled in; throws pb::Error naming the first
// broken shape rule (2-5 above) with its values. The pointers are checked by
// the calls.
Fp8GemmDims checked_fp8_gemm_dims(Fp8GemmDims d, Fp8GemmOut out);

class Fp8Gemm {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t(32) << 20;
  static constexpr int kMaxHeuristicRank = 16;  // heuristic_rank below this

  // Throws pb::Error when !fp8_block_scaling_supported(), saying why.
  // heuristic_rank: which of cuBLASLt's heuristic algorithms the plans take (0:
  // its first); a shape with fewer throws pb::Error saying how many it has.
  explicit Fp8Gemm(size_t workspace_bytes = kDefaultWorkspaceBytes, int heuristic_rank = 0);
  ~Fp8Gemm();
  Fp8Gemm(const Fp8Gemm&) = delete;
  Fp8Gemm& operator=(const Fp8Gemm&) = delete;

  size_t cached_plans() const { return plans_.size(); }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // One cublasLtMatmul; the two calls below are its public faces.
  void run(const __nv_fp8_e4m3* xq, const float* sx, const __nv_fp8_e4m3* wq, const float* sw, void* y,
           Fp8GemmOut out, const Fp8GemmDims& dims, cudaStream_t stream);

  struct Plan;  // gemm_fp8.cu
  struct Alignments {
    uint32_t w = 0, x = 0, y = 0;  // bytes, the largest power of two <= 256 dividing the address
  };

 private:
  Plan& plan_for(const Fp8GemmDims& d, Fp8GemmOut out, const Alignments& align, const float* sx, const float* sw);

  int device_ = -1;
  int heuristic_rank_ = 0;
  void* handle_ = nullptr;  // cublasLtHandle_t
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<std::unique_ptr<Plan>> plans_;
};

// y [m, n] f32 = xq · wqᵀ, dequantized by sx and sw (the contract above).
void gemm_fp8_f32out(Fp8Gemm& gemm, const __nv_fp8_e4m3* xq, const float* sx, const __nv_fp8_e4m3* wq,
                     const float* sw, float* y, const Fp8GemmDims& dims, cudaStream_t stream);
// The same with y bf16 (cuBLASLt rounds its f32 result once).
void gemm_fp8_bf16out(Fp8Gemm& gemm, const __nv_fp8_e4m3* xq, const float* sx, const __nv_fp8_e4m3* wq,
                      const float* sw, __nv_bfloat16* y, const Fp8GemmDims& dims, cudaStream_t stream);

}  // namespace pb
