// The KDA core benchmark. Inputs in the block's layouts (kda.h): q, k, v, g
// bf16 [T, H*128], beta_pre bf16 [T, H], A_log, dt_bias f32, S_in f32 random
// (the forward of a downstream rank). Inputs rotate over rotation_slots copies;
// each pass is timed with time_launches (CUDA events, warm-up, median):
//   kda.forward  kda_prepare + kda_forward_state (o and S_out)  FLOPs cost::kda_forward
//   kda.prepare  the intra-chunk pass alone
//   kda.state    the state walk with outputs alone
//   kda.package  the package walk (reuses kda.prepare's products): 8 c d² per chunk and head
//   kda.fold     one fold step S·M + D (cuBLAS f32 batched + add): 2 d³ per head
//   kda.forward_halves / kda.state_halves / kda.package_halves  the same passes with the
//                halves walk (KdaWalk::kHalves: two 64-row CTAs per head)
//   kda.forward_wgmma / kda.state_wgmma  the forward passes with the wgmma walk
//                (KdaWalk::kWgmma: one 2-warpgroup CTA per head on wgmma; forward only)
// The fraction column is TFLOP/s over the measured GEMM rate; "vs fla" is
// chunk_kda's 5.16 ms per 16k (docs/design.md §5) over our ms per 16k tokens.
// Checks (the `wrong` column): o of tokens [0, 256) of heads 0, H/2, H−1 against
// the float64 reference within kda.h's floors; the forward's S_out against
// kda_fold(D_0 = S_in, (M, D)) of the package (all heads). The rows without a suffix time
// the head walk (KdaWalk::kHead).
// The *_halves rows: o as above and S_out against the head walk's (forward_halves,
// state_halves), M and D against the head walk's (package_halves), within kda.h's floors;
// whether they equal the head walk's bit for bit (as designed) is printed under the table.
// The *_wgmma rows: o as above and S_out against the head walk's within kda.h's floors (not
// bit for bit: the tensor core's f32 summation order differs).
#include "kda_bench.h"

#include <cuda_bf16.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <tuple>
#include <vector>

#include "check.h"
#include "cost.h"
#include "device_buffer.h"
#include "gemm.h"
#include "kda.h"
#include "kda_ref.h"
#include "random_fill.h"
#include "ref_math.h"
#include "timing.h"

namespace pb {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kD = kKdaHeadDim, kC = kKdaChunkLen;
constexpr double kFlaMsPer16k = 5.16;  // docs/design.md §5: chunk_kda forward, 96 heads, 16k tokens
constexpr int64_t kCheckTokens = 256;

struct Slot {
  DeviceBuffer<bf16> q, k, v, g, beta;
};

KdaInputs inputs_of(const Slot& s, int heads, const float* A_log, const float* dt_bias) {
  KdaInputs in;
  in.q = s.q.get();
  in.k = s.k.get();
  in.v = s.v.get();
  in.g = s.g.get();
  in.beta_pre = s.beta.get();
  in.q_ld = in.k_ld = in.v_ld = in.g_ld = int64_t(heads) * kD;
  in.beta_ld = heads;
  in.A_log = A_log;
  in.dt_bias = dt_bias;
  return in;
}

// Host copy of columns [col, col + d) of rows [0, rows) of a [*, ld] bf16 buffer, as floats.
std::vector<float> download_cols(const bf16* base, int64_t rows, int64_t ld, int64_t col, int d) {
  std::vector<uint16_t> host(size_t(rows) * d);
  PB_CUDA(cudaMemcpy2D(host.data(), size_t(d) * 2, base + col, size_t(ld) * 2, size_t(d) * 2, size_t(rows),
                       cudaMemcpyDeviceToHost));
  std::vector<float> f(host.size());
  for (size_t i = 0; i < host.size(); ++i) f[i] = ref::bf16_to_f32(host[i]);
  return f;
}

struct Agreement {
  double rel_l2 = 0, max_abs = 0, max_ref = 0;
  bool ok() const {
    return std::isfinite(rel_l2) && rel_l2 <= kKdaRelL2Floor && max_abs <= kKdaMaxAbsFloor * max_ref;
  }
};

Agreement agree(const std::vector<double>& got, const std::vector<double>& want) {
  Agreement a;
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = got[i] - want[i];
    d2 += d * d;
    r2 += want[i] * want[i];
    a.max_abs = std::max(a.max_abs, std::isfinite(d) ? std::fabs(d) : INFINITY);
    a.max_ref = std::max(a.max_ref, std::fabs(want[i]));
  }
  a.rel_l2 = std::sqrt(d2) / std::max(std::sqrt(r2), 1e-300);
  return a;
}

