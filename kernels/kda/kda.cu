// The KDA core's entry points (kda.h): the contract checks, the workspace, the walk dispatch,
// the package and the fold. The kernels: kda_prepare.cu (kda_prepare_kernel), kda_walks.cu
// (KdaWalk::kHead, kHalves), kda_walk_wgmma.cu (KdaWalk::kWgmma, the forward on sm_90).
// Convention and stability: kda_ref.h.
#include "kda.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "check.h"
#include "launch.h"
#include "kda_internal.cuh"

namespace pb {
namespace {

using kda_detail::bf16;
using kda_detail::kC;
using kda_detail::kD;

// y = x + d, n floats (n % 4 == 0, 16-byte aligned).
__global__ void add_f32_kernel(const float4* x, const float4* d, float4* y, int64_t n4) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 a = x[i], b = d[i];
    y[i] = make_float4(__fadd_rn(a.x, b.x), __fadd_rn(a.y, b.y), __fadd_rn(a.z, b.z), __fadd_rn(a.w, b.w));
  }
}

void check_rows(const void* p, int64_t ld, int64_t min_ld, const char* name) {
  PB_CHECK(p != nullptr, std::string("kda: ") + name + " is null");
  PB_CHECK(aligned16(p) && ld % 8 == 0, std::string("kda: ") + name +
                                            " must be 16-byte aligned with a row stride that is a multiple of 8");
  PB_CHECK(ld >= min_ld, std::string("kda: ") + name + " row stride is shorter than its row");
}

StateParams state_params(const KdaWorkspace& ws, int64_t tokens) {
  PB_CHECK(tokens >= 0 && tokens <= ws.max_tokens(), "kda: tokens exceed the workspace's capacity");
  StateParams p{};
  p.w = ws.w.get();
  p.u = ws.u.get();
  p.khat = ws.khat.get();
  p.qg = ws.qg.get();
  p.aqk = ws.aqk.get();
  p.gamma = ws.gamma.get();
  p.ws_chunks = ws.chunks();
  p.tokens = tokens;
  p.chunks = int((tokens + kC - 1) / kC);
  return p;
}

void launch_state(const StateParams& p, int heads, KdaWalk walk, cudaStream_t stream) {
  switch (walk) {
    case KdaWalk::kHead: launch_walk_head(p, heads, stream); return;
    case KdaWalk::kHalves: launch_walk_halves(p, heads, stream); return;
    case KdaWalk::kWgmma: launch_walk_wgmma(p, heads, stream); return;  // forward only
  }
  PB_CHECK(false, "kda: unknown walk");
}

// kda_prepare's parameters (the contract checks) for tokens [0, tokens); with no tokens, only
// heads and the capacity are checked.
PrepParams prepare_params(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws) {
  PB_CHECK(heads == ws.heads(), "kda_prepare: heads differ from the workspace's");
  PB_CHECK(tokens >= 0 && tokens <= ws.max_tokens(), "kda_prepare: tokens exceed the workspace's capacity");
  PrepParams p{};
  p.tokens = tokens;
  if (tokens == 0) return p;
  const int64_t width = int64_t(heads) * kD;
  check_rows(in.q, in.q_ld, width, "q");
  check_rows(in.k, in.k_ld, width, "k");
  check_rows(in.v, in.v_ld, width, "v");
  check_rows(in.g, in.g_ld, width, "g");
  PB_CHECK(in.beta_pre != nullptr && in.beta_ld >= heads, "kda: beta_pre is null or its row stride < heads");
  PB_CHECK(in.A_log != nullptr && in.dt_bias != nullptr, "kda: A_log and dt_bias are required");
  PB_CHECK((tokens + kC - 1) / kC <= INT32_MAX && heads <= 65535, "kda_prepare: grid too large");
  p.in = in;
  p.ws_chunks = ws.chunks();
  p.scale = 1.0f / sqrtf(float(kD));
  p.w = ws.w.get();
  p.u = ws.u.get();
  p.khat = ws.khat.get();
  p.qg = ws.qg.get();
  p.aqk = ws.aqk.get();
  p.gamma = ws.gamma.get();
  return p;
}

