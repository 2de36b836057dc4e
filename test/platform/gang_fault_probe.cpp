// gang_fault_probe <results file> <reps> [<variants> [<ms per variant>]]: a
// gang that keeps its results through `prefill-bench run`'s own rep loop
// (harness/platform/rep_loop.h), without a GPU. Each variant of each rep: a
// barrier, a pause standing in for the superstep (default 20 ms), every
// rank's spans gathered to rank 0; the loop rewrites the file after every
// variant, marked incomplete until the end. The fault tests
// (test/cli/kill_rank.sh) kill one of its ranks mid-run: the job must end
// promptly naming the rank, and the file must read back with every variant
// and rep that finished. Variants: 2 (default) to 9.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "gang.h"
#include "rep_loop.h"
#include "results.h"

namespace {

constexpr int kSpansPerRankRep = 2000;  // a file of some size: a kill may land mid-write

std::vector<pb::Span> rep_spans(int rep, int rank) {
  std::vector<pb::Span> spans;
  for (int i = 0; i < kSpansPerRankRep; ++i)
    spans.push_back({rep, rank, i % 4, "gemm", "gemm.qkv", 10.0 + i % 7, 1e6, 1e9, 0, 0.5 * i});
  return spans;
}

}  // namespace

int main(int argc, char** argv) {
  pb::Gang gang(&argc, &argv);
  try {
    PB_CHECK(argc >= 3 && argc <= 5, "usage: gang_fault_probe <results file> <reps> [<variants> [<ms per variant>]]");
    const std::string path = argv[1];
    const int reps = std::atoi(argv[2]);
    const int variants = argc > 3 ? std::atoi(argv[3]) : 2;
    const int pause_ms = argc > 4 ? std::atoi(argv[4]) : 20;
    PB_CHECK(reps > 0, "reps must be positive");
    PB_CHECK(variants >= 1 && variants <= 9, "variants must be 1 to 9");
    PB_CHECK(pause_ms >= 0, "ms per variant must not be negative");
    pb::RunResult result;
    result.kind = "run";
    for (int i = 0; i < variants; ++i) {
      pb::VariantResult v;
      v.name = i == 0 ? "baseline" : "v" + std::to_string(i);
      v.cuts = v.name;
      result.variants.push_back(v);
    }
    const pb::RepLoop loop{gang, 0, reps, path, /*overwrite=*/true, "gang_fault_probe"};
    const auto measure = [&](int rep, size_t vi) {
      gang.barrier();
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
      const std::vector<std::string> parts = gang.gather(pb::pack_spans(rep_spans(rep, gang.rank())));
      if (!gang.is_root()) return;
      pb::VariantResult& v = result.variants[vi];
      for (const std::string& part : parts) pb::append_spans(v, pb::unpack_spans(part), {});
      v.ttft_ms.push_back(pause_ms + rep);
    };
    return loop.run(result, measure, [](size_t) {});
  } catch (const std::exception& e) {
    gang.fail(e.what());
  }
  return 0;
}
