// `prefill-bench kernels`: baseline against cut for every memory-bound cut
// family, at the seed's shapes at bucket 16896 (docs/design.md §4), with the copy
// ceiling measured in the same run.
#pragma once

#include <string>
#include <vector>

#include "results.h"

namespace pb {

// The benchmark's families, one per cut of the cut table with a bench_family
// (harness/config/cuts.h), in the table's order.
std::vector<std::string> kernels_bench_families();

struct KernelsBenchOptions {
  std::vector<std::string> families;  // empty: all of kernels_bench_families()
  int64_t rows = 16896;               // the bucket
  int warmup = 3;
  int reps = 30;                      // the median of at least 20
  std::string output;
  bool overwrite = false;
  std::string command_line;
};

// Runs the benchmark on the current device; prints the table; fills result.bench.
// Returns the number of cases whose baseline and cut outputs differed.
int run_kernels_bench(const KernelsBenchOptions& options, RunResult& result);

}  // namespace pb
