// One rank's measured rep as a results file keeps it, written once for `run`
// and `lane`: each launch a span named and costed by its planned launch (its
// bytes plan.h span_bytes), the launch's doorbell operations, and the time the
// rank spent in fabric waits; then every rank's record gathered to rank 0.
#pragma once

#include <vector>

#include "gang.h"
#include "plan.h"
#include "results.h"
#include "timeline.h"

namespace pb {

struct RankRecord {
  std::vector<Span> spans;
  std::vector<BellOp> bells;  // span: a row of `spans`
  double wait_us = 0;         // the fabric.wait* spans' time
};

// launches[i] is planned[i] (the caller has checked the lists agree: plan_match.h).
RankRecord record_launches(const std::vector<TimedLaunch>& launches, const std::vector<Launch>& planned, int rep,
                           int rank, int cp);

// Collective: every rank's record (empty during warm-up, rep < 0) and rank rep
// to rank 0, which appends them to `v` when rep >= 0. Returns, on rank 0, each
// rank's rank rep in rank order (empty elsewhere).
std::vector<RankRep> gather_rep(const Gang& gang, int rep, const RankRecord& mine, const RankRep& rr,
                                VariantResult& v);

}  // namespace pb
