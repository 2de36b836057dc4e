// `prefill-bench kernels`: baseline against cut for every memory-bound cut
// family, at the seed's shapes at bucket 16896 (docs/design.md §4), with the copy
// ceiling measured in the same run.
#pragma once

#include <string>
#include <vector>

#include "results.h"

namespace pb {

struct KernelsBenchOptions {
  std::vector<std::string> families;  // empty: all (land, conv, lse_merge, elementwise, attnres)
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
