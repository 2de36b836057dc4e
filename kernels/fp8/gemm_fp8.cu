// FP8 block-scaled dense projection through cuBLASLt. Contract, cuBLASLt's
// roles and scale layouts, and the rules checked here: gemm_fp8.h.
//
//   gemm_fp8_f32out / gemm_fp8_bf16out -> Fp8Gemm::run: check the rules, find
//   or build the plan of (m, n, k, ldx, ldw, ldy, out), set the two scale
//   pointers on its descriptor, one cublasLtMatmul on the caller's stream.
#include "gemm_fp8.h"

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "check.h"
#include "device_buffer.h"
#include "gemm.h"
#include "launch.h"

namespace pb {

namespace {

// The largest power of two <= 256 that divides p's address: what the
// heuristic is told the operand's alignment is (at least 16 by the rules).
uint32_t alignment_of(const void* p) {
  uint32_t a = 256;
  while (a > 1 && reinterpret_cast<uintptr_t>(p) % a != 0) a /= 2;
  return a;
}

std::string str(int64_t v) { return std::to_string(v); }

const char* out_name(Fp8GemmOut out) { return out == Fp8GemmOut::f32 ? "f32" : "bf16"; }
int64_t out_bytes(Fp8GemmOut out) { return out == Fp8GemmOut::f32 ? 4 : 2; }

std::string describe(const Fp8GemmDims& d, Fp8GemmOut out) {
  return "m " + str(d.m) + " n " + str(d.n) + " k " + str(d.k) + " ldx " + str(d.ldx) + " ldw " + str(d.ldw) +
         " ldy " + str(d.ldy) + ", " + out_name(out) + " out";
}

// Bytes a strided [rows, cols] operand spans.
size_t span_bytes(int64_t rows, int64_t ld, int64_t cols, int64_t elem) {
  return rows == 0 || cols == 0 ? 0 : size_t((rows - 1) * ld + cols) * size_t(elem);
}

template <class T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const T& value) {
  PB_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value));
}
template <class T>
void set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const T& value) {
  PB_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value));
}

struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref) (void)cublasLtMatmulPreferenceDestroy(pref);
  }
};

}  // namespace

bool fp8_block_scaling_supported(std::string* why) {
  std::string reason;
#if CUBLAS_VERSION < 120900
  reason = "built against cuBLAS " + std::to_string(CUBLAS_VERSION) +
           ", older than 12.9: no VEC128_32F / BLK128x128_32F scale modes";
#else
  int device = -1, major = 0, minor = 0;
  const cudaError_t rc = cudaGetDevice(&device);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    reason = std::string("no CUDA device (") + cudaGetErrorString(rc) + ")";
  } else if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
             cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    reason = "cannot read the compute capability of GPU " + std::to_string(device);
  } else if (major != 9 || minor != 0) {
    reason = "GPU " + std::to_string(device) + " has compute capability " + std::to_string(major) + "." +
             std::to_string(minor) +
             ": cuBLASLt's 1x128 / 128x128 block-scaled FP8 GEMM (VEC128_32F, BLK128x128_32F) runs on Hopper "
             "(9.0) only";
  } else if (cublasLtGetVersion() < 120900) {
    reason = "the cuBLASLt loaded at run time is version " + std::to_string(cublasLtGetVersion()) +
             ", older than 12.9 (120900): no block-scaled FP8 GEMM";
  }
#endif
  if (why) *why = reason;
  return reason.empty();
}

Fp8GemmDims checked_fp8_gemm_dims(Fp8GemmDims d, Fp8GemmOut out) {
  const std::string who = "gemm_fp8: ";
  PB_CHECK(d.m >= 0 && d.n >= 0 && d.k >= 0,
           who + "negative dimension (m " + str(d.m) + ", n " + str(d.n) + ", k " + str(d.k) + ")");
  if (d.ldx == 0) d.ldx = d.k;
  if (d.ldw == 0) d.ldw = d.k;
  if (d.ldy == 0) d.ldy = d.n;
  if (d.lds == 0) d.lds = act_scale_ld(d.m);
  if (d.ld_sw == 0) d.ld_sw = weight_scale_ld(d.k);
  if (d.m == 0 || d.n == 0) return d;  // nothing to launch
  PB_CHECK(d.k > 0 && d.k % kFp8Group == 0,
           who + "k = " + str(d.k) + " is not a positive multiple of 128 (whole 1x128 / 128x128 scale blocks)");
  PB_CHECK(d.m % 4 == 0, who + "m = " + str(d.m) + " is not a multiple of 4 (cuBLASLt's block-scaled FP8 GEMM)");
  PB_CHECK(d.n % 4 == 0, who + "n = " + str(d.n) + " is not a multiple of 4 (cuBLASLt's block-scaled FP8 GEMM)");
  PB_CHECK(d.ldx >= d.k && d.ldx % 16 == 0,
           who + "ldx = " + str(d.ldx) + " must be >= k = " + str(d.k) + " and a multiple of 16 (16-byte rows)");
  PB_CHECK(d.ldw >= d.k && d.ldw % 16 == 0,
           who + "ldw = " + str(d.ldw) + " must be >= k = " + str(d.k) + " and a multiple of 16 (16-byte rows)");
  const int64_t y_step = 16 / out_bytes(out);
  PB_CHECK(d.ldy >= d.n && d.ldy % y_step == 0,
           who + "ldy = " + str(d.ldy) + " must be >= n = " + str(d.n) + " and a multiple of " + str(y_step) +
               " (16-byte rows of " + out_name(out) + " output)");
  PB_CHECK(d.lds == act_scale_ld(d.m),
           who + "lds = " + str(d.lds) + " must be act_scale_ld(m) = " + str(act_scale_ld(d.m)) +
               ": cuBLASLt's VEC128_32F reads the activation scales with exactly that group stride");
  PB_CHECK(d.ld_sw == weight_scale_ld(d.k),
           who + "ld_sw = " + str(d.ld_sw) + " must be weight_scale_ld(k) = " + str(weight_scale_ld(d.k)) +
               ": cuBLASLt's BLK128x128_32F reads the weight scales with exactly that block-row stride");
  return d;
}

