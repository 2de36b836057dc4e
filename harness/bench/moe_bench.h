// `prefill-bench moe`: the MoE FFN, the dense FFN and the first token at K3
// shapes on one GPU, with the cuBLAS bf16 GEMM rate and the copy
// rate measured in the same run as the ceilings.
//
//   expert GEMMs   T = 16384 tokens, top-16 of 224 experts through the skewed
//                  synthetic router (moe_route.h): gate|up [V, 3584] x [6144, 3584]ᵀ
//                  (two bf16 bands, gate and up) and down [V, 3072] x [3584, 3072]ᵀ
//                  (bf16 out): the engines grouped (cuBLAS), cutlass (CUTLASS
//                  Hopper grouped GEMM, when built) and the per-expert loop, plus
//                  the chunked grouped cuBLAS experiment (chunks of 128, 256, 512
//                  rows, moe_gemm.h); TFLOP/s and fraction of the GEMM ceiling
//                  each and both, bit identity vs the loop; load imbalance.
//   MoE block      the whole block (moe_block.h) at bucket b with each engine,
//                  cuts none and all, per-launch medians from the Timeline,
//                  names checked against plan.
//   dense FFN      layer 0's block (dense_ffn.h), same.
//   first token    rmsnorm + lm head + land + argmax (first_token.h), same.
// Every case validates: the expert GEMMs on sampled rows against a float64
// reference (floor in moe_bench.cu), the blocks' cut none vs all bit for bit,
// the argmax against its C++ reference, every launch list against plan.
#pragma once

#include <cstdint>
#include <string>

#include "results.h"

namespace pb {

struct MoeBenchOptions {
  int64_t tokens = 16384;  // T: the segment's live rows
  int64_t bucket = 16896;  // b: rows of norms, dense GEMMs, landings (cp1-16k's bucket)
  int warmup = 3;
  int reps = 20;           // expert GEMM repetitions (median)
  int block_reps = 10;     // block repetitions (per-launch medians)
  uint64_t seed = 1234;
  std::string output;
  bool overwrite = false;
  std::string command_line;
};

// Runs on the current device; prints the tables; fills result.bench and
// result.numbers. Returns the number of cases that failed validation.
int run_moe_bench(const MoeBenchOptions& options, RunResult& result);

}  // namespace pb
