// The FMHA benchmark. Inputs in the superstep's layouts (docs/design.md §2.1 MLA
// step 5): q [T, H, 192] dense (a published window), k [T, H, 192] dense (the
// expanded keys), v the strided view of the kv_b output [T, H, 256] at column
// 128 (token stride H * 256, head stride 256). Inputs are rotated over enough
// copies to defeat L2 (rotation_slots), each engine is timed with CUDA events
// (time_launches), then validated on a sample of (query, head) rows against
// the float64 reference within the floors of fmha.h (the `wrong` column).
// FLOPs and bytes come from cost::fmha: 2 Tq Tk H (d_qk + d_v), halved for causal.
#include "fmha_bench.h"

#include <cuda_bf16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "check.h"
#include "cost.h"
#include "device_buffer.h"
#include "fmha.h"
#include "random_fill.h"
#include "ref_math.h"
#include "timing.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kDqk = 192, kDv = 128, kKvbWidth = 256;

struct Slot {
  DeviceBuffer<bf16> q, k, kvb;
};

FmhaTensors tensors_of(const Slot& s, int heads, bf16* o, float* lse) {
  return FmhaTensors{s.q.get(), int64_t(heads) * kDqk, kDqk,
                     s.k.get(), int64_t(heads) * kDqk, kDqk,
                     s.kvb.get() + kDv, int64_t(heads) * kKvbWidth, kKvbWidth,
                     o, lse};
}

// Host copy of head h of a [T, H, width] buffer's columns [col, col + d).
std::vector<uint16_t> download_head(const bf16* base, int64_t tokens, int64_t token_stride, int64_t col, int d) {
  std::vector<uint16_t> host(size_t(tokens) * d);
  PB_CUDA(cudaMemcpy2D(host.data(), size_t(d) * 2, base + col, size_t(token_stride) * 2, size_t(d) * 2,
                       size_t(tokens), cudaMemcpyDeviceToHost));
  return host;
}

// Validates sampled rows of slot 0's output against ref::fmha; returns the
// number of rows outside the floors of fmha.h (per row: lse within 1e-3,
// o rel-L2 <= 1e-2 and |o - ref| <= 2e-2 max|ref row|).
int64_t count_wrong_rows(const Slot& slot, const bf16* o, const float* lse, const FmhaShape& shape) {
  const int64_t T = shape.tq;
  const int H = shape.heads;
  const int heads[] = {0, H / 2, H - 1};
  const int64_t queries[] = {0, 1, 63, 64, 127, T / 3, T / 2 + 5, T - 2, T - 1};
  int64_t wrong = 0;
  for (int h : heads) {
    const std::vector<uint16_t> kh = download_head(slot.k.get(), T, int64_t(H) * kDqk, int64_t(h) * kDqk, kDqk);
    const std::vector<uint16_t> vh =
        download_head(slot.kvb.get(), T, int64_t(H) * kKvbWidth, int64_t(h) * kKvbWidth + kDv, kDv);
    for (int64_t i : queries) {
      if (i < 0 || i >= T) continue;
      std::vector<uint16_t> qi(kDqk), oi(kDv);
      float li = 0;
      PB_CUDA(cudaMemcpy(qi.data(), slot.q.get() + (i * H + h) * kDqk, kDqk * 2, cudaMemcpyDeviceToHost));
      PB_CUDA(cudaMemcpy(oi.data(), o + (i * H + h) * kDv, kDv * 2, cudaMemcpyDeviceToHost));
      PB_CUDA(cudaMemcpy(&li, lse + int64_t(h) * T + i, 4, cudaMemcpyDeviceToHost));
      // Row i alone: causal (tq = tk) sees keys [0, i], i.e. a dense call over i + 1 keys.
      FmhaShape one = shape;
      one.tq = 1;
      one.tk = shape.causal ? i + 1 : T;
      one.heads = 1;
      one.causal = false;
      std::vector<double> o_ref(kDv), lse_ref(1);
      ref::fmha(qi.data(), kDqk, 0, kh.data(), kDqk, 0, vh.data(), kDv, 0, o_ref.data(), lse_ref.data(), one);
      double diff2 = 0, ref2 = 0, max_diff = 0, max_ref = 0;
      bool finite = std::isfinite(li);
      for (int c = 0; c < kDv; ++c) {
        const double g = ref::bf16_to_f32(oi[c]), w = o_ref[c];
        finite = finite && std::isfinite(g);
        diff2 += (g - w) * (g - w);
        ref2 += w * w;
        max_diff = std::max(max_diff, std::fabs(g - w));
        max_ref = std::max(max_ref, std::fabs(w));
      }
      const bool ok = finite && std::fabs(li - lse_ref[0]) <= kFmhaLseFloor &&
                      std::sqrt(diff2) <= kFmhaRelL2Floor * std::sqrt(ref2) &&
                      max_diff <= kFmhaElementFloor * max_ref;
      wrong += ok ? 0 : 1;
    }
  }
  return wrong;
}

std::vector<FmhaEngine> chosen_engines(const FmhaBenchOptions& o) {
  std::vector<FmhaEngine> engines;
  if (o.engines.empty()) {
    engines.push_back(FmhaEngine::native);
    if (fmha_cudnn_available()) {
      engines.push_back(FmhaEngine::cudnn);
    } else {
      std::printf("cudnn engine: not in this build (PB_HAVE_CUDNN), skipped\n");
    }
    return engines;
  }
  for (const std::string& name : o.engines) {
    if (name == "native") {
      engines.push_back(FmhaEngine::native);
    } else if (name == "cudnn") {
      PB_CHECK(fmha_cudnn_available(), "--engine cudnn: this build has no cuDNN engine (PB_HAVE_CUDNN)");
      engines.push_back(FmhaEngine::cudnn);
    } else {
      PB_CHECK(false, "--engine: '" + name + "' is not native or cudnn");
    }
  }
  return engines;
}

