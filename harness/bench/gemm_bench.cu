#include "gemm_bench.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>

#include "check.h"
#include "cost.h"
#include "device_buffer.h"
#include "fp8.h"
#include "gemm.h"
#include "gemm_fp8.h"
#include "launch.h"
#include "model.h"
#include "output_diff.h"
#include "quant.h"
#include "random_fill.h"
#include "timing.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;

struct Shape {
  std::string name;  // the superstep's GEMM (gemm.<name>)
  int64_t n, k;
  int per_layer;     // launches of this shape in its layer kind
};

// K3's dense weight GEMMs (docs/design.md §2.1); the router, kv_b and the lm
// head stay bf16 in every precision and are not listed.
std::vector<Shape> k3_shapes() {
  const ModelShape m = model_preset("k3");
  const int64_t h = m.hidden, inner = m.kda_inner();
  return {
      {"kda_band", inner, h, 4},  // kda_q, kda_k, kda_v, kda_g
      {"kda_small", 256, h, 1},
      {"kda_f_b", inner, m.f_rank, 1},
      {"kda_o", h, inner, 1},
      {"wfu", m.mla_fused_width(), h, 1},
      {"q_b", m.heads * m.d_qk(), m.q_lora, 1},
      {"mla_o", h, m.heads * m.v_head, 1},
      {"lat_down", m.moe_latent, h, 1},
      {"lat_up", h, m.moe_latent, 1},
      {"shared", 2 * m.shared_inter, h, 1},
      {"shared_down", h, m.shared_inter, 1},
      {"dense_gate_up", 2 * m.dense_inter, h, 1},
      {"dense_down", h, m.dense_inter, 1},
  };
}

BenchRow row_of(const Shape& sh, int64_t m, const char* precision, const Timing& t, const Cost& c, double ceiling,
                double baseline_us) {
  BenchRow r;
  r.family = "gemm";
  r.kernel = "gemm." + sh.name;
  r.variant = precision;
  r.shape = fmt::format("{}x{}x{}", m, sh.n, sh.k);
  r.median_us = t.median_us;
  r.min_us = t.min_us;
  r.max_us = t.max_us;
  r.bytes = c.bytes;
  r.flops = c.flops;
  r.tbps = c.bytes / (t.median_us * 1e6);
  r.tflops = c.flops / (t.median_us * 1e6);
  r.fraction = r.tflops / ceiling;
  r.speedup = baseline_us > 0 ? baseline_us / t.median_us : 1.0;
  r.reps = t.reps;
  return r;
}

}  // namespace

std::vector<std::string> gemm_bench_names() {
  std::vector<std::string> names;
  for (const Shape& s : k3_shapes()) names.push_back(s.name);
  return names;
}

