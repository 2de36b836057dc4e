#include "rep_loop.h"

#include <mpi.h>

#include <climits>
#include <csignal>
#include <cstdio>

namespace pb {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void note_interrupt(int) { g_interrupted = 1; }

// The lowest rank that saw Ctrl-C, or -1: the ranks stop together.
int interrupted_rank(const Gang& gang) {
  int mine = g_interrupted ? gang.rank() : INT_MAX, lowest = INT_MAX;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, gang.comm());
  return lowest == INT_MAX ? -1 : lowest;
}

}  // namespace

std::string rep_label(int rep, int warmup, int reps) {
  if (rep < 0) return "warm-up " + std::to_string(rep + warmup + 1) + "/" + std::to_string(warmup);
  return "rep " + std::to_string(rep) + " (0-" + std::to_string(reps - 1) + ")";
}

int RepLoop::run(RunResult& result, const std::function<void(int, size_t)>& measure,
                 const std::function<void(size_t)>& finish, const std::function<void()>& before_last_write) const {
  std::signal(SIGINT, note_interrupt);
  result.complete = false;
  for (VariantResult& v : result.variants) v.complete = false;
  bool written = false;
  const auto save = [&] {
    if (!gang.is_root()) return;
    write_results(path, result, overwrite || written);
    written = true;
  };
  const size_t nv = result.variants.size();
  for (int rep = -warmup; rep < reps; ++rep) {
    for (size_t vi = 0; vi < nv; ++vi) {
      measure(rep, vi);
      if (rep >= 0) {
        if (rep == reps - 1) {
          finish(vi);
          result.variants[vi].complete = true;
        }
        save();
      }
      if (const int interrupted = interrupted_rank(gang); interrupted >= 0) {
        if (!written) save();
        if (gang.is_root())
          std::fprintf(stderr,
                       "%s: interrupted (SIGINT on rank %d) at %s, variant '%s'; %s holds every variant and rep "
                       "finished, marked incomplete\n",
                       command.c_str(), interrupted, rep_label(rep, warmup, reps).c_str(),
                       result.variants[vi].name.c_str(), path.c_str());
        return 130;
      }
    }
  }
  if (before_last_write) before_last_write();
  result.complete = true;
  if (gang.is_root()) {
    write_results(path, result, overwrite || written);
    std::printf("wrote %s\n", path.c_str());
  }
  return 0;
}

}  // namespace pb