// ---------------------------------------------------------------------------
// Fp8Gemm

struct Fp8Gemm::Plan {
  Fp8GemmDims dims;
  Fp8GemmOut out = Fp8GemmOut::f32;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo = {};

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d) (void)cublasLtMatrixLayoutDestroy(d);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (op) (void)cublasLtMatmulDescDestroy(op);
  }
  Alignments align;

  bool matches(const Fp8GemmDims& x, Fp8GemmOut o, const Alignments& al) const {
    return o == out && x.m == dims.m && x.n == dims.n && x.k == dims.k && x.ldx == dims.ldx && x.ldw == dims.ldw &&
           x.ldy == dims.ldy && al.w == align.w && al.x == align.x && al.y == align.y;
  }
};

Fp8Gemm::Fp8Gemm(size_t workspace_bytes, int heuristic_rank)
    : heuristic_rank_(heuristic_rank), workspace_bytes_(workspace_bytes) {
  PB_CHECK(heuristic_rank >= 0 && heuristic_rank < kMaxHeuristicRank,
           "Fp8Gemm: heuristic_rank must be 0 .. " + std::to_string(kMaxHeuristicRank - 1) + ", got " +
               std::to_string(heuristic_rank));
  std::string why;
  PB_CHECK(fp8_block_scaling_supported(&why), "Fp8Gemm: no block-scaled FP8 GEMM here: " + why);
  PB_CUDA(cudaGetDevice(&device_));
  if (workspace_bytes_) workspace_ = device_allocate(workspace_bytes_, "Fp8Gemm workspace");
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t status = cublasLtCreate(&h);
  if (status != CUBLAS_STATUS_SUCCESS) {
    if (workspace_) PB_CUDA_NOTHROW(cudaFree(workspace_));
    PB_CUBLAS_CALL(status);
  }
  handle_ = h;
}

Fp8Gemm::~Fp8Gemm() {
  plans_.clear();
  if (handle_) (void)cublasLtDestroy(static_cast<cublasLtHandle_t>(handle_));
  if (workspace_) PB_CUDA_NOTHROW(cudaFree(workspace_));
}

Fp8Gemm::Plan& Fp8Gemm::plan_for(const Fp8GemmDims& dims, Fp8GemmOut out, const Alignments& align,
                                  const float* sx, const float* sw) {
  for (const auto& p : plans_)
    if (p->matches(dims, out, align)) return *p;

  auto p = std::make_unique<Plan>();
  p->dims = dims;
  p->out = out;
  p->align = align;
#if CUBLAS_VERSION >= 120900
  PB_CUBLAS_CALL(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p->op, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T));
  set_desc(p->op, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N));
  set_desc(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  set_desc(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  // The heuristic sees the real scale pointers; each call sets its own again.
  set_desc(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(sw));
  set_desc(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(sx));
  const cudaDataType_t y_type = out == Fp8GemmOut::f32 ? CUDA_R_32F : CUDA_R_16BF;
  PB_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, uint64_t(dims.k), uint64_t(dims.n), dims.ldw));
  PB_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, uint64_t(dims.k), uint64_t(dims.m), dims.ldx));
  PB_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&p->d, y_type, uint64_t(dims.n), uint64_t(dims.m), dims.ldy));

  PreferenceGuard pref;
  PB_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&pref.pref));
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t(workspace_bytes_));
  // The operands' real alignments (16 .. 256 bytes; the default assumes 256):
  // the algorithm works for every pointer of this alignment class.
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align.w);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align.x);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align.y);
  set_pref(pref.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align.y);
  cublasLtMatmulHeuristicResult_t results[kMaxHeuristicRank] = {};
  int returned = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(static_cast<cublasLtHandle_t>(handle_), p->op, p->a, p->b, p->d, p->d, pref.pref,
                                     heuristic_rank_ + 1, results, &returned);
  const cublasLtMatmulHeuristicResult_t& result = results[heuristic_rank_];
  PB_CHECK(status == CUBLAS_STATUS_SUCCESS && returned > heuristic_rank_ && result.state == CUBLAS_STATUS_SUCCESS,
           "gemm_fp8: cuBLASLt offers no algorithm for the block-scaled FP8 GEMM (" + describe(dims, out) +
               ", alignments wq " + str(align.w) + " xq " + str(align.x) + " y " + str(align.y) +
               " bytes; A = weights BLK128x128_32F op T, B = activations VEC128_32F op N): " +
               cublasGetStatusName(status != CUBLAS_STATUS_SUCCESS ? status : result.state) + ", " +
               std::to_string(returned) + " algorithm(s), rank " + std::to_string(heuristic_rank_) + " asked");
  p->algo = result.algo;