std::vector<bool> chosen_masks(const FmhaBenchOptions& o) {
  if (o.masks.empty()) return {false, true};
  std::vector<bool> causal;
  for (const std::string& m : o.masks) {
    PB_CHECK(m == "dense" || m == "causal", "--mask: '" + m + "' is not dense or causal");
    causal.push_back(m == "causal");
  }
  return causal;
}

}  // namespace

int run_fmha_bench(const FmhaBenchOptions& o, RunResult& result) {
  PB_CHECK(o.heads >= 1 && o.reps >= 1 && o.warmup >= 0, "fmha bench: heads and reps must be positive");
  const std::vector<FmhaEngine> engines = chosen_engines(o);
  const std::vector<bool> masks = chosen_masks(o);
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double gemm_tflops = measure_gemm_tflops(stream);
  result.numbers["gemm_tflops"] = gemm_tflops;
  result.text["ceiling"] = "GEMM burst: cuBLAS bf16 GEMM 8192^3, f32 accumulate, median of 20";
  std::printf("GEMM ceiling (burst): %.1f TFLOP/s (cuBLAS bf16 8192^3)\n", gemm_tflops);
  std::printf("%-18s %-24s %-7s %10s %9s %7s %8s %6s\n", "case", "shape", "engine", "median_us", "TFLOP/s", "frac",
              "speedup", "wrong");
  int failed_cases = 0;
  for (int64_t T : o.tokens) {
    PB_CHECK(T >= 1, "fmha bench: tokens must be positive");
    const Cost dense_cost = cost::fmha(T, T, o.heads, kDqk, kDv, false);
    const int slots = rotation_slots(dense_cost.bytes);
    const int64_t nq = T * o.heads * kDqk, nkvb = T * o.heads * kKvbWidth;
    std::vector<Slot> in(static_cast<size_t>(slots));
    for (int s = 0; s < slots; ++s) {
      in[s].q = DeviceBuffer<bf16>(size_t(nq));
      in[s].k = DeviceBuffer<bf16>(size_t(nq));
      in[s].kvb = DeviceBuffer<bf16>(size_t(nkvb));
      // q, k uniform in [-2, 2): scale * q.k has standard deviation 4/3.
      fill_uniform_bf16(in[s].q.get(), nq, 101 + 10 * s, 2.0f, stream);
      fill_uniform_bf16(in[s].k.get(), nq, 102 + 10 * s, 2.0f, stream);
      fill_uniform_bf16(in[s].kvb.get(), nkvb, 103 + 10 * s, 1.0f, stream);
    }
    DeviceBuffer<bf16> out(size_t(T) * o.heads * kDv);
    DeviceBuffer<float> lse(size_t(T) * o.heads);
    PB_CUDA(cudaStreamSynchronize(stream));
    for (bool causal : masks) {
      FmhaShape shape;
      shape.tq = T;
      shape.tk = T;
      shape.heads = o.heads;
      shape.d_qk = kDqk;
      shape.d_v = kDv;
      shape.causal = causal;
      shape.scale = ref::bf16_to_f32(ref::f32_to_bf16_rn(1.0f / std::sqrt(float(kDqk))));  // bf16(192^-0.5)
      const Cost c = cost::fmha(T, T, o.heads, kDqk, kDv, causal);
      const std::string tag = fmt::format("fmha.{}.{}", causal ? "causal" : "dense", T);
      const std::string shape_text = fmt::format("{}x{}x{} d{}/{}", o.heads, T, T, kDqk, kDv);
      double native_us = 0;
      for (FmhaEngine e : engines) {
        const Timing t = time_launches(
            [&](int slot, cudaStream_t st) { fmha(e, tensors_of(in[size_t(slot)], o.heads, out.get(), lse.get()), shape, st); },
            slots, o.warmup, o.reps, stream);
        out.poison(stream);
        lse.poison(stream);
        fmha(e, tensors_of(in[0], o.heads, out.get(), lse.get()), shape, stream);
        PB_CUDA(cudaStreamSynchronize(stream));
        const int64_t wrong = count_wrong_rows(in[0], out.get(), lse.get(), shape);
        failed_cases += wrong != 0;
        if (e == FmhaEngine::native || native_us == 0) native_us = t.median_us;
        BenchRow row;
        row.family = "fmha";
        row.kernel = tag;
        row.variant = fmha_engine_name(e);
        row.shape = shape_text;
        row.median_us = t.median_us;
        row.min_us = t.min_us;
        row.max_us = t.max_us;
        row.reps = t.reps;
        row.bytes = c.bytes;
        row.flops = c.flops;
        row.tbps = c.bytes / (t.median_us * 1e6);
        row.tflops = c.flops / (t.median_us * 1e6);
        row.fraction = row.tflops / gemm_tflops;
        row.speedup = native_us / t.median_us;
        std::printf("%-18s %-24s %-7s %10.1f %9.1f %7.3f %8.2f %6lld\n", row.kernel.c_str(), row.shape.c_str(),
                    row.variant.c_str(), row.median_us, row.tflops, row.fraction, row.speedup, (long long)wrong);
        std::fflush(stdout);
        result.bench.push_back(row);
      }
    }
  }
  PB_CUDA(cudaStreamDestroy(stream));
  return failed_cases;
}

}  // namespace pb
