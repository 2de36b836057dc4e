// The `moe` benchmark (moe_bench.h). Timing: CUDA events on the work stream
// (time_launches for the expert GEMMs; the blocks' Timeline for per-launch
// spans), warm-ups first, medians reported. The expert weights (15 GB at K3)
// and the activations are far past L2, so nothing is rotated. Costs (bytes,
// FLOPs) come from the one cost model through plan: each block launch takes
// the cost of the plan launch with its name at its position.
//
// Expert GEMM floor, per element of a sampled row (bf16 out of an f32
// accumulate over k <= 3584 products of bf16 values, each exact in f32):
//   |y - ref| <= 2^-8 |ref| + (k + 2) 2^-24 sum_i |x_i w_i|   (ref in float64:
//   any f32 summation order, then one rounding to bf16, half an ulp = 2^-9 |y|)
#include "moe_bench.h"

#include <cuda_bf16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "argmax.h"
#include "check.h"
#include "cost.h"
#include "dense_ffn.h"
#include "device_buffer.h"
#include "first_token.h"
#include "gemm.h"
#include "model.h"
#include "moe_block.h"
#include "moe_gemm.h"
#include "moe_route.h"
#include "output_diff.h"
#include "quant.h"
#include "plan.h"
#include "plan_match.h"
#include "random_fill.h"
#include "ref_math.h"
#include "scenario.h"
#include "timeline.h"
#include "timing.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;


struct Ceilings {
  double gemm_tflops = 0, copy_tbps = 0;
  double fp8_tflops = 0;  // 0: not measured (no fp8 engine here)
};

BenchRow make_row(const std::string& family, const std::string& kernel, const std::string& variant,
                  const std::string& shape, double median_us, double min_us, double max_us, int reps,
                  const Cost& c, const Ceilings& ceil) {
  BenchRow r;
  r.family = family;
  r.kernel = kernel;
  r.variant = variant;
  r.shape = shape;
  r.median_us = median_us;
  r.min_us = min_us;
  r.max_us = max_us;
  r.reps = reps;
  r.bytes = c.bytes;
  r.flops = c.flops;
  r.tbps = median_us > 0 ? c.bytes / (median_us * 1e6) : 0;
  r.tflops = median_us > 0 ? c.flops / (median_us * 1e6) : 0;
  r.fraction = c.unit == Unit::tensor       ? r.tflops / ceil.gemm_tflops
               : c.unit == Unit::tensor_fp8 ? (ceil.fp8_tflops > 0 ? r.tflops / ceil.fp8_tflops : 0)
                                            : r.tbps / ceil.copy_tbps;
  r.speedup = 1;
  return r;
}

// ---- expert GEMMs ----

struct Routing {
  std::vector<int32_t> counts;   // [E]
  std::vector<int64_t> offsets;  // [E + 1], exclusive scan
};

// The skewed synthetic router (moe_route.h) on T tokens: top-k and the plan on
// the device, counts back to the host.
Routing synthetic_routing(const ModelShape& m, int64_t tokens, uint64_t seed, cudaStream_t st) {
  const MoeRouteShape rs{tokens, int(m.experts), int(m.top_k)};
  const int64_t a = tokens * m.top_k;
  DeviceBuffer<float> logits{size_t(tokens * m.experts)}, bias{size_t(m.experts)}, weights{size_t(a)};
  DeviceBuffer<int32_t> ids{size_t(a)}, counts{size_t(m.experts)}, offsets{size_t(m.experts + 1)},
      src{size_t(a)}, dst{size_t(a)};
  const size_t ws_bytes = moe_permute_plan_workspace_bytes(rs);
  DeviceBuffer<int32_t> ws(std::max<size_t>(1, (ws_bytes + 3) / 4));
  logits.upload(synthetic_router_logits(tokens, int(m.experts), seed));
  bias.upload(synthetic_router_bias(int(m.experts), seed));
  router_topk(logits.get(), bias.get(), ids.get(), weights.get(), rs, st);
  moe_permute_plan(ids.get(), MoePlan{counts.get(), offsets.get(), src.get(), dst.get()}, ws.get(), ws.bytes(), rs,
                   st);
  PB_CUDA(cudaStreamSynchronize(st));
  Routing r;
  r.counts = counts.download();
  r.offsets.assign(1, 0);
  for (int32_t c : r.counts) r.offsets.push_back(r.offsets.back() + c);
  return r;
}

