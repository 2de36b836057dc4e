// The measured loop of `run` (and of the fault probe that stands in for it
// without a GPU): reps -warmup .. reps-1, every variant in turn within a rep.
//
// Nothing finished is lost: after every variant of every measured rep, rank 0
// rewrites the results file (through <path>.tmp and a rename), marked
// incomplete; `finish` runs right after a variant's last rep, so its outputs
// reach the file before the next variant starts. A rank killed mid-run leaves
// a file holding every variant and rep that finished before it.
//
// Ctrl-C (SIGINT) on any rank stops the gang together after the variant in
// progress: the file is written (also during warm-up, with no reps) and the
// loop returns 130 after rank 0 says, on stderr, which rep (rep_label) and
// variant it stopped at.
//
//   RepLoop loop{gang, warmup, reps, path, overwrite};
//   int code = loop.run(result, names, [&](int rep, size_t v) { ... }, [&](size_t v) { ... });
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "gang.h"
#include "results.h"

namespace pb {

struct RepLoop {
  const Gang& gang;
  int warmup = 0;  // untimed reps first (rep < 0): nothing of them is written
  int reps = 1;
  std::string path;
  bool overwrite = false;  // replace a file that exists before the first write
  std::string command = "prefill-bench run";  // names the stop on stderr

  // measure(rep, variant): every rank, one rep of one variant (rank 0 keeps
  // what it gathers in `result`). finish(variant): every rank, after the
  // variant's last rep. Marks result and its variants incomplete while it
  // runs and complete at the end (rank 0 writes the complete file last, after
  // `before_last_write`).
  int run(RunResult& result, const std::function<void(int rep, size_t variant)>& measure,
          const std::function<void(size_t variant)>& finish,
          const std::function<void()>& before_last_write = {}) const;
};

// How logs name a rep, as the results file numbers them: "rep 2 (0-4)" for
// the third of five measured reps, "warm-up 1/2" before them.
std::string rep_label(int rep, int warmup, int reps);

}  // namespace pb
