// The gang's TTFT projected from a serialized run (docs/design.md §9).
//
// A serialized run (serialize_ranks: the ranks of one GPU take turns) times
// every span of every rank alone: each rank's anatomy is exact, but the wall
// clock is the sum of the ranks. The projection replays one rep's spans as if
// every rank had its own GPU, over the doorbells the spans recorded
// (VariantResult::bells):
//   - each (rank, stream) runs its spans in table order, one after another;
//   - a span starts at max(end of the previous span on its stream, the ring
//     time of every doorbell it waits on); a ring happens when its span ends;
//   - a wait on rank r for (flag f, value v) from sender s is satisfied by the
//     earliest ring of s into r's flag f with a value >= v; value 0, and a
//     doorbell kind of slab_layout.h whose value is of a call before the rep's
//     first call of that block (MLA: window, returned, consumed, released; KDA:
//     halo, halo_read, state, state_read), hold from the start: a run drains
//     every doorbell and meets at a barrier before each rep;
//   - durations: over a link profile, a fabric span with bytes > 0 (the
//     bytes that cross the link for it) takes the profile's transfer_us(bytes),
//     after its waits; otherwise a span that waits takes 0 (its measured time
//     in a serialized run is the wrong thing: the waiting is what the replay
//     computes), and every other span keeps its measured time. A copy that
//     follows a wait is its own span (fabric.stage_queries, plan.h), so with
//     the fabric as measured (link "measured") it keeps its time; in files
//     recorded before that split it sat inside fabric.wait_queries and counts 0.
// A wait whose doorbell no span rings, and a cycle of waits, are errors that
// name the ranks, spans (layer, kernel) and doorbells.
//
// The projected TTFT is the end of the gang's last span. The serialized run's
// host-side time (its TTFT minus the sum of every span, ProjectedRep::host_ms)
// is reported beside it, not added: it holds the turns' hand-offs (barriers,
// drains, settle sleeps), which a gang does not have. At cp 1 the projection is
// the sum of the spans.
//
//   Projection p = project_variant(v, "nvlink4");   // every rep, details of the median one
//   std::printf("%s", format_projection(v.name, p).c_str());
#pragma once

#include <string>
#include <vector>

#include "results.h"

namespace pb {

constexpr const char* kMeasuredLink = "measured";

// "measured", then the link profiles (profile.h).
std::vector<std::string> projection_link_names();

// The kind (bell_name) of doorbell index `flag` at cp ranks: the inverse of
// doorbell_index(cp, sender, kind), for recording BellOp::kind. Throws
// pb::Error for a flag outside [0, cp * kBellKinds).
std::string doorbell_kind(int cp, int flag);

// Whether the variant can be replayed: measured spans (rep >= 0), and
// doorbells when they span more than one rank.
bool can_project(const VariantResult& variant);

// One rep of the variant (rows of variant.spans and variant.bells with that
// rep). reps holds that one rep. Throws pb::Error for a link that is not in
// projection_link_names(), a rep without spans, several ranks without
// doorbells, a doorbell inconsistent with its span or with doorbell_index(), a
// fabric.wait* span without a wait, a wait never rung, or a cycle.
Projection project_rep(const VariantResult& variant, int32_t rep, const std::string& link);

// Every measured rep; the details (ranks, waits, path, timeline) of the rep
// whose projected TTFT is the lower median.
Projection project_variant(const VariantResult& variant, const std::string& link);

// Compact: the TTFT line, then one line per rank (the rank ending last marked *).
std::string format_projection(const std::string& variant_name, const Projection& projection);
// Each projection in order, `prefix` before each; one whose every rep's TTFT
// and every rank's row equal an earlier one's (no span moved by the link, as
// at cp 1) is one line naming that link instead of its table.
std::string format_projections(const std::string& variant_name, const std::vector<Projection>& projections,
                               const std::string& prefix = "");

// ---- the check against a real gang (one GPU per rank) ----

struct GangCheckRank {
  int32_t rank = 0;
  double projected_end_ms = 0;   // RankProjection::end_us
  double measured_end_ms = 0;    // the gang's rank_reps wall_us of the rank, median over reps
  double end_error = 0;          // projected / measured - 1
  double projected_wait_ms = 0;  // RankProjection::wait_us
  double measured_wait_ms = 0;   // the gang's rank_reps wait_us, median over reps
};

struct GangCheck {
  std::string link;
  double projected_ttft_ms = 0;  // median over the projected reps
  double measured_ttft_ms = 0;   // median of the gang's ttft_ms
  double ttft_error = 0;         // projected / measured - 1
  std::vector<GangCheckRank> ranks;
};

// `projected` from a serialized run, `measured` the same variant run as a real
// gang. Throws pb::Error when the gang has no TTFT or lacks a projected rank.
GangCheck compare_projection_to_gang(const Projection& projected, const VariantResult& measured);
std::string format_gang_check(const GangCheck& check);

}  // namespace pb