int run_gemm_bench(const GemmBenchOptions& o, RunResult& result) {
  const auto wanted = [](const std::vector<std::string>& list, const std::string& x) {
    return list.empty() || std::find(list.begin(), list.end(), x) != list.end();
  };
  const bool do_bf16 = wanted(o.precisions, "bf16"), do_fp8 = wanted(o.precisions, "fp8");
  PB_CHECK(o.tokens >= 4 && o.tokens % 4 == 0, "gemm: --tokens must be a positive multiple of 4 (the fp8 GEMM's rows)");
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Blas blas;
  blas.bind(stream);
  const double bf16_ceiling = measure_gemm_tflops(stream);
  result.numbers["gemm_tflops"] = bf16_ceiling;
  result.text["gemm_tflops_source"] = "cuBLAS bf16 GEMM 8192^3, median of 20 after 3 warm-ups";
  std::printf("bf16 ceiling: %.1f TFLOP/s (cuBLAS bf16 GEMM 8192^3)\n", bf16_ceiling);
  double fp8_ceiling = 0;
  if (do_fp8) {
    std::string why;
    PB_CHECK(fp8_block_scaling_supported(&why), "gemm --precision fp8: " + why);
    fp8_ceiling = measure_fp8_gemm_tflops(blas.fp8(), stream);
    result.numbers["gemm_fp8_tflops"] = fp8_ceiling;
    result.text["gemm_fp8_tflops_source"] =
        "cuBLASLt e4m3 GEMM 8192^3, 1x128 x 128x128 block scales, median of 20 after 3 warm-ups";
    std::printf("fp8 ceiling:  %.1f TFLOP/s (cuBLASLt e4m3 GEMM 8192^3, 1x128 x 128x128 block scales)\n",
                fp8_ceiling);
  }
  std::printf("%-15s %-22s %-6s %10s %9s %7s %8s %10s\n", "gemm", "shape (m x n x k)", "prec", "median_us",
              "TFLOP/s", "frac", "speedup", "diff");
  const int64_t m = o.tokens;
  int failed = 0;
  for (const Shape& sh : k3_shapes()) {
    if (!wanted(o.gemms, sh.name)) continue;
    const int64_t n = sh.n, k = sh.k, n_pad = (n + kFp8Group - 1) / kFp8Group * kFp8Group;
    DeviceBuffer<bf16> x(size_t(m * k)), w(size_t(n_pad * k));
    fill_uniform_bf16(x.get(), m * k, 11, std::sqrt(3.0f), stream);
    fill_uniform_bf16(w.get(), n * k, 12, std::sqrt(3.0f / float(k)), stream);
    if (n_pad > n) PB_CUDA(cudaMemsetAsync(w.get() + n * k, 0, size_t((n_pad - n) * k) * 2, stream));
    DeviceBuffer<float> y_bf16(size_t(m * n));
    double bf16_us = 0;
    if (do_bf16 || do_fp8) {  // the fp8 row's reference runs even when bf16 is not reported
      const Timing t = time_launches(
          [&](int, cudaStream_t st) { gemm_f32out(blas, x.get(), w.get(), y_bf16.get(), {m, n, k}, st); }, 1,
          do_bf16 ? o.warmup : 0, do_bf16 ? o.reps : 1, stream);
      if (do_bf16) {
        bf16_us = t.median_us;
        const BenchRow r = row_of(sh, m, "bf16", t, cost::gemm(m, n, k), bf16_ceiling, 0);
        std::printf("%-15s %-22s %-6s %10.1f %9.1f %7.3f %8s %10s\n", sh.name.c_str(), r.shape.c_str(), "bf16",
                    r.median_us, r.tflops, r.fraction, "-", "-");
        result.bench.push_back(r);
      }
    }
    if (do_fp8) {
      const int64_t kb = k / kFp8Group;
      DeviceBuffer<fp8> xq(size_t(m * k)), wq(size_t(n_pad * k));
      DeviceBuffer<float> sx(size_t(kb * act_scale_ld(m))), sw(size_t(n_pad / kFp8Group * weight_scale_ld(k)));
      quantize_act_fp8(x.get(), xq.get(), sx.get(), {m, k, k, k, act_scales_mn_major(act_scale_ld(m))}, stream);
      quantize_weight_fp8(w.get(), wq.get(), sw.get(), {n_pad, k, k, k, 0}, stream);
      DeviceBuffer<float> y(size_t(m * n));
      y.poison(stream);
      const Timing t = time_launches(
          [&](int, cudaStream_t st) {
            gemm_fp8_f32out(blas.fp8(), xq.get(), sx.get(), wq.get(), sw.get(), y.get(), {m, n, k}, st);
          },
          1, o.warmup, o.reps, stream);
      BenchRow r = row_of(sh, m, "fp8", t, cost::gemm_fp8(m, n, k), fp8_ceiling, bf16_us);
      r.error = output_diff(y.get(), y_bf16.get(), m * n, stream);
      r.error_floor = kFp8GemmDiffFloor;
      r.wrong = r.failed() ? 1 : 0;
      failed += r.failed();
      std::printf("%-15s %-22s %-6s %10.1f %9.1f %7.3f %8s %10.2e%s\n", sh.name.c_str(), r.shape.c_str(), "fp8",
                  r.median_us, r.tflops, r.fraction, bf16_us > 0 ? fmt::format("{:.2f}x", r.speedup).c_str() : "-",
                  r.error, r.failed() ? " FAIL" : "");
      result.bench.push_back(r);
      int best = 0;
      double best_us = r.median_us;
      for (int rank = 1; rank < o.fp8_algos; ++rank) {
        std::unique_ptr<Fp8Gemm> other;
        try {
          other = std::make_unique<Fp8Gemm>(Fp8Gemm::kDefaultWorkspaceBytes, rank);
          gemm_fp8_f32out(*other, xq.get(), sx.get(), wq.get(), sw.get(), y.get(), {m, n, k}, stream);
        } catch (const Error& e) {  // fewer algorithms for this shape
          std::printf("%-15s %-22s fp8 algorithm %d: none (%s)\n", sh.name.c_str(), r.shape.c_str(), rank, e.what());
          break;
        }
        y.poison(stream);
        const Timing ta = time_launches(
            [&](int, cudaStream_t st) {
              gemm_fp8_f32out(*other, xq.get(), sx.get(), wq.get(), sw.get(), y.get(), {m, n, k}, st);
            },
            1, o.warmup, o.reps, stream);
        const double diff = output_diff(y.get(), y_bf16.get(), m * n, stream);
        const bool bad = !(diff <= kFp8GemmDiffFloor);
        failed += bad;
        const double tflops = r.flops / (ta.median_us * 1e6);
        std::printf("%-15s %-22s fp8#%-2d %10.1f %9.1f %7.3f %8s %10.2e%s\n", sh.name.c_str(), r.shape.c_str(), rank,
                    ta.median_us, tflops, tflops / fp8_ceiling,
                    fmt::format("{:.2f}x", r.median_us / ta.median_us).c_str(), diff, bad ? " FAIL" : "");
        result.numbers[fmt::format("fp8_algo_us.{}.{}", sh.name, rank)] = ta.median_us;
        if (!bad && ta.median_us < best_us) best = rank, best_us = ta.median_us;
      }
      if (o.fp8_algos > 1) {
        result.numbers["fp8_best_algo." + sh.name] = best;
        result.numbers["fp8_best_algo_speedup." + sh.name] = r.median_us / best_us;
      }
    }
    std::fflush(stdout);
  }
  // One superstep's dense GEMMs at these rows (each shape times its launches
  // per layer and its layer kind's count at K3), from the medians above.
  const ModelShape k3 = model_preset("k3");
  std::map<std::string, int64_t> layers;
  for (int64_t l = 0; l < k3.layers; ++l) {
    ++layers[k3.is_mla(l) ? "mla" : "kda"];
    ++layers[k3.is_dense_ffn(l) ? "dense" : "moe"];
  }
  const auto layer_kind = [](const std::string& name) -> std::string {
    if (name.rfind("kda", 0) == 0) return "kda";
    if (name == "wfu" || name == "q_b" || name == "mla_o") return "mla";
    if (name.rfind("dense", 0) == 0) return "dense";
    return "moe";
  };
  for (const char* precision : {"bf16", "fp8"}) {
    double us = 0;
    int counted = 0;
    for (const Shape& sh : k3_shapes())
      for (const BenchRow& r : result.bench)
        if (r.variant == precision && r.kernel == "gemm." + sh.name) {
          us += r.median_us * sh.per_layer * double(layers.at(layer_kind(sh.name)));
          ++counted;
        }
    if (counted == int(k3_shapes().size())) {
      std::printf("superstep's dense GEMMs in %s at %lld rows: %.0f ms\n", precision, (long long)m, us / 1e3);
      result.numbers[std::string("superstep_gemm_ms_") + precision] = us / 1e3;
    }
  }
  PB_CUDA(cudaStreamDestroy(stream));
  return failed;
}

}  // namespace pb
