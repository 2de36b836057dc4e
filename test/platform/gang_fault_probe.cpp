// gang_fault_probe <results file> <reps>: a gang that keeps its results the
// way `prefill-bench run` does, without a GPU. Every rep: a barrier, a pause
// standing in for the superstep, every rank's spans gathered to rank 0, which
// rewrites the file (through <file>.tmp and a rename) marked incomplete until
// the last rep. The fault tests (test/cli/kill_rank.sh) kill one of its
// ranks mid-run: the job must end promptly naming the rank, and the file must
// read back with the reps that finished.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "gang.h"
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
    PB_CHECK(argc == 3, "usage: gang_fault_probe <results file> <reps>");
    const std::string path = argv[1];
    const int reps = std::atoi(argv[2]);
    PB_CHECK(reps > 0, "reps must be positive");
    pb::RunResult result;
    result.kind = "run";
    result.complete = false;
    for (const char* name : {"baseline", "all"}) {
      pb::VariantResult v;
      v.name = name;
      v.cuts = name;
      v.complete = false;
      result.variants.push_back(v);
    }
    for (int rep = 0; rep < reps; ++rep) {
      for (pb::VariantResult& v : result.variants) {
        gang.barrier();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const std::vector<std::string> parts = gang.gather(pb::pack_spans(rep_spans(rep, gang.rank())));
        if (!gang.is_root()) continue;
        for (const std::string& part : parts) pb::append_spans(v, pb::unpack_spans(part), {});
        v.ttft_ms.push_back(20.0 + rep);
      }
      const bool last = rep == reps - 1;
      if (last)
        for (pb::VariantResult& v : result.variants) v.complete = true;
      result.complete = last;
      if (gang.is_root()) pb::write_results(path, result, /*overwrite=*/true);
    }
    if (gang.is_root()) std::printf("wrote %s\n", path.c_str());
  } catch (const std::exception& e) {
    gang.fail(e.what());
  }
  return 0;
}
