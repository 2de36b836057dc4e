#include "rep_record.h"

#include "check.h"
#include "projection.h"

namespace pb {

RankRecord record_launches(const std::vector<TimedLaunch>& launches, const std::vector<Launch>& planned, int rep,
                           int rank, int cp) {
  PB_CHECK(launches.size() <= planned.size(), "record_launches: more launches than planned");
  RankRecord out;
  for (size_t i = 0; i < launches.size(); ++i) {
    const TimedLaunch& l = launches[i];
    const Launch& p = planned[i];
    out.spans.push_back(
        {rep, rank, l.layer, l.family, l.kernel, l.ms * 1e3, span_bytes(p), p.cost.flops, l.stream, l.start_ms * 1e3});
    for (const BellNote& b : l.bells)
      out.bells.push_back({rep, rank, int64_t(i), b.ring ? BellOpKind::ring : BellOpKind::wait, b.peer, b.flag,
                           doorbell_kind(cp, b.flag), b.value});
    if (l.kernel.rfind("fabric.wait", 0) == 0) out.wait_us += l.ms * 1e3;
  }
  return out;
}

std::vector<RankRep> gather_rep(const Gang& gang, int rep, const RankRecord& mine, const RankRep& rr,
                                VariantResult& v) {
  const std::vector<std::string> span_parts = gang.gather(rep >= 0 ? pack_spans(mine.spans) : std::string());
  const std::vector<std::string> bell_parts = gang.gather(rep >= 0 ? pack_bells(mine.bells) : std::string());
  const std::vector<std::string> rep_parts = gang.gather(pack_rank_reps({rr}));
  std::vector<RankRep> reps;
  if (!gang.is_root()) return reps;
  for (const auto& part : rep_parts)
    for (const RankRep& r : unpack_rank_reps(part)) reps.push_back(r);
  if (rep >= 0) {
    for (size_t r = 0; r < span_parts.size(); ++r)
      append_spans(v, unpack_spans(span_parts[r]), unpack_bells(bell_parts[r]));
    v.rank_reps.insert(v.rank_reps.end(), reps.begin(), reps.end());
  }
  return reps;
}

}  // namespace pb
