// `prefill-bench gemm`: every dense weight GEMM of the superstep at its K3
// shape, bf16 (cuBLAS, f32 partial out) beside fp8 (cuBLASLt with DeepSeek-V3
// block scales, kernels/fp8/gemm_fp8.h), each against the burst ceiling of
// its own precision measured in the same run (8192^3: the bf16 cuBLAS GEMM,
// the block-scaled fp8 cuBLASLt GEMM).
// Every fp8 row is checked against the bf16 GEMM of the same inputs before it
// is quantized, by DeepGEMM's measure 1 - 2<x,y> / (|x|^2 + |y|^2) over the
// whole output (output_diff.h; error, floor kFp8GemmDiffFloor).
// With fp8_algos > 1 each fp8 shape is also timed with cuBLASLt's next
// heuristic algorithms (Fp8Gemm's heuristic_rank 1, 2, ...; the superstep runs
// the first), each checked the same way: numbers fp8_algo_us.<gemm>.<rank>,
// and fp8_best_algo.<gemm> (the fastest rank) with fp8_best_algo_speedup.<gemm>
// (the first's time over the fastest's). A shape with fewer algorithms stops
// there. The rows stay the first algorithm's, so calibration reads what runs.
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
  int fp8_algos = 1;                       // fp8: cuBLASLt heuristic algorithms timed (the first is the row's)
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