#else
  (void)sx;
  (void)sw;
  PB_CHECK(false, "gemm_fp8: built against cuBLAS older than 12.9");
#endif
  plans_.push_back(std::move(p));
  return *plans_.back();
}

void Fp8Gemm::run(const __nv_fp8_e4m3* xq, const float* sx, const __nv_fp8_e4m3* wq, const float* sw, void* y,
                  Fp8GemmOut out, const Fp8GemmDims& dims, cudaStream_t stream) {
  const Fp8GemmDims d = checked_fp8_gemm_dims(dims, out);
  if (d.m == 0 || d.n == 0) return;
  int device = -1;
  PB_CUDA(cudaGetDevice(&device));
  PB_CHECK(device == device_, "gemm_fp8: the Fp8Gemm was made on GPU " + str(device_) + ", called on GPU " +
                                  str(device));
  PB_CHECK(xq && wq && y && sx && sw, "gemm_fp8: a null operand (xq, sx, wq, sw or y)");
  PB_CHECK(aligned16(xq), "gemm_fp8: xq is not 16-byte aligned");
  PB_CHECK(aligned16(wq), "gemm_fp8: wq is not 16-byte aligned");
  PB_CHECK(aligned16(y), "gemm_fp8: y is not 16-byte aligned");
  PB_CHECK(aligned16(sx), "gemm_fp8: sx (activation scales) is not 16-byte aligned");
  PB_CHECK(aligned16(sw), "gemm_fp8: sw (weight scales) is not 16-byte aligned");
  const size_t y_bytes = span_bytes(d.m, d.ldy, d.n, out_bytes(out));
  const int64_t kbs = d.k / kFp8Group, nbs = (d.n + kFp8Group - 1) / kFp8Group;
  PB_CHECK(!overlaps(y, y_bytes, xq, span_bytes(d.m, d.ldx, d.k, 1)), "gemm_fp8: y overlaps xq");
  PB_CHECK(!overlaps(y, y_bytes, wq, span_bytes(d.n, d.ldw, d.k, 1)), "gemm_fp8: y overlaps wq");
  PB_CHECK(!overlaps(y, y_bytes, sx, span_bytes(kbs, d.lds, d.m, 4)), "gemm_fp8: y overlaps sx");
  PB_CHECK(!overlaps(y, y_bytes, sw, span_bytes(nbs, d.ld_sw, d.ld_sw, 4)), "gemm_fp8: y overlaps sw");

  Plan& p = plan_for(d, out, Alignments{alignment_of(wq), alignment_of(xq), alignment_of(y)}, sx, sw);
  set_desc(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(sw));
  set_desc(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(sx));
  const float alpha = 1.0f, beta = 0.0f;
  PB_CUBLAS_CALL(cublasLtMatmul(static_cast<cublasLtHandle_t>(handle_), p.op, &alpha, wq, p.a, xq, p.b, &beta, y,
                                p.d, y, p.d, &p.algo, workspace_, workspace_bytes_, stream));
}

void gemm_fp8_f32out(Fp8Gemm& gemm, const __nv_fp8_e4m3* xq, const float* sx, const __nv_fp8_e4m3* wq,
                     const float* sw, float* y, const Fp8GemmDims& dims, cudaStream_t stream) {
  gemm.run(xq, sx, wq, sw, y, Fp8GemmOut::f32, dims, stream);
}

void gemm_fp8_bf16out(Fp8Gemm& gemm, const __nv_fp8_e4m3* xq, const float* sx, const __nv_fp8_e4m3* wq,
                      const float* sw, __nv_bfloat16* y, const Fp8GemmDims& dims, cudaStream_t stream) {
  gemm.run(xq, sx, wq, sw, y, Fp8GemmOut::bf16, dims, stream);
}

}  // namespace pb
