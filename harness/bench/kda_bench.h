// `prefill-bench kda`: the KDA core at K3 widths (96 heads, dk = dv = 128,
// chunk 64) on one segment per --tokens value (default 4096 and 16384), with
// the cuBLAS bf16 GEMM rate measured in the same run as the ceiling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results.h"

namespace pb {

struct KdaBenchOptions {
  std::vector<int64_t> tokens = {4096, 16384};
  int heads = 96;
  int warmup = 3;
  int reps = 20;
  std::string output;
  bool overwrite = false;
  std::string command_line;
};

// Runs the benchmark on the current device; prints the table; fills
// result.bench (family "kda", kernels kda.forward / kda.prepare / kda.state /
// kda.package / kda.fold / kda.forward_halves / kda.state_halves / kda.package_halves,
// ".<tokens>" appended) and result.numbers["gemm_tflops"].
// Every segment also validates: o of the first 256 tokens of three heads
// against the float64 reference, and the forward's final state against
// S_in·M + D folded on the device (kda_fold). Returns the number of failed checks.
int run_kda_bench(const KdaBenchOptions& options, RunResult& result);

}  // namespace pb
