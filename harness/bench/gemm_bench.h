// `prefill-bench gemm`: every dense weight GEMM of the superstep at its K3
// shape, bf16 (cuBLAS, f32 partial out) beside fp8 (cuBLASLt with DeepSeek-V3
// block scales, kernels/fp8/gemm_fp8.h), each against the burst ceiling of
// its own precision measured in the same run (8192^3: the bf16 cuBLAS GEMM,
// the block-scaled fp8 cuBLASLt GEMM).
// Every fp8 row is checked against the bf16 GEMM of the same inputs before it
// is quantized, by DeepGEMM's measure 1 - 2<x,y> / (|x|^2 + |y|^2) over the
// whole output (output_diff.h; error, floor kFp8GemmDiffFloor).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results.h"

namespace pb {

struct GemmBenchOptions {
  int64_t tokens = 16384;                  // m: the rows of every GEMM
  std::vector<std::string> precisions;     // bf16, fp8 (default both)
  std::vector<std::string> gemms;          // the superstep GEMMs by name (default all)
  int warmup = 3;
  int reps = 20;
  std::string output;
  bool overwrite = false;
  std::string command_line;
};

// The superstep's dense weight GEMMs by name, in superstep order.
std::vector<std::string> gemm_bench_names();

// Runs the benchmark on the current device; prints the table; fills
// result.bench. Returns the number of fp8 rows outside their floor.
int run_gemm_bench(const GemmBenchOptions& options, RunResult& result);

}  // namespace pb
