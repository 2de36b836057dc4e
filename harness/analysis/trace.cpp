#include "trace.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "check.h"
#include "projection.h"

namespace pb {

namespace {

using json = nlohmann::json;

constexpr int kProjectedPid = 1000;  // projected rank r is process 1000 + r

const VariantResult& pick_variant(const RunResult& result, const std::string& name) {
  std::string names;
  for (const VariantResult& v : result.variants) names += (names.empty() ? "" : ", ") + v.name;
  PB_CHECK(!result.variants.empty(), "trace: the file holds no variants (a benchmark file?)");
  if (name.empty()) {
    PB_CHECK(result.variants.size() == 1, "trace: the file holds variants " + names + "; pick one with --variant");
    return result.variants.front();
  }
  for (const VariantResult& v : result.variants)
    if (v.name == name) return v;
  throw_error(__FILE__, __LINE__, "trace: no variant '" + name + "' in the file; it holds " + names);
}

int pick_rep(const VariantResult& v, int wanted) {
  int last = -1;
  for (const Span& s : v.spans) last = std::max(last, int(s.rep));
  PB_CHECK(last >= 0, "trace: variant '" + v.name + "' holds no measured spans (a plan file?)");
  if (wanted < 0) return last;
  const bool present = std::any_of(v.spans.begin(), v.spans.end(), [&](const Span& s) { return s.rep == wanted; });
  PB_CHECK(present, "trace: variant '" + v.name + "' has no rep " + std::to_string(wanted) + " (reps 0.." +
                        std::to_string(last) + ")");
  return wanted;
}

json span_args(const Span& s, bool start_assumed) {
  json a = {{"layer", s.layer}, {"bytes", s.bytes}, {"flops", s.flops}};
  if (s.time_us > 0) {
    if (s.flops > 0) a["TFLOP/s"] = s.flops / (s.time_us * 1e6);
    if (s.bytes > 0) a["TB/s"] = s.bytes / (s.time_us * 1e6);
  }
  if (start_assumed) a["start"] = "assumed back to back (the file records no start times)";
  return a;
}

// pids are 64-bit: a rank read from a file plus kProjectedPid cannot overflow.
void name_process(json& events, int64_t pid, const std::string& name, int64_t sort) {
  events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}});
  events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", sort}}}});
}

void name_thread(json& events, int64_t pid, int tid) {
  events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", tid},
                    {"args", {{"name", "stream " + std::to_string(tid)}}}});
}

// Start and end of each span of the rep (by row), measured or laid back to back.
struct Placed {
  double start = 0, end = 0;
  bool assumed = false;
};

std::map<int64_t, Placed> place_measured(const VariantResult& v, int rep) {
  std::map<int, bool> known;  // rank -> every span has a start
  for (const Span& s : v.spans)
    if (s.rep == rep) known[s.rank] = (known.count(s.rank) ? known[s.rank] : true) && s.start_us >= 0;
  std::map<std::pair<int, int>, double> cursor;  // (rank, stream) -> end of the last span laid
  std::map<int64_t, Placed> out;
  for (int64_t i = 0; i < int64_t(v.spans.size()); ++i) {
    const Span& s = v.spans[size_t(i)];
    if (s.rep != rep) continue;
    Placed p;
    if (known[s.rank]) {
      p.start = s.start_us;
    } else {
      p.start = cursor[{s.rank, s.stream}];
      p.assumed = true;
    }
    p.end = p.start + s.time_us;
    cursor[{s.rank, s.stream}] = p.end;
    out[i] = p;
  }
  return out;
}

void add_spans(json& events, const VariantResult& v, const std::map<int64_t, Placed>& placed, int64_t pid_base) {
  std::map<int, double> fabric_bytes;
  for (const auto& [row, p] : placed) {
    const Span& s = v.spans[size_t(row)];
    events.push_back({{"ph", "X"}, {"name", s.kernel}, {"cat", s.family}, {"pid", pid_base + s.rank},
                      {"tid", s.stream}, {"ts", p.start}, {"dur", p.end - p.start},
                      {"args", span_args(s, p.assumed)}});
    if (s.family == "fabric" && s.bytes > 0) {
      fabric_bytes[s.rank] += s.bytes;
      events.push_back({{"ph", "C"}, {"name", "fabric bytes"}, {"pid", pid_base + s.rank}, {"ts", p.end},
                        {"args", {{"bytes", fabric_bytes[s.rank]}}}});
    }
  }
}

