// A recorded gang over other links: the fabric's bytes of every span, and the
// projected TTFT over each link profile side by side (`compare --links`).
//
// A fabric span's `bytes` are the bytes that cross the link for it (results.h
// Span), and a projection over a link profile re-times every fabric span that
// moves bytes to transfer_us(bytes) (projection.h). Run and lane files say so
// in the root text kFabricSpanBytesKey. Older ones stored the plan's copy cost
// there instead (0 for every wait, twice the halo for publish_halo):
// restore_link_bytes takes their link bytes from the plan of the scenario they
// recorded, launch by launch, as `run` now records them.
//
//   const RunResult run = read_with_link_bytes(path);
//   out << link_table(run, path, ReportFormat::markdown);
#pragma once

#include <string>
#include <vector>

#include "report.h"
#include "results.h"

namespace pb {

constexpr const char* kFabricSpanBytesKey = "fabric_span_bytes";
constexpr const char* kFabricSpanBytesLink = "link";                      // recorded by the run
constexpr const char* kFabricSpanBytesRestored = "link, from the plan";  // restore_link_bytes

// What the file's fabric span bytes are: kFabricSpanBytesLink or
// kFabricSpanBytesRestored, or a sentence saying why they are not link bytes.
std::string fabric_span_bytes(const RunResult& run);

// For a run or lane file without kFabricSpanBytesKey: every fabric span of
// every variant, rep and rank takes its bytes from the launch with the same
// layer and kernel, in order, of the plan of the recorded scenario under the
// variant's recorded cuts (plan.h span_bytes), and text[kFabricSpanBytesKey]
// says so. When the scenario does not parse, a variant records a cut this
// build does not know, a span has no planned launch, or a run's rank rep
// misses a planned fabric launch, nothing changes and text[kFabricSpanBytesKey]
// says why. Other files are left as they are. Returns whether bytes were restored.
// Stored projections over link profiles are replayed with the restored bytes
// (a slimmed one stays without its timeline).
bool restore_link_bytes(RunResult& run, const std::string& file);
// read_results(path), then restore_link_bytes: what every reader that
// projects or prints projections takes.
RunResult read_with_link_bytes(const std::string& path);

// Per variant that can be projected (projection.h can_project): the projected
// gang's TTFT with the fabric as measured and over each link profile, the
// change against measured, and the fabric's bytes in one superstep on the rank
// that moves the most. Throws pb::Error naming the file when no variant can be
// projected.
struct LinkRow {
  std::string variant;
  std::string link;
  std::string link_source;  // the projection's: where the link's figures come from
  double ttft_ms = 0;
  double change = 0;   // against the measured fabric, a fraction
  double link_mb = 0;  // the variant's, the same in each of its rows
};
std::vector<LinkRow> link_rows(const RunResult& run, const std::string& file);
std::string link_table(const RunResult& run, const std::string& file, ReportFormat format);

}  // namespace pb
