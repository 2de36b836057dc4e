// One rep of a run as Chrome trace-event JSON, which Perfetto
// (ui.perfetto.dev) and chrome://tracing open (`prefill-bench trace`).
//
//   a process per rank ("rank r, measured"), a thread per stream;
//   every span a complete event ("X"): name = kernel, category = family, at
//     its measured start (Span::start_us; files before schema 3 have none and
//     lay each rank's spans back to back, said in the span's args), args:
//     layer, bytes, FLOPs, the achieved TB/s or TFLOP/s;
//   every doorbell wait a flow arrow from the span that rang it (its end) to
//     the span that waited (its start), when the ring is in the same rep;
//   a counter track per rank: the bytes its fabric spans moved so far;
//   for a file holding a projected gang (docs/design.md §9), that gang as
//     further processes ("rank r, projected gang (<link>)"), one track per
//     stream, from the projection's timeline of its detailed rep.
// Times are microseconds, as the format wants.
#pragma once

#include <string>

#include "results.h"

namespace pb {

struct TraceOptions {
  std::string variant;       // empty: the file's only variant (an error when it has several)
  int rep = -1;              // -1: the last measured rep
  std::string projection;    // the projection's link to draw; empty: "measured" when present, else the first
};

// The JSON document. Throws pb::Error naming the file's variants or reps when
// the options pick none, or when the file holds no measured spans.
std::string trace_json(const RunResult& result, const TraceOptions& options);

// Writes `json` to `path`, gzip-compressed when path ends in ".gz". Refuses an
// existing file unless overwrite.
void write_trace(const std::string& path, const std::string& json, bool overwrite);

}  // namespace pb