// Flow arrows: each wait of the rep from the ring that met it, the sender's
// first ring into the flag with a value >= the wait's (same rep).
void add_flows(json& events, const VariantResult& v, int rep, const std::map<int64_t, Placed>& placed,
               int64_t pid_base, int& next_id) {
  // (receiver, flag) -> the rep's rings into it, in table order: (value, span row, sender)
  std::map<std::pair<int, int>, std::vector<std::tuple<uint64_t, int64_t, int>>> rings;
  for (const BellOp& b : v.bells)
    if (b.rep == rep && b.op == BellOpKind::ring) rings[{b.peer, b.flag}].emplace_back(b.value, b.span, b.rank);
  for (const BellOp& b : v.bells) {
    if (b.rep != rep || b.op != BellOpKind::wait) continue;
    const auto it = rings.find({b.rank, b.flag});
    if (it == rings.end()) continue;
    // A wait for a value below the rep's first ring into the flag was met by
    // an earlier rep's ring (values only grow): no arrow.
    if (b.value < std::get<0>(it->second.front())) continue;
    for (const auto& [value, ring_row, sender] : it->second) {
      if (sender != b.peer || value < b.value) continue;
      const auto from = placed.find(ring_row);
      const auto to = placed.find(b.span);
      if (from == placed.end() || to == placed.end()) break;
      const Span& ring_span = v.spans[size_t(ring_row)];
      const Span& wait_span = v.spans[size_t(b.span)];
      const int id = next_id++;
      const std::string name = "doorbell " + b.kind;
      events.push_back({{"ph", "s"}, {"id", id}, {"name", name}, {"cat", "doorbell"}, {"pid", pid_base + ring_span.rank},
                        {"tid", ring_span.stream}, {"ts", from->second.start}});
      events.push_back({{"ph", "f"}, {"bp", "e"}, {"id", id}, {"name", name}, {"cat", "doorbell"},
                        {"pid", pid_base + wait_span.rank}, {"tid", wait_span.stream}, {"ts", to->second.start}});
      break;
    }
  }
}

const Projection* pick_projection(const VariantResult& v, const std::string& link) {
  const Projection* p = v.projection(link.empty() ? "measured" : link);
  PB_CHECK(!p || link.empty() || p->link == link,
           "trace: variant '" + v.name + "' has no projection over link '" + link + "'");
  return p;
}

void name_tracks(json& events, const VariantResult& v, const std::map<int64_t, Placed>& placed, int64_t pid_base,
                 const std::string& what) {
  std::map<int, std::vector<int>> streams;
  for (const auto& [row, p] : placed) {
    const Span& s = v.spans[size_t(row)];
    auto& list = streams[s.rank];
    if (std::find(list.begin(), list.end(), s.stream) == list.end()) list.push_back(s.stream);
  }
  for (const auto& [rank, list] : streams) {
    name_process(events, pid_base + rank, "rank " + std::to_string(rank) + ", " + what, pid_base + rank);
    for (int tid : list) name_thread(events, pid_base + rank, tid);
  }
}

}  // namespace

std::string trace_json(const RunResult& result, const TraceOptions& options) {
  const VariantResult& v = pick_variant(result, options.variant);
  const int rep = pick_rep(v, options.rep);
  json events = json::array();
  int next_id = 1;
  const std::map<int64_t, Placed> measured = place_measured(v, rep);
  name_tracks(events, v, measured, 0, "measured");
  add_spans(events, v, measured, 0);
  add_flows(events, v, rep, measured, 0, next_id);
  json other = {{"kind", result.kind}, {"variant", v.name}, {"cuts", v.cuts}, {"rep", rep}};
  for (const char* key : {"git_sha", "scenario_source", "hostnames"})
    if (result.text.count(key)) other[key] = result.text.at(key);
  if (const Projection* p = pick_projection(v, options.projection)) {
    std::vector<ProjectedSpan> replayed;  // a slimmed file keeps no timeline: replay the rep
    if (p->timeline.empty() && can_project(v)) replayed = project_rep(v, p->rep, p->link).timeline;
    std::map<int64_t, Placed> projected;
    for (const ProjectedSpan& s : p->timeline.empty() ? replayed : p->timeline)
      projected[s.span] = Placed{s.start_us, s.end_us, false};
    name_tracks(events, v, projected, kProjectedPid, "projected gang (" + p->link + ")");
    add_spans(events, v, projected, kProjectedPid);
    add_flows(events, v, p->rep, projected, kProjectedPid, next_id);
    other["projection"] = {{"link", p->link}, {"link_source", p->link_source}, {"rep", p->rep},
                           {"ttft_ms", p->ttft_ms}};
  }
  const json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", other}};
  return doc.dump(-1, ' ', false, json::error_handler_t::replace);  // a name's invalid UTF-8 as U+FFFD
}

void write_trace(const std::string& path, const std::string& json_text, bool overwrite) {
  PB_CHECK(overwrite || !std::filesystem::exists(path),
           "trace: '" + path + "' exists; pass --overwrite to replace it");
  const std::string tmp = path + ".tmp";
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  if (gz) {
    gzFile f = gzopen(tmp.c_str(), "wb");
    PB_CHECK(f != nullptr, "trace: cannot write '" + tmp + "'");
    const int n = gzwrite(f, json_text.data(), unsigned(json_text.size()));
    const int rc = gzclose(f);
    PB_CHECK(n == int(json_text.size()) && rc == Z_OK, "trace: writing '" + tmp + "' failed");
  } else {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    PB_CHECK(f != nullptr, "trace: cannot write '" + tmp + "'");
    const size_t n = std::fwrite(json_text.data(), 1, json_text.size(), f);
    const int rc = std::fclose(f);
    PB_CHECK(n == json_text.size() && rc == 0, "trace: writing '" + tmp + "' failed");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace pb
