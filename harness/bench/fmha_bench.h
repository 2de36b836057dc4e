// `prefill-bench fmha`: the FMHA engines at the MLA shapes (96 heads, d_qk
// 192, d_v 128; Tq = Tk in {4096, 8192, 16384}, dense and causal), with the
// cuBLAS bf16 GEMM rate measured in the same run as the ceiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results.h"

namespace pb {

struct FmhaBenchOptions {
  std::vector<int64_t> tokens = {4096, 8192, 16384};  // Tq = Tk
  int heads = 96;
  std::vector<std::string> engines;  // empty: native, and cudnn when this build has it
  std::vector<std::string> masks;    // empty: dense and causal
  int warmup = 3;
  int reps = 20;
  std::string output;
  bool overwrite = false;
  std::string command_line;
};

// Runs the benchmark on the current device; prints the table; fills
// result.bench (family "fmha", kernel "fmha.<mask>.<tokens>", variant = engine)
// and result.numbers["gemm_tflops"]. Every case also validates a sample of
// (query, head) rows against the float64 reference (the `wrong` column counts
// rows outside the floors of fmha.h). Returns the number of cases with wrong rows.
int run_fmha_bench(const FmhaBenchOptions& options, RunResult& result);

}  // namespace pb
