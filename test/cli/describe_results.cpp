// describe_results <file>: reads a results file (harness/results/results.h) and
// prints one line the fault tests match on:
//   "<file>: kind run, complete no, reps baseline 3, all 3*"
// (reps: the TTFT samples each variant holds; * marks a variant complete,
// its outputs written). Exit 2 with the reader's error
// when the file cannot be read.
#include <cstdio>
#include <exception>
#include <string>

#include "results.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: describe_results <file>\n");
    return 2;
  }
  try {
    const pb::RunResult run = pb::read_results(argv[1]);
    std::string reps;
    for (const pb::VariantResult& v : run.variants)
      reps += (reps.empty() ? " " : ", ") + v.name + " " + std::to_string(v.ttft_ms.size()) + (v.complete ? "*" : "");
    std::printf("%s: kind %s, complete %s, reps%s\n", argv[1], run.kind.c_str(), run.complete ? "yes" : "no",
                reps.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "describe_results: %s\n", error.what());
    return 2;
  }
  return 0;
}
