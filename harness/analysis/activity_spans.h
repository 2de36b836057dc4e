// Span times from CUPTI activity records (scenario key timing: cupti;
// harness/observe/cupti_timing.h gathers the records). The timeline pushes the
// span's id as CUPTI's external correlation id around the span's launches, so
// every CUDA call the span makes carries it, and each kernel, memcpy or
// memset the GPU ran carries the correlation id of the call that launched it:
//
//   external correlation (span id, correlation id)  +  activity (correlation id, start, end)
//   -> span: its first activity's start to its last activity's end, on the GPU's clock
//
// Unlike two CUDA events around the span, nothing is enqueued between
// launches. Pure host code: the records are plain structs here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace pb {

// CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: a CUDA call made inside span `span`.
struct ApiCorrelation {
  uint64_t span = 0;
  uint32_t correlation = 0;
};

// A kernel, memcpy or memset the GPU ran, ns on CUPTI's clock.
struct GpuActivity {
  uint32_t correlation = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
};

// A span's time, as Timeline::collect reports it (TimedLaunch::ms, start_ms).
struct SpanTime {
  double ms = 0;        // first activity's start to last activity's end; 0 when the span ran none
  double start_ms = 0;  // from the earliest activity of the spans; a span that ran none: the previous span's end
  int activities = 0;   // the kernels, memcpys and memsets it ran
};

// The times of spans first_span .. first_span + count - 1, in order. Records
// of other spans, and activities no span launched, are left out.
std::vector<SpanTime> span_times(uint64_t first_span, size_t count, const std::vector<ApiCorrelation>& calls,
                                 const std::vector<GpuActivity>& activities);

}  // namespace pb
