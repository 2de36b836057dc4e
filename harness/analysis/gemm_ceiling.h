// The sustained GEMM ceiling from a window of back-to-back GEMMs: the rate the
// card holds once its clocks have settled at the power cap, as opposed to the
// burst rate of a few GEMMs from an idle card (harness/bench/timing.h measures
// both; `run` records both in its file).
//
//   window: GEMM 0 | GEMM 1 | ... | GEMM n-1      (no gap, one stream)
//   settled part: the GEMMs that end after settle_fraction of the window
//   rate: the median over the settled part of flops / each GEMM's time
#pragma once

#include <string>
#include <vector>

namespace pb {

// The share of the window left out of the median while the clocks settle.
constexpr double kCeilingSettleFraction = 0.5;

// One GEMM of the window, on the GPU's clock: its end since the window's start, and its time.
struct WindowGemm {
  double end_ms = 0;
  double ms = 0;
};

struct SustainedGemm {
  double tflops = 0;          // median over the settled part
  double window_s = 0;        // the window: the first GEMM's start to the last one's end
  double settled_s = 0;       // the settled part's length: the window's last (1 - settle_fraction)
  int gemms = 0;              // in the window
  int counted = 0;            // in the median
};

// The sustained rate of a window of GEMMs of `flops` each, in order. Throws
// pb::Error for an empty window, a GEMM of no time, or a settle_fraction
// outside [0, 1).
SustainedGemm sustained_gemm(const std::vector<WindowGemm>& gemms, double flops,
                             double settle_fraction = kCeilingSettleFraction);

// One line for the file and the console: "cuBLAS bf16 GEMM 8192^3 back to back
// for 8.0 s, median of the last 4.0 s (2731 GEMMs)".
std::string describe_sustained(const SustainedGemm& g, int n);

}  // namespace pb