struct SampledRows {
  std::vector<uint16_t> values;  // the sampled rows of y (bands side by side), in sampling order
  int64_t wrong = 0;             // rows outside the floor
  double worst = 0;              // max over elements of (|y - ref| - 2^-8 |ref|) / sum |x w|
};

// The first and last row of the hottest, the coldest non-empty, the first and
// the last non-empty expert, against float64. y: `bands` outputs [V, n / bands].
SampledRows check_expert_gemm(const bf16* const* y, int bands, const bf16* x, const bf16* w, const Routing& r,
                              int64_t n, int64_t k) {
  const int E = int(r.counts.size());
  const int64_t nb = n / bands;
  std::vector<int> experts;
  int hot = -1, cold = -1, first = -1, last = -1;
  for (int e = 0; e < E; ++e) {
    if (r.counts[e] == 0) continue;
    if (hot < 0 || r.counts[e] > r.counts[hot]) hot = e;
    if (cold < 0 || r.counts[e] < r.counts[cold]) cold = e;
    if (first < 0) first = e;
    last = e;
  }
  for (int e : {hot, cold, first, last})
    if (e >= 0 && std::find(experts.begin(), experts.end(), e) == experts.end()) experts.push_back(e);
  SampledRows out;
  std::vector<uint16_t> we(static_cast<size_t>(n * k)), xr(static_cast<size_t>(k)), yr(static_cast<size_t>(n));
  for (int e : experts) {
    PB_CUDA(cudaMemcpy(we.data(), w + int64_t(e) * n * k, we.size() * 2, cudaMemcpyDeviceToHost));
    for (int64_t row : {r.offsets[e], r.offsets[e + 1] - 1}) {
      PB_CUDA(cudaMemcpy(xr.data(), x + row * k, size_t(k) * 2, cudaMemcpyDeviceToHost));
      for (int j = 0; j < bands; ++j)
        PB_CUDA(cudaMemcpy(yr.data() + j * nb, y[j] + row * nb, size_t(nb) * 2, cudaMemcpyDeviceToHost));
      bool ok = true;
      for (int64_t c = 0; c < n; ++c) {
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < k; ++i) {
          const double p = double(ref::bf16_to_f32(xr[i])) * ref::bf16_to_f32(we[size_t(c * k + i)]);
          ref += p;
          mag += std::fabs(p);
        }
        const double err = std::fabs(double(ref::bf16_to_f32(yr[c])) - ref);
        const double rounding = std::ldexp(1.0, -8) * std::fabs(ref);
        if (!(err <= rounding + double(k + 2) * std::ldexp(1.0, -24) * mag)) ok = false;  // NaN fails too
        if (mag > 0) out.worst = std::max(out.worst, (err - rounding) / mag);
      }
      out.wrong += ok ? 0 : 1;
      out.values.insert(out.values.end(), yr.begin(), yr.end());
    }
  }
  return out;
}

struct ExpertCase {
  const char* name;   // "gate_up" | "down"
  const bf16* x;      // [V, k]
  const bf16* w;      // [E, n, k]
  int64_t n, k;
  int bands;          // gate_up: 2 (gate, up), down: 1
};

