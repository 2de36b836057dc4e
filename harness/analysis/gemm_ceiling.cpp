#include "gemm_ceiling.h"

#include <fmt/format.h>

#include "check.h"
#include "stats.h"

namespace pb {

SustainedGemm sustained_gemm(const std::vector<WindowGemm>& gemms, double flops, double settle_fraction) {
  PB_CHECK(!gemms.empty(), "sustained GEMM ceiling: the window holds no GEMM");
  PB_CHECK(settle_fraction >= 0 && settle_fraction < 1,
           fmt::format("sustained GEMM ceiling: settle fraction {} is outside [0, 1)", settle_fraction));
  SustainedGemm g;
  g.gemms = int(gemms.size());
  g.window_s = gemms.back().end_ms / 1e3;
  const double settled_from_ms = settle_fraction * gemms.back().end_ms;
  g.settled_s = g.window_s - settled_from_ms / 1e3;
  std::vector<double> rates;
  for (const WindowGemm& w : gemms) {
    PB_CHECK(w.ms > 0, fmt::format("sustained GEMM ceiling: a GEMM ending at {} ms took no time", w.end_ms));
    if (w.end_ms > settled_from_ms) rates.push_back(flops / (w.ms * 1e9));
  }
  g.counted = int(rates.size());  // never 0: the last GEMM ends at the window's end
  g.tflops = median(rates);
  return g;
}

std::string describe_sustained(const SustainedGemm& g, int n) {
  return fmt::format("cuBLAS bf16 GEMM {}^3 back to back for {:.1f} s, median of the last {:.1f} s ({} of {} GEMMs)",
                     n, g.window_s, g.settled_s, g.counted, g.gemms);
}

}  // namespace pb