// The forward walk's parameters (the contract checks) over tokens [0, tokens).
StateParams forward_params(const KdaWorkspace& ws, int64_t tokens, const float* S_in, bf16* o, int64_t o_ld,
                           float* S_out) {
  StateParams p = state_params(ws, tokens);
  if (o != nullptr && tokens > 0) check_rows(o, o_ld, int64_t(ws.heads()) * kD, "o");
  PB_CHECK(S_in == nullptr || aligned16(S_in), "kda: S_in must be 16-byte aligned");
  PB_CHECK(S_out == nullptr || aligned16(S_out), "kda: S_out must be 16-byte aligned");
  p.package = false;
  p.s_in = S_in;
  p.o = o;
  p.o_ld = o_ld;
  p.s_out = S_out;
  return p;
}

}  // namespace

KdaWorkspace::KdaWorkspace(int64_t max_tokens, int heads) : max_tokens_(max_tokens), heads_(heads) {
  PB_CHECK(max_tokens >= 1 && heads >= 1, "KdaWorkspace: tokens and heads must be positive");
  const size_t tiles = size_t(heads) * size_t(chunks());
  w = DeviceBuffer<bf16>(tiles * kC * kD);
  u = DeviceBuffer<bf16>(tiles * kC * kD);
  khat = DeviceBuffer<bf16>(tiles * kC * kD);
  qg = DeviceBuffer<bf16>(tiles * kC * kD);
  aqk = DeviceBuffer<bf16>(tiles * kC * kC);
  gamma = DeviceBuffer<float>(tiles * kD);
}

size_t KdaWorkspace::bytes_for(int64_t max_tokens, int heads) {
  const size_t tiles = size_t(heads) * size_t((max_tokens + kC - 1) / kC);
  return tiles * (4 * kC * kD * sizeof(bf16) + kC * kC * sizeof(bf16) + kD * sizeof(float)) +
         size_t(heads) * kD * kD * sizeof(float);
}

size_t KdaWorkspace::bytes() const {
  return w.bytes() + u.bytes() + khat.bytes() + qg.bytes() + aqk.bytes() + gamma.bytes();
}

void kda_prepare(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws, cudaStream_t stream) {
  const PrepParams p = prepare_params(in, tokens, heads, ws);
  if (p.tokens > 0) launch_prepare(p, heads, stream);
}

void kda_forward_state(const KdaWorkspace& ws, int64_t tokens, const float* S_in, bf16* o, int64_t o_ld,
                       float* S_out, cudaStream_t stream, KdaWalk walk) {
  launch_state(forward_params(ws, tokens, S_in, o, o_ld, S_out), ws.heads(), walk, stream);
}

void kda_forward(const KdaInputs& in, int64_t tokens, int heads, KdaWorkspace& ws, const float* S_in, bf16* o,
                 int64_t o_ld, float* S_out, cudaStream_t stream, KdaWalk walk) {
  kda_prepare(in, tokens, heads, ws, stream);
  kda_forward_state(ws, tokens, S_in, o, o_ld, S_out, stream, walk);
}

void kda_package(const KdaWorkspace& ws, int64_t tokens, float* M, float* D, cudaStream_t stream, KdaWalk walk) {
  PB_CHECK(walk != KdaWalk::kWgmma, "kda_package: the wgmma walk covers the forward only");
  StateParams p = state_params(ws, tokens);
  PB_CHECK(M != nullptr && D != nullptr && aligned16(M) && aligned16(D), "kda_package: M and D must be 16-byte aligned");
  p.package = true;
  p.s_out = D;
  p.m_out = M;
  launch_state(p, ws.heads(), walk, stream);
}

void kda_fold(const Blas& blas, const float* const* M, const float* const* D, int segments, int heads, float* S,
              float* scratch, cudaStream_t stream) {
  PB_CHECK(segments >= 1 && heads >= 1, "kda_fold: segments and heads must be positive");
  PB_CHECK(S != nullptr && scratch != nullptr && S != scratch && aligned16(S) && aligned16(scratch),
           "kda_fold: S and scratch must be distinct 16-byte aligned buffers");
  const int64_t n = int64_t(heads) * kD * kD;
  PB_CUDA(cudaMemcpyAsync(S, D[0], size_t(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  for (int j = 1; j < segments; ++j) {
    PB_CHECK(aligned16(D[j]) && M[j] != nullptr, "kda_fold: M[j] null or D[j] misaligned");
    gemm_f32_batched(blas, S, M[j], scratch, kD, kD, kD, heads, stream);
    const int64_t n4 = n / 4;
    const int blocks = int(std::min<int64_t>((n4 + 255) / 256, 4096));
    add_f32_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(scratch),
                                                reinterpret_cast<const float4*>(D[j]), reinterpret_cast<float4*>(S), n4);
    PB_CUDA_LAUNCH();
  }
}

}  // namespace pb