// The fp8 experts (precision experts: fp8): both fp8 engines (moe_gemm.h: the
// cutlass grouped kernel, the superstep's, and the cuBLASLt per-expert loop,
// its A/B) on the same rows and weights quantized (1x128 row scales K-major,
// 128x128 weight blocks), each judged against the bf16 loop engine's output of
// the unquantized operands by DeepGEMM's diff (output_diff.h) within
// kFp8GemmDiffFloor. A build or device without an engine reports it and fails,
// as a missing bf16 engine does. ys hold kMoeFp8LoopSlackRows rows past V.
int bench_expert_gemms_fp8(const ModelShape& m, const MoeBenchOptions& o, const Ceilings& ceil, const Blas& blas,
                           const Routing& r, const ExpertCase (&cases)[2], bf16* const (&ys)[2], cudaStream_t st,
                           RunResult& result) {
  int failed = 0;
  std::vector<MoeGemmEngine> engines;
  if (cutlass_fp8_gemm_available()) {
    engines.push_back(MoeGemmEngine::cutlass);
  } else {
    ++failed;
    std::printf("cutlass fp8 engine: not in this build or not an sm_90 device (scripts/setup.sh, carry .deps/)\n");
  }
  std::string why;
  if (fp8_block_scaling_supported(&why)) {
    engines.push_back(MoeGemmEngine::loop);
  } else {
    ++failed;
    std::printf("loop fp8 engine (cuBLASLt block scaling): %s\n", why.c_str());
  }
  if (engines.empty()) return failed;
  const int E = int(m.experts);
  const int64_t V = r.offsets.back();
  MoeGemm gemm(E);
  std::vector<double> both_us(engines.size(), 0.0);
  double both_loop_us = 0;
  std::printf("%-18s %-16s %10s %10s %9s %7s %8s %10s\n", "case", "variant", "median_us", "min_us", "TFLOP/s",
              "frac", "vs loop", "diff");
  for (const ExpertCase& c : cases) {
    const MoeGemmShape shape{E, c.n, c.k, 0, 0, c.bands};
    const int64_t kb = c.k / kFp8Group, nb = c.n / c.bands, rows = V + kMoeFp8LoopSlackRows;
    DeviceBuffer<__nv_fp8_e4m3> xq(size_t(rows * c.k)), wq(size_t(E * c.n * c.k));
    DeviceBuffer<float> sx(size_t(V * kb)), sw(size_t(E * c.n / kFp8Group * kb));
    PB_CUDA(cudaMemsetAsync(xq.get() + V * c.k, 0, size_t(kMoeFp8LoopSlackRows * c.k), st));  // the loop's slack
    quantize_act_fp8(c.x, xq.get(), sx.get(), {V, c.k, c.k, c.k, act_scales_k_major(kb)}, st);
    quantize_weight_fp8(c.w, wq.get(), sw.get(), {E * c.n, c.k, c.k, c.k, kb}, st);
    // The loop engine's bf16 output: the reference and the speedup's base.
    const Timing tl = time_launches([&](int, cudaStream_t s) { gemm.run(MoeGemmEngine::loop, blas, r.counts.data(), c.x, c.w, ys, shape, s); },
                                    1, o.warmup, o.reps, st);
    both_loop_us += tl.median_us;
    std::vector<DeviceBuffer<bf16>> ref;
    for (int j = 0; j < c.bands; ++j) {
      ref.emplace_back(size_t(V * nb));
      PB_CUDA(cudaMemcpyAsync(ref.back().get(), ys[j], size_t(V * nb) * 2, cudaMemcpyDeviceToDevice, st));
    }
    for (size_t i = 0; i < engines.size(); ++i) {
      const auto run = [&](cudaStream_t s) {
        gemm.run_fp8(engines[i], blas, r.counts.data(), xq.get(), sx.get(), wq.get(), sw.get(), ys, shape, s);
      };
      const Timing t = time_launches([&](int, cudaStream_t s) { run(s); }, 1, o.warmup, o.reps, st);
      for (int j = 0; j < c.bands; ++j) PB_CUDA(cudaMemsetAsync(ys[j], 0xff, size_t(V * nb) * 2, st));
      run(st);
      double worst = 0;
      for (int j = 0; j < c.bands; ++j) worst = std::max(worst, output_diff(ys[j], ref[size_t(j)].get(), V * nb, st));
      const std::string variant = std::string(moe_gemm_engine_name(engines[i])) + "_fp8";
      BenchRow row = make_row("moe_gemm", std::string("moe_gemm.") + c.name, variant,
                              fmt::format("{}e V{} n{} k{}", E, V, c.n, c.k), t.median_us, t.min_us, t.max_us, t.reps,
                              cost::moe_gemm_scaled(V, E, c.n, c.k, Format::fp8), ceil);
      row.speedup = tl.median_us / t.median_us;
      row.error = worst;
      row.error_floor = kFp8GemmDiffFloor;
      row.wrong = row.failed() ? 1 : 0;
      failed += row.failed();
      std::printf("%-18s %-16s %10.1f %10.1f %9.1f %7.3f %7.2fx %10.2e%s\n", row.kernel.c_str(), row.variant.c_str(),
                  row.median_us, row.min_us, row.tflops, row.fraction, row.speedup, worst, row.failed() ? " FAIL" : "");
      result.bench.push_back(row);
      both_us[i] += t.median_us;
    }
  }
  const double flops = moe_gemm_flops(r.counts.data(), E, 2 * m.expert_inter, m.moe_latent) +
                       moe_gemm_flops(r.counts.data(), E, m.moe_latent, m.expert_inter);
  for (size_t i = 0; i < engines.size(); ++i) {
    const std::string variant = std::string(moe_gemm_engine_name(engines[i])) + "_fp8";
    const double tflops = flops / (both_us[i] * 1e6);
    result.numbers["moe_gemm_" + variant + "_tflops"] = tflops;
    result.numbers["moe_gemm_" + variant + "_fraction"] = tflops / ceil.fp8_tflops;
    result.numbers["moe_gemm_" + variant + "_ms"] = both_us[i] * 1e-3;
    std::printf("expert GEMMs (gate_up + down), %-16s: %.1f us, %.1f TFLOP/s, %.3f of the fp8 burst "
                "ceiling, %.2fx the bf16 loop\n",
                variant.c_str(), both_us[i], tflops, tflops / ceil.fp8_tflops, both_loop_us / both_us[i]);
  }
  return failed;
}

