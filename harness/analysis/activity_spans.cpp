#include "activity_spans.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace pb {

std::vector<SpanTime> span_times(uint64_t first_span, size_t count, const std::vector<ApiCorrelation>& calls,
                                 const std::vector<GpuActivity>& activities) {
  std::unordered_map<uint32_t, size_t> span_of;  // correlation id -> index in [0, count)
  for (const ApiCorrelation& c : calls)
    if (c.span >= first_span && c.span - first_span < count) span_of[c.correlation] = size_t(c.span - first_span);

  constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> first(count, kNone), last(count, 0);
  std::vector<int> n(count, 0);
  uint64_t origin = kNone;
  for (const GpuActivity& a : activities) {
    const auto it = span_of.find(a.correlation);
    if (it == span_of.end()) continue;
    const size_t i = it->second;
    first[i] = std::min(first[i], a.start_ns);
    last[i] = std::max(last[i], a.end_ns);
    ++n[i];
    origin = std::min(origin, a.start_ns);
  }

  std::vector<SpanTime> out(count);
  double previous_end_ms = 0;
  for (size_t i = 0; i < count; ++i) {
    SpanTime& t = out[i];
    t.activities = n[i];
    if (n[i] == 0) {
      t.start_ms = previous_end_ms;
      continue;
    }
    t.start_ms = double(first[i] - origin) / 1e6;
    t.ms = double(last[i] - first[i]) / 1e6;
    previous_end_ms = t.start_ms + t.ms;
  }
  return out;
}

}  // namespace pb