// o of tokens [0, kCheckTokens) of three heads against ref::kda_sequential from S_in.
int64_t check_outputs(const Slot& s, const float* A_log_d, const float* dt_bias_d, const float* S_in_d,
                      const bf16* o, int64_t T, int H) {
  const int64_t n = std::min(T, kCheckTokens), W = int64_t(H) * kD;
  std::vector<float> A_log(static_cast<size_t>(H)), dt_bias(static_cast<size_t>(W));
  PB_CUDA(cudaMemcpy(A_log.data(), A_log_d, A_log.size() * 4, cudaMemcpyDeviceToHost));
  PB_CUDA(cudaMemcpy(dt_bias.data(), dt_bias_d, dt_bias.size() * 4, cudaMemcpyDeviceToHost));
  int64_t wrong = 0;
  for (int h : {0, H / 2, H - 1}) {
    const std::vector<float> q = download_cols(s.q.get(), n, W, int64_t(h) * kD, kD);
    const std::vector<float> k = download_cols(s.k.get(), n, W, int64_t(h) * kD, kD);
    const std::vector<float> v = download_cols(s.v.get(), n, W, int64_t(h) * kD, kD);
    const std::vector<float> g = download_cols(s.g.get(), n, W, int64_t(h) * kD, kD);
    const std::vector<float> beta = download_cols(s.beta.get(), n, H, h, 1);
    const std::vector<float> got = download_cols(o, n, W, int64_t(h) * kD, kD);
    std::vector<float> S_in(size_t(kD) * kD);
    PB_CUDA(cudaMemcpy(S_in.data(), S_in_d + size_t(h) * kD * kD, S_in.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> qn(q.size()), kn(k.size()), vd(v.begin(), v.end()), la(g.size()), bd(beta.size());
    ref::kda_l2norm(q.data(), n, kD, qn.data());
    ref::kda_l2norm(k.data(), n, kD, kn.data());
    ref::kda_gates(g.data(), beta.data(), A_log.data() + h, dt_bias.data() + int64_t(h) * kD, n, 1, kD, la.data(),
                   bd.data());
    const std::vector<double> S_in_dbl(S_in.begin(), S_in.end());
    std::vector<double> o_ref(size_t(n) * kD);
    ref::kda_sequential(qn.data(), kn.data(), vd.data(), la.data(), bd.data(), ref::KdaShape{n, 1, kD, kD},
                        ref::kda_default_scale(kD), S_in_dbl.data(), o_ref.data(), nullptr);
    const Agreement a = agree(std::vector<double>(got.begin(), got.end()), o_ref);
    if (!a.ok()) {
      std::printf("  check: head %d o rel-L2 %.3g max-abs %.3g (max |ref| %.3g): outside the floors\n", h, a.rel_l2,
                  a.max_abs, a.max_ref);
      ++wrong;
    }
  }
  return wrong;
}

// Whether a and b hold the same bits, and the word for it in the checks' lines.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
const char* equals_or_differs(bool same) { return same ? "equals" : "DIFFERS from"; }

}  // namespace

int run_kda_bench(const KdaBenchOptions& o, RunResult& result) {
  PB_CHECK(o.heads >= 1 && o.reps >= 1 && o.warmup >= 0, "kda bench: heads and reps must be positive");
  cudaStream_t stream;
  PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const double gemm_tflops = measure_gemm_tflops(stream);
  result.numbers["gemm_tflops"] = gemm_tflops;
  result.text["ceiling"] = "GEMM burst: cuBLAS bf16 GEMM 8192^3, f32 accumulate, median of 20";
  result.text["kda_fla_reference"] = "flash-linear-attention chunk_kda forward, 5.16 ms per 16k tokens (docs/design.md 5)";
  std::printf("GEMM ceiling (burst): %.1f TFLOP/s (cuBLAS bf16 8192^3)\n", gemm_tflops);
  std::printf("%-19s %-18s %10s %10s %9s %7s %9s %7s %6s\n", "case", "shape", "median_us", "GFLOP", "TFLOP/s",
              "frac", "ms/16k", "vs fla", "wrong");
  const int H = o.heads;
  Blas blas;
  int failed = 0;
  for (int64_t T : o.tokens) {
    PB_CHECK(T >= 1, "kda bench: tokens must be positive");
    const int64_t W = int64_t(H) * kD, chunks = (T + kC - 1) / kC;
    const Cost fwd = cost::kda_forward(T, H, kD, kC);
    const int slots = rotation_slots(fwd.bytes);
    std::vector<Slot> in(static_cast<size_t>(slots));
    for (int s = 0; s < slots; ++s) {
      Slot& x = in[size_t(s)];
      x.q = DeviceBuffer<bf16>(size_t(T * W));
      x.k = DeviceBuffer<bf16>(size_t(T * W));
      x.v = DeviceBuffer<bf16>(size_t(T * W));
      x.g = DeviceBuffer<bf16>(size_t(T * W));
      x.beta = DeviceBuffer<bf16>(size_t(T * H));
      fill_uniform_bf16(x.q.get(), T * W, 501 + 10 * s, 1.0f, stream);
      fill_uniform_bf16(x.k.get(), T * W, 502 + 10 * s, 1.0f, stream);
      fill_uniform_bf16(x.v.get(), T * W, 503 + 10 * s, 1.0f, stream);
      fill_uniform_bf16(x.g.get(), T * W, 504 + 10 * s, 6.0f, stream);
      fill_uniform_bf16(x.beta.get(), T * H, 505 + 10 * s, 3.0f, stream);
    }
    DeviceBuffer<float> A_log(static_cast<size_t>(H)), dt_bias(static_cast<size_t>(W));
    fill_uniform_f32(A_log.get(), H, 506, 0.5f, stream);
    fill_uniform_f32(dt_bias.get(), W, 507, 1.0f, stream);
    const size_t state = size_t(H) * kD * kD;
    DeviceBuffer<float> S_in(state), S_out(state), M(state), D(state), S_fold(state), scratch(state);
    fill_uniform_f32(S_in.get(), int64_t(state), 508, 0.5f, stream);
    DeviceBuffer<bf16> out(size_t(T * W));
    KdaWorkspace ws(T, H);
    PB_CUDA(cudaStreamSynchronize(stream));

    const std::string shape = fmt::format("{}x{} d{} c{}", T, H, kD, kC);
    auto row_of = [&](const char* name, const Timing& t, double flops, double bytes) {
      BenchRow row;
      row.family = "kda";
      row.kernel = fmt::format("{}.{}", name, T);
      row.variant = "native";
      row.shape = shape;
      row.median_us = t.median_us;
      row.min_us = t.min_us;
      row.max_us = t.max_us;
      row.reps = t.reps;
      row.bytes = bytes;
      row.flops = flops;
      row.tbps = bytes / (t.median_us * 1e6);
      row.tflops = flops / (t.median_us * 1e6);
      row.fraction = row.tflops / gemm_tflops;
      row.speedup = 1.0;
      return row;
    };
    auto print = [&](const BenchRow& r, bool per16k, int64_t wrong) {
      const double ms16k = r.median_us * 1e-3 * 16384.0 / double(T);
      std::printf("%-19s %-18s %10.1f %10.2f %9.1f %7.3f %9s %7s %6lld\n", r.kernel.c_str(), r.shape.c_str(),
                  r.median_us, r.flops * 1e-9, r.tflops, r.fraction, per16k ? fmt::format("{:.3f}", ms16k).c_str() : "-",
                  per16k ? fmt::format("{:.2f}x", kFlaMsPer16k / ms16k).c_str() : "-", (long long)wrong);
      std::fflush(stdout);
    };

    // ---- timings ----
    auto time_forward = [&](KdaWalk walk) {
      return time_launches(
          [&](int slot, cudaStream_t st) {
            kda_forward(inputs_of(in[size_t(slot)], H, A_log.get(), dt_bias.get()), T, H, ws, S_in.get(), out.get(),
                        W, S_out.get(), st, walk);
          },
          slots, o.warmup, o.reps, stream);
    };
    auto time_state = [&](KdaWalk walk) {
      return time_launches(
          [&](int, cudaStream_t st) { kda_forward_state(ws, T, S_in.get(), out.get(), W, S_out.get(), st, walk); }, 1,
          o.warmup, o.reps, stream);
    };
    auto time_package = [&](KdaWalk walk) {
      return time_launches([&](int, cudaStream_t st) { kda_package(ws, T, M.get(), D.get(), st, walk); }, 1,
                           o.warmup, o.reps, stream);
    };
    auto time_prepare = [&] {
      return time_launches(
          [&](int slot, cudaStream_t st) {
            kda_prepare(inputs_of(in[size_t(slot)], H, A_log.get(), dt_bias.get()), T, H, ws, st);
          },
          slots, o.warmup, o.reps, stream);
    };
    const bool with_wg = kda_wgmma_walk_supported();  // sm_90 only: rows left out elsewhere
    const Timing t_fwd = time_forward(KdaWalk::kHead);
    const Timing t_fwd_hv = time_forward(KdaWalk::kHalves);
    const Timing t_fwd_wg = with_wg ? time_forward(KdaWalk::kWgmma) : Timing{};
    const Timing t_prep = time_prepare();
    // slot 0's products stay in the workspace for the walks and the checks
    kda_prepare(inputs_of(in[0], H, A_log.get(), dt_bias.get()), T, H, ws, stream);
    const Timing t_state = time_state(KdaWalk::kHead);
    const Timing t_pkg = time_package(KdaWalk::kHead);
    const Timing t_state_hv = time_state(KdaWalk::kHalves);
    const Timing t_pkg_hv = time_package(KdaWalk::kHalves);
    const Timing t_state_wg = with_wg ? time_state(KdaWalk::kWgmma) : Timing{};
    const float* fold_m[2] = {nullptr, M.get()};
    const float* fold_d[2] = {S_in.get(), D.get()};
    kda_package(ws, T, M.get(), D.get(), stream, KdaWalk::kHead);  // the rows' walk leaves M, D for the fold check
    const Timing t_fold = time_launches(
        [&](int, cudaStream_t st) { kda_fold(blas, fold_m, fold_d, 2, H, S_fold.get(), scratch.get(), st); }, 1,
        o.warmup, o.reps, stream);

    // ---- checks (slot 0; the walks above left o, S_out, M, D, S_fold of slot 0) ----
    out.poison(stream);
    S_out.poison(stream);
    kda_forward_state(ws, T, S_in.get(), out.get(), W, S_out.get(), stream, KdaWalk::kHead);
    PB_CUDA(cudaStreamSynchronize(stream));
    int64_t wrong_o = check_outputs(in[0], A_log.get(), dt_bias.get(), S_in.get(), out.get(), T, H);
    const std::vector<float> s_fwd = S_out.download(), s_fold = S_fold.download();
    const Agreement st = agree(std::vector<double>(s_fwd.begin(), s_fwd.end()),
                               std::vector<double>(s_fold.begin(), s_fold.end()));
    const int64_t wrong_s = st.ok() ? 0 : 1;
    if (!st.ok())
      std::printf("  check: S_out vs fold(S_in, M, D): rel-L2 %.3g max-abs %.3g (max %.3g): outside the floors\n",
                  st.rel_l2, st.max_abs, st.max_ref);
    // Another walk's forward from slot 0's products: o against the reference, S_out (kept in
    // s_got) against the head walk's; the wrong count of both.
    struct WalkCheck {
      int64_t wrong = 0;
      Agreement s;
      std::vector<float> s_got;
    };
    auto check_walk = [&](KdaWalk walk, const char* name) {
      WalkCheck c;
      out.poison(stream);
      S_fold.poison(stream);
      kda_forward_state(ws, T, S_in.get(), out.get(), W, S_fold.get(), stream, walk);
      PB_CUDA(cudaStreamSynchronize(stream));
      c.wrong = check_outputs(in[0], A_log.get(), dt_bias.get(), S_in.get(), out.get(), T, H);
      c.s_got = S_fold.download();
      c.s = agree(std::vector<double>(c.s_got.begin(), c.s_got.end()), std::vector<double>(s_fwd.begin(), s_fwd.end()));
      if (!c.s.ok()) {
        std::printf("  check: S_out of the %s vs the head walk: rel-L2 %.3g max-abs %.3g (max %.3g)\n", name,
                    c.s.rel_l2, c.s.max_abs, c.s.max_ref);
        ++c.wrong;
      }
      return c;
    };
    // the halves walk: o against the reference, S_out against the head walk's (kda.forward_halves,
    // kda.state_halves); M, D against the head walk's (kda.package_halves; M, D hold them now)
    const std::vector<float> m_head = M.download(), d_head = D.download();
    const WalkCheck hv = check_walk(KdaWalk::kHalves, "halves walk");
    const int64_t wrong_hv = hv.wrong;
    const std::vector<float>& s_hv = hv.s_got;
    M.poison(stream);
    D.poison(stream);
    kda_package(ws, T, M.get(), D.get(), stream, KdaWalk::kHalves);
    PB_CUDA(cudaStreamSynchronize(stream));
    const std::vector<float> m_hv = M.download(), d_hv = D.download();
    int64_t wrong_pkg_hv = 0;
    for (const auto& [got, want, name] : {std::tuple{&m_hv, &m_head, "M"}, std::tuple{&d_hv, &d_head, "D"}}) {
      const Agreement a =
          agree(std::vector<double>(got->begin(), got->end()), std::vector<double>(want->begin(), want->end()));
      if (!a.ok()) {
        std::printf("  check: %s of the halves walk vs the head walk: rel-L2 %.3g max-abs %.3g (max %.3g)\n", name,
                    a.rel_l2, a.max_abs, a.max_ref);
        ++wrong_pkg_hv;
      }
    }
    std::printf("  halves walk (kda_walk_half_kernel): S_out %s, M %s, D %s the head walk's bit for bit\n",
                equals_or_differs(same_bits(s_hv, s_fwd)), equals_or_differs(same_bits(m_hv, m_head)),
                equals_or_differs(same_bits(d_hv, d_head)));
    failed += int(wrong_hv + wrong_pkg_hv);
    // the wgmma walk: o against the reference, S_out against the head walk's (kda.forward_wgmma,
    // kda.state_wgmma)
    int64_t wrong_wg = 0;
    if (with_wg) {
      const WalkCheck wg = check_walk(KdaWalk::kWgmma, "wgmma walk");
      std::printf("  wgmma walk (kda_walk_wgmma_kernel): S_out vs the head walk: rel-L2 %.3g max-abs %.3g"
                  " (max %.3g)%s\n",
                  wg.s.rel_l2, wg.s.max_abs, wg.s.max_ref, wg.s.ok() ? "" : ": outside the floors");
      wrong_wg = wg.wrong;
      failed += int(wrong_wg);
    }
    failed += int(wrong_o + wrong_s);

    // ---- rows ----
    const double walk_bytes = double(T) * W * 2 * 4 + double(chunks) * H * (kC * kC * 2 + kD * 4) + 2.0 * state * 4;
    const double prep_bytes = double(T) * W * 2 * 8 + double(T) * H * 2 + double(chunks) * H * kC * kC * 2;
    const double pkg_flops = 8.0 * kC * kD * kD * double(chunks) * H;
    const double fold_flops = gemm_flops(kD, kD, kD) * H + double(state);
    std::vector<BenchRow> rows = {
        row_of("kda.forward", t_fwd, fwd.flops, fwd.bytes),
        row_of("kda.prepare", t_prep, 0.0, prep_bytes),
        row_of("kda.state", t_state, 0.0, walk_bytes),
        row_of("kda.package", t_pkg, pkg_flops, double(T) * W * 2 * 3 + 2.0 * state * 4),
        row_of("kda.fold", t_fold, fold_flops, 5.0 * state * 4),
        row_of("kda.forward_halves", t_fwd_hv, fwd.flops, fwd.bytes),
        row_of("kda.state_halves", t_state_hv, 0.0, walk_bytes),
        row_of("kda.package_halves", t_pkg_hv, pkg_flops, double(T) * W * 2 * 3 + 2.0 * state * 4),
    };
    if (with_wg) {
      rows.push_back(row_of("kda.forward_wgmma", t_fwd_wg, fwd.flops, fwd.bytes));
      rows.push_back(row_of("kda.state_wgmma", t_state_wg, 0.0, walk_bytes));
    }
    for (const BenchRow& r : rows) {
      const bool halves_row = r.kernel.find("_halves.") != std::string::npos;
      const bool wgmma_row = r.kernel.find("_wgmma.") != std::string::npos;
      const bool fwd_row = r.kernel.rfind("kda.forward", 0) == 0;
      const bool state_row = r.kernel.rfind("kda.state", 0) == 0;
      const bool pkg_row = r.kernel.rfind("kda.package", 0) == 0;
      const int64_t wrong = wgmma_row              ? wrong_wg
                            : halves_row           ? (pkg_row ? wrong_pkg_hv : wrong_hv)
                            : fwd_row || state_row ? wrong_o + wrong_s
                                                   : 0;
      print(r, fwd_row, wrong);
      result.bench.push_back(r);
    }
  }
  PB_CUDA(cudaStreamDestroy(stream));
  return failed;
}

}  // namespace pb