int bench_expert_gemms(const ModelShape& m, const MoeBenchOptions& o, const MoeWeights& w, const Ceilings& ceil,
                       const Blas& blas, cudaStream_t st, RunResult& result) {
  const Routing r = synthetic_routing(m, o.tokens, o.seed, st);
  int failed_support = 0;
  const int E = int(m.experts);
  const int64_t V = r.offsets.back(), lat = m.moe_latent, I = m.expert_inter;
  const double imbalance = moe_load_imbalance(r.counts.data(), E);
  const double mean = double(V) / E;
  int empty = 0;
  for (int32_t c : r.counts) empty += c == 0;
  result.numbers["moe_load_imbalance"] = imbalance;
  result.numbers["moe_tokens_per_expert_mean"] = mean;
  result.numbers["moe_tokens_per_expert_max"] = *std::max_element(r.counts.begin(), r.counts.end());
  result.numbers["moe_tokens_per_expert_min"] = *std::min_element(r.counts.begin(), r.counts.end());
  std::printf("\nexpert GEMMs: T = %lld, top-%lld of %d experts, V = %lld rows; tokens per expert mean %.1f, "
              "max %d, min %d, empty %d; load imbalance max/mean %.3f\n",
              (long long)o.tokens, (long long)m.top_k, E, (long long)V, mean,
              *std::max_element(r.counts.begin(), r.counts.end()), *std::min_element(r.counts.begin(), r.counts.end()),
              empty, imbalance);

  DeviceBuffer<bf16> xp{size_t(V * lat)}, act{size_t(V * I)};
  // bands: gate | up, or down; with the fp8 loop engine's slack rows
  DeviceBuffer<bf16> y0{size_t((V + kMoeFp8LoopSlackRows) * std::max(I, lat))},
      y1{size_t((V + kMoeFp8LoopSlackRows) * I)};
  bf16* const ys[2] = {y0.get(), y1.get()};
  fill_uniform_bf16(xp.get(), V * lat, o.seed + 41, 1.0f, st);
  fill_uniform_bf16(act.get(), V * I, o.seed + 42, 1.0f, st);
  const ExpertCase cases[] = {{"gate_up", xp.get(), w.expert_gate_up.bf.get(), 2 * I, lat, 2},
                              {"down", act.get(), w.expert_down.bf.get(), lat, I, 1}};
  // The variants, the loop last (every speedup and bit comparison is against it):
  // the three engines plus the chunked grouped cuBLAS experiment (moe_gemm.h).
  MoeGemm gemm(E);
  struct Variant {
    std::string name;
    std::function<void(const ExpertCase&, const MoeGemmShape&, cudaStream_t)> run;
  };
  std::vector<Variant> variants;
  auto engine_variant = [&](MoeGemmEngine e) {
    return Variant{moe_gemm_engine_name(e), [&, e](const ExpertCase& c, const MoeGemmShape& shape, cudaStream_t s) {
                     gemm.run(e, blas, r.counts.data(), c.x, c.w, ys, shape, s);
                   }};
  };
  if (grouped_gemm_supported(blas)) {
    variants.push_back(engine_variant(MoeGemmEngine::grouped));
    for (int chunk : {128, 256, 512})
      variants.push_back(Variant{fmt::format("grouped_chunk{}", chunk),
                                 [&, chunk](const ExpertCase& c, const MoeGemmShape& shape, cudaStream_t s) {
                                   gemm.run_grouped_chunks(blas, r.counts.data(), c.x, c.w, ys, shape, chunk, s);
                                 }});
  } else {
    ++failed_support;
    std::printf("grouped engine: this cuBLAS refuses cublasGemmGroupedBatchedEx with bf16 A/B/C, f32 compute\n");
  }
  if (cutlass_gemm_available()) {
    variants.push_back(engine_variant(MoeGemmEngine::cutlass));
  } else {
    ++failed_support;
    std::printf("cutlass engine: not in this build or not an sm_90 device (scripts/setup.sh, carry .deps/)\n");
  }
  variants.push_back(engine_variant(MoeGemmEngine::loop));

  // One untimed call of each variant on each case first: a variant that throws
  // (say, cuBLAS refusing the chunked call's group count) is reported and
  // dropped, so it cannot take the rest of the benchmark down. Only a refused
  // engine counts as a failure; the chunked rows are an experiment.
  for (size_t i = 0; i + 1 < variants.size();) {
    std::string why;
    try {
      for (const ExpertCase& c : cases) variants[i].run(c, MoeGemmShape{E, c.n, c.k, 0, 0, c.bands}, st);
      PB_CUDA(cudaStreamSynchronize(st));
    } catch (const std::exception& ex) {
      why = ex.what();
    }
    if (why.empty()) {
      ++i;
      continue;
    }
    std::printf("variant %s refused, dropped: %s\n", variants[i].name.c_str(), why.c_str());
    if (variants[i].name.rfind("grouped_chunk", 0) != 0) ++failed_support;
    variants.erase(variants.begin() + long(i));
  }

  int failed = failed_support;
  std::printf("%-18s %-16s %10s %10s %9s %7s %8s %6s %10s %s\n", "case", "variant", "median_us", "min_us",
              "TFLOP/s", "frac", "speedup", "wrong", "worst_err", "vs loop");
  std::vector<double> both_us(variants.size(), 0.0);  // gate_up + down per variant
  for (const ExpertCase& c : cases) {
    const MoeGemmShape shape{E, c.n, c.k, 0, 0, c.bands};
    const Cost cost = cost::moe_gemm(V, E, c.n, c.k);
    std::vector<Timing> times;
    std::vector<SampledRows> samples;
    for (const Variant& v : variants) {
      const Timing t = time_launches([&](int, cudaStream_t s) { v.run(c, shape, s); }, 1, o.warmup, o.reps, st);
      y0.poison(st);
      y1.poison(st);
      v.run(c, shape, st);
      PB_CUDA(cudaStreamSynchronize(st));
      times.push_back(t);
      samples.push_back(check_expert_gemm(ys, c.bands, c.x, c.w, r, c.n, c.k));
    }
    const double loop_us = times.back().median_us;
    for (size_t i = 0; i < variants.size(); ++i) {
      const Timing& t = times[i];
      BenchRow row = make_row("moe_gemm", std::string("moe_gemm.") + c.name, variants[i].name,
                              fmt::format("{}e V{} n{} k{} imb{:.2f}", E, V, c.n, c.k, imbalance), t.median_us,
                              t.min_us, t.max_us, t.reps, cost, ceil);
      row.speedup = loop_us / t.median_us;
      failed += samples[i].wrong != 0;
      const bool same = samples[i].values == samples.back().values;
      std::printf("%-18s %-16s %10.1f %10.1f %9.1f %7.3f %8.2f %6lld %10.2e %s\n", row.kernel.c_str(),
                  row.variant.c_str(), row.median_us, row.min_us, row.tflops, row.fraction, row.speedup,
                  (long long)samples[i].wrong, samples[i].worst,
                  i + 1 == variants.size() ? "-" : same ? "bit-identical" : "differ in bits");
      result.bench.push_back(row);
      const std::string key = "moe_gemm_" + variants[i].name + "_" + c.name;
      result.numbers[key + "_tflops"] = row.tflops;
      result.numbers[key + "_fraction"] = row.fraction;
      if (i + 1 < variants.size())
        result.text["moe_gemm_" + std::string(c.name) + "_" + variants[i].name + "_vs_loop"] =
            same ? "bit-identical" : "within floor";
      both_us[i] += t.median_us;
    }
  }
  const double flops = moe_gemm_flops(r.counts.data(), E, 2 * I, lat) + moe_gemm_flops(r.counts.data(), E, lat, I);
  for (size_t i = 0; i < variants.size(); ++i) {
    const double us = both_us[i];
    const double tflops = flops / (us * 1e6);
    const std::string key = "moe_gemm_" + variants[i].name;
    result.numbers[key + "_tflops"] = tflops;
    result.numbers[key + "_fraction"] = tflops / ceil.gemm_tflops;
    result.numbers[key + "_ms"] = us * 1e-3;
    std::printf("expert GEMMs (gate_up + down), %-16s: %.1f us, %.1f TFLOP/s, %.3f of the GEMM burst ceiling\n",
                variants[i].name.c_str(), us, tflops, tflops / ceil.gemm_tflops);
  }
  return failed + bench_expert_gemms_fp8(m, o, ceil, blas, r, cases, ys, st, result);
}

// ---- blocks ----

BlockTimes time_block(Timeline& tl, const std::function<void()>& run_once, int warmup, int reps) {
  for (int i = 0; i < warmup; ++i) {
    run_once();
    tl.collect();
  }
  std::vector<std::vector<TimedLaunch>> all;
  for (int i = 0; i < reps; ++i) {
    run_once();
    all.push_back(tl.collect());
  }
  return median_block_times(all);
}

template <class T>
std::vector<T> download_n(const T* p, int64_t n) {
  std::vector<T> h(static_cast<size_t>(n));
  PB_CUDA(cudaMemcpy(h.data(), p, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// One block timed under cut sets none and all; launch lists checked against
// the plan; `output()` downloaded after each, compared bit for bit. Prints the
// per-launch table of the `all` run; returns the number of failed checks.
struct BlockBench {
  std::string name;      // "moe_block", "dense_ffn", "first_token"
  int32_t plan_layer;    // where plan has this block
  std::string first_kernel;
  std::function<void(Timeline&, const CutSet&)> run;
  std::function<std::vector<uint16_t>()> output;
};

int bench_block(const BlockBench& b, const RankPlan& plan, const MoeBenchOptions& o, const Ceilings& ceil,
                cudaStream_t st, RunResult& result) {
  int failed = 0;
  std::vector<uint16_t> outs[2];
  const CutSet sets[2] = {CutSet::none(), CutSet::all()};
  const char* names[2] = {"none", "all"};
  std::printf("\n%s (cuts none vs all)\n", b.name.c_str());
  BlockTimes times[2];
  for (int v = 0; v < 2; ++v) {
    Timeline tl(st, true);
    times[v] = time_block(tl, [&] { b.run(tl, sets[v]); }, 1, o.block_reps);
    outs[v] = b.output();
  }
  const std::vector<Launch> want = plan_slice(plan, b.plan_layer, b.first_kernel, times[1].launches.size());
  const std::string diff = launch_list_difference(times[1].launches, want);
  if (!diff.empty()) {
    ++failed;
    std::printf("  launch list differs from plan: %s\n", diff.c_str());
  }
  const bool same = outs[0] == outs[1];
  if (!same) {
    ++failed;
    std::printf("  cut none and all outputs differ\n");
  }
  result.text[b.name + "_cuts_bit_identical"] = same ? "yes" : "no";
  std::printf("%-26s %10s %10s %9s %9s %7s\n", "launch", "none_us", "all_us", "TB/s", "TFLOP/s", "frac");
  for (size_t i = 0; i < times[1].launches.size(); ++i) {
    const TimedLaunch& l = times[1].launches[i];
    const Cost c = i < want.size() && diff.empty() ? want[i].cost : Cost{};
    for (int v = 0; v < 2; ++v) {
      const double us = times[v].launches[i].ms * 1e3;
      BenchRow row = make_row(l.family, l.kernel, std::string(b.name) + "." + names[v], fmt::format("#{}", i), us,
                              us, us, o.block_reps, c, ceil);
      result.bench.push_back(row);
    }
    const BenchRow& r = result.bench.back();
    std::printf("%-26s %10.1f %10.1f %9.3f %9.1f %7.3f\n", l.kernel.c_str(), times[0].launches[i].ms * 1e3,
                r.median_us, r.tbps, r.tflops, r.fraction);
  }
  for (int v = 0; v < 2; ++v) {
    const double us = times[v].total_ms * 1e3;
    BenchRow row = make_row(b.name, b.name + ".total", names[v], fmt::format("{} launches", times[v].launches.size()),
                            us, us, us, o.block_reps, Cost{}, ceil);
    row.speedup = times[0].total_ms / times[v].total_ms;
    result.bench.push_back(row);
    result.numbers[b.name + "_" + names[v] + "_ms"] = times[v].total_ms;
  }
  std::printf("%-26s %10.1f %10.1f   (ms: %.3f -> %.3f, x%.3f)%s\n", "total", times[0].total_ms * 1e3,
              times[1].total_ms * 1e3, times[0].total_ms, times[1].total_ms, times[0].total_ms / times[1].total_ms,
              same ? "" : "  OUTPUTS DIFFER");
  return failed;
}

double number(const RunResult& r, const std::string& key) {
  auto it = r.numbers.find(key);
  return it == r.numbers.end() ? -1 : it->second;
}

// The short table, last.
void print_summary(const RunResult& r, int failed) {
  std::printf("\nsummary (GEMM burst ceiling %.1f TFLOP/s, copy %.3f TB/s)\n", number(r, "gemm_tflops"),
              number(r, "copy_tbps"));
  std::printf("  expert GEMMs (bf16 out)  gate_up TFLOP/s frac   down TFLOP/s frac   both ms  TFLOP/s frac\n");
  for (const char* e : {"grouped", "grouped_chunk128", "grouped_chunk256", "grouped_chunk512", "cutlass", "loop"}) {
    const std::string k = std::string("moe_gemm_") + e;
    if (number(r, k + "_ms") < 0) continue;  // not run here
    std::printf("  %-23s %12.1f %5.3f %12.1f %5.3f %8.3f %8.1f %5.3f%s\n", e, number(r, k + "_gate_up_tflops"),
                number(r, k + "_gate_up_fraction"), number(r, k + "_down_tflops"), number(r, k + "_down_fraction"),
                number(r, k + "_ms"), number(r, k + "_tflops"), number(r, k + "_fraction"),
                std::string(e) == "loop" ? "" : "  (bar 0.60)");
  }
  std::printf("  load imbalance        %.3f max/mean (mean %.1f, max %.0f, min %.0f tokens per expert); block "
              "router %.3f\n",
              number(r, "moe_load_imbalance"), number(r, "moe_tokens_per_expert_mean"),
              number(r, "moe_tokens_per_expert_max"), number(r, "moe_tokens_per_expert_min"),
              number(r, "moe_block_load_imbalance"));
  std::printf("  MoE block grouped     none %.3f ms, all %.3f ms\n", number(r, "moe_block_none_ms"),
              number(r, "moe_block_all_ms"));
  std::printf("  MoE block cutlass     none %.3f ms, all %.3f ms\n", number(r, "moe_block_cutlass_none_ms"),
              number(r, "moe_block_cutlass_all_ms"));
  std::printf("  MoE block loop        none %.3f ms, all %.3f ms\n", number(r, "moe_block_loop_none_ms"),
              number(r, "moe_block_loop_all_ms"));
  std::printf("  dense FFN             none %.3f ms, all %.3f ms\n", number(r, "dense_ffn_none_ms"),
              number(r, "dense_ffn_all_ms"));
  std::printf("  lm head + argmax      none %.3f ms, all %.3f ms, token %d\n", number(r, "first_token_none_ms"),
              number(r, "first_token_all_ms"), int(number(r, "first_token")));
  std::printf("  failed checks         %d\n", failed);
}

Scenario bench_scenario(const MoeBenchOptions& o) {
  return parse_scenario("name: moe-bench\nmodel: {preset: k3}\ncp: 1\ncontext: " + std::to_string(o.tokens) +
                            "\nbucket: " + std::to_string(o.bucket) + "\n",
                        "moe-bench");
}

}  // namespace

int run_moe_bench(const MoeBenchOptions& o, RunResult& result) {
  PB_CHECK(o.tokens >= 1 && o.tokens <= o.bucket, "moe bench: need 1 <= tokens <= bucket");
  PB_CHECK(o.reps >= 1 && o.block_reps >= 1 && o.warmup >= 0, "moe bench: reps must be positive");
  const Scenario s = bench_scenario(o);
  const ModelShape& m = s.model;
  const RankPlan plan = plan_rank(s, CutSet::all(), 0);
  cudaStream_t st;
  PB_CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  Blas blas;
  Ceilings ceil;
  ceil.gemm_tflops = measure_gemm_tflops(st);
  ceil.copy_tbps = measure_copy_tbps(st);
  if (fp8_block_scaling_supported()) {
    ceil.fp8_tflops = measure_fp8_gemm_tflops(blas.fp8(), st);
    result.numbers["gemm_fp8_tflops"] = ceil.fp8_tflops;
    std::printf("ceiling: fp8 GEMM burst %.1f TFLOP/s (cuBLASLt e4m3 8192^3, 1x128 x 128x128 block scales)\n",
                ceil.fp8_tflops);
  }
  result.numbers["gemm_tflops"] = ceil.gemm_tflops;
  result.numbers["copy_tbps"] = ceil.copy_tbps;
  result.text["ceiling"] = "GEMM burst: cuBLAS bf16 GEMM 8192^3 f32 out, median of 20; device copy 2 GiB, median of 20";
  result.text["scenario_yaml"] = s.text;
  std::printf("ceilings: GEMM burst %.1f TFLOP/s (cuBLAS bf16 8192^3), copy %.3f TB/s\n", ceil.gemm_tflops,
              ceil.copy_tbps);
  int failed = 0;

  MoeBlock moe(m, o.bucket, o.tokens, o.seed, st);
  std::printf("MoE weights: %.2f GB (experts %.2f GB)\n",
              double(moe.weights().router.bytes() + moe.weights().lat_down.bytes() +
                     moe.weights().expert_gate_up.bytes() + moe.weights().expert_down.bytes() +
                     moe.weights().lat_up.bytes() + moe.weights().shared_gate_up.bytes() +
                     moe.weights().shared_down.bytes()) / 1e9,
              double(moe.weights().expert_gate_up.bytes() + moe.weights().expert_down.bytes()) / 1e9);
  failed += bench_expert_gemms(m, o, moe.weights(), ceil, blas, st, result);

  const int64_t b = o.bucket, h = m.hidden;
  DeviceBuffer<bf16> x{size_t(b * h)}, out{size_t(b * h)};
  fill_uniform_bf16(x.get(), b * h, o.seed + 51, 1.0f, st);
  // The whole block with each engine (same launch list, plan.cpp); the loop's
  // results go under moe_block_loop_*, cutlass's under moe_block_cutlass_*.
  // Each engine's output is compared bit for bit with the loop's (run last).
  std::vector<std::pair<MoeGemmEngine, std::vector<uint16_t>>> block_out;
  for (MoeGemmEngine engine : {MoeGemmEngine::grouped, MoeGemmEngine::cutlass, MoeGemmEngine::loop}) {
    if (!moe_gemm_engine_available(engine, blas)) {
      std::printf("\nmoe_block: engine %s not available here; skipped\n", moe_gemm_engine_name(engine));
      ++failed;
      continue;
    }
    const std::string name = engine == MoeGemmEngine::grouped ? std::string("moe_block")
                                                              : std::string("moe_block_") + moe_gemm_engine_name(engine);
    BlockBench moe_bench{name, 1, "rmsnorm.moe_in",
                         [&](Timeline& tl, const CutSet& cuts) {
                           moe.run(tl, blas, cuts, engine, x.get(), o.tokens, out.get());
                         },
                         [&] { return download_n(reinterpret_cast<const uint16_t*>(out.get()), b * h); }};
    failed += bench_block(moe_bench, plan, o, ceil, st, result);
    block_out.emplace_back(engine, moe_bench.output());
    std::printf("MoE block engine %s; its router's load imbalance max/mean %.3f\n", moe_gemm_engine_name(engine),
                moe.load_imbalance());
  }
  result.numbers["moe_block_load_imbalance"] = moe.load_imbalance();
  if (!block_out.empty() && block_out.back().first == MoeGemmEngine::loop) {
    for (size_t i = 0; i + 1 < block_out.size(); ++i) {
      const bool same = block_out[i].second == block_out.back().second;
      const std::string e = moe_gemm_engine_name(block_out[i].first);
      std::printf("MoE block output, %s vs loop: %s\n", e.c_str(), same ? "bit-identical" : "differ in bits");
      result.text["moe_block_" + e + "_vs_loop"] = same ? "bit-identical" : "differ in bits";
    }
  }
  {
    DenseFfn dense(m, o.bucket, o.seed, st);
    DeviceBuffer<bf16> dout{size_t(b * h)};
    BlockBench dense_bench{"dense_ffn", 0, "rmsnorm.dense_in",
                           [&](Timeline& tl, const CutSet& cuts) { dense.run(tl, blas, cuts, x.get(), dout.get()); },
                           [&] { return download_n(reinterpret_cast<const uint16_t*>(dout.get()), b * h); }};
    failed += bench_block(dense_bench, plan, o, ceil, st, result);
  }

  FirstToken first(m, o.seed, st);
  const bf16* last_row = out.get() + (o.tokens - 1) * h;
  BlockBench token_bench{"first_token", -1, "rmsnorm.final",
                         [&](Timeline& tl, const CutSet& cuts) { first.run(tl, blas, cuts, last_row); },
                         [&] { return download_n(reinterpret_cast<const uint16_t*>(first.logits()), m.vocab); }};
  failed += bench_block(token_bench, plan, o, ceil, st, result);
  const std::vector<uint16_t> logits = token_bench.output();
  const int32_t token = first.token(), want = ref::argmax_bf16(logits.data(), m.vocab);
  result.numbers["first_token"] = token;
  std::printf("first token: %d (reference argmax %d)%s\n", token, want, token == want ? "" : "  WRONG");
  failed += token != want;

  PB_CUDA(cudaStreamDestroy(st));
  print_summary(result, failed);
  return failed;
}

}  // namespace pb
