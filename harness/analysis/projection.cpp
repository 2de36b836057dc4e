// The gang replayed from a serialized run (projection.h has the rules).
//
// Reading order: the link and the doorbell kinds; building one rep's replay
// (nodes = spans, waits, rings) and checking it; the discrete-event replay and
// its errors (a wait never rung, a cycle); the summaries (ranks, waits,
// critical paths, timeline); the public functions; printing; the gang check.
#include "projection.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "check.h"
#include "profile.h"
#include "slab_layout.h"
#include "stats.h"
#include "text.h"

namespace pb {

namespace {

// ---- the link and the doorbell kinds ---------------------------------------------------

struct LinkCost {
  std::string name, source;
  bool measured = true;
  LinkProfile profile;  // when !measured
};

LinkCost link_cost(const std::string& link) {
  const std::vector<std::string> names = projection_link_names();
  PB_CHECK(std::find(names.begin(), names.end(), link) != names.end(),
           fmt::format("unknown projection link '{}'; allowed: {}", link, join(names)));
  if (link == kMeasuredLink) return {link, "fabric spans as measured in the run", true, {}};
  const LinkProfile profile = link_profile(link);
  return {link, profile.source, false, profile};
}

// The slab_layout.h doorbell named `kind`, if it is one.
bool parse_bell(const std::string& kind, Bell* bell) {
  for (int i = 0; i < kBellKinds; ++i)
    if (kind == bell_name(Bell(i))) {
      *bell = Bell(i);
      return true;
    }
  return false;
}

// Whose calls a doorbell's values count (doorbell_value's seq): 0 the MLA
// block's, 1 the KDA block's; -1: not a slab_layout.h doorbell.
int call_counter(const std::string& kind) {
  Bell bell;
  if (!parse_bell(kind, &bell)) return -1;
  switch (bell) {
    case Bell::window:
    case Bell::returned:
    case Bell::consumed:
    case Bell::released: return 0;
    default: return 1;
  }
}

std::string describe_value(const std::string& kind, uint64_t value) {
  if (call_counter(kind) < 0 || value == 0) return std::to_string(value);
  return fmt::format("{} (seq {}, window {})", value, doorbell_seq(value), doorbell_window(value));
}

// ---- one rep's replay: spans as nodes, doorbell operations as waits and rings ------------

struct Node {
  int64_t row = 0;  // spans table row
  const Span* span = nullptr;
  int queue = 0;    // its (rank, stream)
  int prev = -1;    // the node before it on its stream
  double duration = 0;
  std::vector<int> waits, rings;
  double ready = 0, start = 0, end = 0;  // ready: the previous span on its stream ended
  int binding = -1;                      // the wait that set start (start > ready), else -1
  bool started = false;
};

struct DoorbellOp {
  int node = 0;
  int64_t row = 0;  // bells table row
  int32_t receiver = 0, sender = 0, flag = 0;
  std::string kind;
  uint64_t value = 0;
  int key = 0;          // (receiver, flag, sender)
  double time = 0;      // ring: when it rang; wait: when it was satisfied
  bool done = false;    // ring: rang; wait: satisfied
  int ring = -1;        // wait: the ring that satisfied it; -1 while not, or held from the start
  bool pending = false; // wait: registered with its flag
};

struct Replay {
  std::string variant;
  int32_t rep = 0;
  int cp = 0;
  std::vector<Node> nodes;
  std::vector<DoorbellOp> waits, rings;
  std::vector<std::vector<int>> queues;  // the nodes of each (rank, stream), in order
  int keys = 0;

  std::string context() const { return fmt::format("projection of variant '{}' rep {}", variant, rep); }
  std::string describe_node(int n) const {
    const Span& s = *nodes[size_t(n)].span;
    return fmt::format("rank {} span {} (layer {}, {})", s.rank, nodes[size_t(n)].row, s.layer, s.kernel);
  }
  std::string describe_wait(const DoorbellOp& w) const {
    return fmt::format("doorbell '{}' from rank {} (flag {}) >= {}", w.kind, w.sender, w.flag,
                       describe_value(w.kind, w.value));
  }
};

double projected_duration(const Span& span, bool waits, const LinkCost& link) {
  if (span.family == "fabric" && span.bytes > 0 && !link.measured) return link.profile.transfer_us(span.bytes);
  return waits ? 0.0 : span.time_us;
}

void add_nodes(const VariantResult& v, Replay& r, std::map<int64_t, int>* node_of_row) {
  std::map<std::pair<int32_t, int32_t>, int> queue_of;
  for (size_t i = 0; i < v.spans.size(); ++i) {
    const Span& span = v.spans[i];
    if (span.rep != r.rep) continue;
    // A negative or non-finite time would let a span end before the rep starts (a file's damage).
    PB_CHECK(std::isfinite(span.time_us) && span.time_us >= 0,
             fmt::format("{}: span row {} ({}) lasts {} us", r.context(), i, span.kernel, span.time_us));
    const auto [it, added] = queue_of.try_emplace({span.rank, span.stream}, int(r.queues.size()));
    if (added) r.queues.emplace_back();
    Node node;
    node.row = int64_t(i);
    node.span = &span;
    node.queue = it->second;
    std::vector<int>& queue = r.queues[size_t(node.queue)];
    node.prev = queue.empty() ? -1 : queue.back();
    queue.push_back(int(r.nodes.size()));
    (*node_of_row)[node.row] = int(r.nodes.size());
    r.nodes.push_back(node);
  }
  PB_CHECK(!r.nodes.empty(), fmt::format("{}: the variant has no spans of that rep", r.context()));
  std::set<int32_t> ranks;
  for (const Node& node : r.nodes) ranks.insert(node.span->rank);
  PB_CHECK(*ranks.begin() == 0 && size_t(*ranks.rbegin()) + 1 == ranks.size(),
           fmt::format("{}: spans of {} ranks, but rank numbers {} to {}: a rank is missing", r.context(),
                       ranks.size(), *ranks.begin(), *ranks.rbegin()));
  r.cp = *ranks.rbegin() + 1;
}

// A doorbell kind of slab_layout.h must sit at doorbell_index(cp, sender, kind).
void check_flag(const Replay& r, const BellOp& bell, int32_t sender, int64_t row) {
  Bell kind;
  if (!parse_bell(bell.kind, &kind)) return;
  const int expected = doorbell_index(r.cp, sender, kind);
  PB_CHECK(bell.flag == expected,
           fmt::format("{}: bells row {} ({} '{}' of rank {}, sender rank {}) has flag {}; doorbell_index(cp {}, "
                       "sender {}, {}) is {}",
                       r.context(), row, bell_op_name(bell.op), bell.kind, bell.rank, sender, bell.flag, r.cp,
                       sender, bell.kind, expected));
}

void add_doorbells(const VariantResult& v, Replay& r, const std::map<int64_t, int>& node_of_row) {
  std::map<std::tuple<int32_t, int32_t, int32_t>, int> key_of;
  for (size_t i = 0; i < v.bells.size(); ++i) {
    const BellOp& bell = v.bells[i];
    if (bell.rep != r.rep) continue;
    const auto found = node_of_row.find(bell.span);
    PB_CHECK(found != node_of_row.end() && v.spans[size_t(bell.span)].rank == bell.rank,
             fmt::format("{}: bells row {} (rank {}) names span {}, which is not a span of that rep and rank",
                         r.context(), i, bell.rank, bell.span));
    PB_CHECK(bell.peer >= 0 && bell.peer < r.cp,
             fmt::format("{}: bells row {} ({} '{}' of rank {}) names peer rank {}, outside the gang of {}",
                         r.context(), i, bell_op_name(bell.op), bell.kind, bell.rank, bell.peer, r.cp));
    DoorbellOp op;
    op.node = found->second;
    op.row = int64_t(i);
    op.receiver = bell.op == BellOpKind::ring ? bell.peer : bell.rank;
    op.sender = bell.op == BellOpKind::ring ? bell.rank : bell.peer;
    op.flag = bell.flag;
    op.kind = bell.kind;
    op.value = bell.value;
    check_flag(r, bell, op.sender, op.row);
    op.key = key_of.try_emplace({op.receiver, op.flag, op.sender}, int(key_of.size())).first->second;
    Node& node = r.nodes[size_t(op.node)];
    std::vector<DoorbellOp>& ops = bell.op == BellOpKind::ring ? r.rings : r.waits;
    (bell.op == BellOpKind::ring ? node.rings : node.waits).push_back(int(ops.size()));
    ops.push_back(std::move(op));
  }
  r.keys = int(key_of.size());
  PB_CHECK(r.cp == 1 || !r.waits.empty() || !r.rings.empty(),
           fmt::format("{}: spans of {} ranks but no doorbells recorded (a schema 1 file, or a run that did not "
                       "record them): the gang cannot be replayed",
                       r.context(), r.cp));
}

// Every fabric.wait* span must wait on something: a missing record would let it start early.
void check_wait_spans(const Replay& r) {
  if (r.cp == 1) return;
  for (size_t n = 0; n < r.nodes.size(); ++n)
    PB_CHECK(r.nodes[n].span->kernel.rfind("fabric.wait", 0) != 0 || !r.nodes[n].waits.empty(),
             fmt::format("{}: {} records no doorbell wait", r.context(), r.describe_node(int(n))));
}

// Waits that hold when the rep starts: value 0 (every flag starts there), and
// waits for a call before the rep's first call of the doorbell's block (the
// lowest seq its rings carry in this rep).
void hold_waits_from_the_start(Replay& r) {
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  int64_t first_call[2] = {kNone, kNone};
  for (const DoorbellOp& ring : r.rings) {
    const int counter = call_counter(ring.kind);
    if (counter >= 0) first_call[counter] = std::min(first_call[counter], doorbell_seq(ring.value));
  }
  for (DoorbellOp& wait : r.waits) {
    const int counter = call_counter(wait.kind);
    const bool earlier_call =
        counter >= 0 && first_call[counter] != kNone && doorbell_seq(wait.value) < first_call[counter];
    if (wait.value == 0 || earlier_call) {
      wait.done = true;
      wait.time = 0;
    }
  }
}

Replay build_replay(const VariantResult& v, int32_t rep, const LinkCost& link) {
  Replay r;
  r.variant = v.name;
  r.rep = rep;
  std::map<int64_t, int> node_of_row;
  add_nodes(v, r, &node_of_row);
  add_doorbells(v, r, node_of_row);
  check_wait_spans(r);
  for (Node& node : r.nodes) node.duration = projected_duration(*node.span, !node.waits.empty(), link);
  hold_waits_from_the_start(r);
  return r;
}

// ---- the discrete-event replay -------------------------------------------------------------

class Simulation {
 public:
  explicit Simulation(Replay& r) : r_(r), next_(r.queues.size(), 0), prev_end_(r.queues.size(), 0.0),
                                   rung_(size_t(r.keys)), pending_(size_t(r.keys)) {}

  void run() {
    for (size_t q = 0; q < r_.queues.size(); ++q) try_start(int(q));
    while (!events_.empty()) {
      const Event event = events_.top();
      events_.pop();
      finish(event.node);
    }
    for (size_t q = 0; q < r_.queues.size(); ++q)
      if (next_[q] < r_.queues[q].size()) report_stuck();
  }

 private:
  struct Event {
    double end;
    int64_t order;
    int node;
    bool operator>(const Event& other) const {
      return end != other.end ? end > other.end : order > other.order;
    }
  };

  // The earliest ring so far that satisfies `wait`; rings come in time order.
  bool satisfy_from_rings(DoorbellOp& wait) {
    for (int ring : rung_[size_t(wait.key)])
      if (r_.rings[size_t(ring)].value >= wait.value) {
        wait.done = true;
        wait.time = r_.rings[size_t(ring)].time;
        wait.ring = ring;
        return true;
      }
    return false;
  }

  // Starts the head of queue q when the span before it ended and its doorbells rang.
  void try_start(int q) {
    const std::vector<int>& queue = r_.queues[size_t(q)];
    if (next_[size_t(q)] >= queue.size()) return;
    Node& node = r_.nodes[size_t(queue[next_[size_t(q)]])];
    if (node.started) return;
    bool blocked = false;
    for (int w : node.waits) {
      DoorbellOp& wait = r_.waits[size_t(w)];
      if (wait.done || satisfy_from_rings(wait)) continue;
      blocked = true;
      if (!wait.pending) pending_[size_t(wait.key)].push_back(w);
      wait.pending = true;
    }
    if (blocked) return;
    node.ready = prev_end_[size_t(q)];
    node.start = node.ready;
    for (int w : node.waits)
      if (r_.waits[size_t(w)].time > node.start) {
        node.start = r_.waits[size_t(w)].time;
        node.binding = w;
      }
    node.end = node.start + node.duration;
    node.started = true;
    events_.push(Event{node.end, order_++, queue[next_[size_t(q)]]});
  }

  void finish(int n) {
    Node& node = r_.nodes[size_t(n)];
    std::vector<int> woken;
    for (int g : node.rings) {
      DoorbellOp& ring = r_.rings[size_t(g)];
      ring.done = true;
      ring.time = node.end;
      rung_[size_t(ring.key)].push_back(g);
      std::vector<int>& waiting = pending_[size_t(ring.key)];
      for (int w : waiting) {
        DoorbellOp& wait = r_.waits[size_t(w)];
        if (wait.done || wait.value > ring.value) continue;
        wait.done = true;
        wait.time = node.end;
        wait.ring = g;
        woken.push_back(r_.nodes[size_t(wait.node)].queue);
      }
      waiting.erase(std::remove_if(waiting.begin(), waiting.end(), [&](int w) { return r_.waits[size_t(w)].done; }),
                    waiting.end());
    }
    prev_end_[size_t(node.queue)] = node.end;
    ++next_[size_t(node.queue)];
    try_start(node.queue);
    for (int q : woken) try_start(q);
  }

  int head(int q) const { return r_.queues[size_t(q)][next_[size_t(q)]]; }

  const DoorbellOp& first_unsatisfied(int n) const {
    for (int w : r_.nodes[size_t(n)].waits)
      if (!r_.waits[size_t(w)].done) return r_.waits[size_t(w)];
    PB_CHECK(false, "projection: a blocked span without an unsatisfied wait");
    return r_.waits.front();
  }

  // The ring that would satisfy `wait`, first in table order; -1: none in the rep.
  int ring_for(const DoorbellOp& wait) const {
    int best = -1;
    for (size_t g = 0; g < r_.rings.size(); ++g) {
      const DoorbellOp& ring = r_.rings[g];
      if (ring.key == wait.key && ring.value >= wait.value && (best < 0 || ring.node < r_.rings[size_t(best)].node))
        best = int(g);
    }
    return best;
  }

  // Nothing can run and spans are left: a wait no span rings, else a cycle.
  [[noreturn]] void report_stuck() const {
    std::vector<int> heads;
    for (size_t q = 0; q < r_.queues.size(); ++q)
      if (next_[q] < r_.queues[q].size()) heads.push_back(head(int(q)));
    for (int n : heads)
      for (int w : r_.nodes[size_t(n)].waits) {
        const DoorbellOp& wait = r_.waits[size_t(w)];
        PB_CHECK(wait.done || ring_for(wait) >= 0,
                 fmt::format("{}: {} waits for {}, which no span of rank {} rings in this rep", r_.context(),
                             r_.describe_node(n), r_.describe_wait(wait), wait.sender));
      }
    std::vector<std::string> steps;
    std::map<int, size_t> seen;
    int n = heads.front();
    while (!seen.count(n)) {
      seen[n] = steps.size();
      const DoorbellOp& wait = first_unsatisfied(n);
      const int ringer = r_.rings[size_t(ring_for(wait))].node;
      const int blocker = head(r_.nodes[size_t(ringer)].queue);
      std::string step = fmt::format("{} waits for {}, rung by {}", r_.describe_node(n), r_.describe_wait(wait),
                                     r_.describe_node(ringer));
      if (blocker != ringer) step += fmt::format(", which runs after {} on its stream", r_.describe_node(blocker));
      steps.push_back(step);
      n = blocker;
    }
    const std::vector<std::string> cycle(steps.begin() + std::ptrdiff_t(seen[n]), steps.end());
    std::string text;
    for (const std::string& step : cycle) text += (text.empty() ? "" : "; ") + step;
    throw_error(__FILE__, __LINE__, fmt::format("{}: a cycle of doorbell waits: {}", r_.context(), text));
  }

  Replay& r_;
  std::vector<size_t> next_;          // per queue: its first span not done
  std::vector<double> prev_end_;      // per queue: the end of its last span done
  std::vector<std::vector<int>> rung_;     // per key: rings so far, in time order
  std::vector<std::vector<int>> pending_;  // per key: waits not yet satisfied
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  int64_t order_ = 0;
};

// ---- summaries --------------------------------------------------------------------------------

int32_t rank_of(const Replay& r, int n) { return r.nodes[size_t(n)].span->rank; }

// The span that ends last (ties: the higher rank, then the later row), among
// those of `rank` (or all, rank < 0).
int last_node(const Replay& r, int32_t rank) {
  int best = -1;
  for (size_t n = 0; n < r.nodes.size(); ++n) {
    if (rank >= 0 && rank_of(r, int(n)) != rank) continue;
    if (best < 0) {
      best = int(n);
      continue;
    }
    const Node& a = r.nodes[n];
    const Node& b = r.nodes[size_t(best)];
    if (std::make_tuple(a.end, a.span->rank, a.row) > std::make_tuple(b.end, b.span->rank, b.row)) best = int(n);
  }
  return best;
}

// The chain of spans that ends with `tail`, in time order: each started when
// the one before it ended (its stream's previous span, or the ring it waited on).
std::vector<int> chain_to(const Replay& r, int tail) {
  std::vector<int> chain;
  for (int n = tail; n >= 0;) {
    chain.push_back(n);
    const Node& node = r.nodes[size_t(n)];
    n = node.binding >= 0 ? r.rings[size_t(r.waits[size_t(node.binding)].ring)].node : node.prev;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

using WaitKey = std::tuple<int32_t, int32_t, std::string>;  // (rank, peer, kind)

double union_length(std::vector<std::pair<double, double>> intervals) {
  if (intervals.empty()) return 0;
  std::sort(intervals.begin(), intervals.end());
  double total = 0, open = intervals.front().first, close = intervals.front().second;
  for (const auto& [start, end] : intervals) {
    if (start > close) {
      total += close - open;
      open = start;
    }
    close = std::max(close, end);
  }
  return total + (close - open);
}

// Walks `rank`'s critical path back from its last span: its own spans are
// compute, spans of other ranks count for the doorbell through which the path
// left the rank (walking back).
void attribute_rank_path(const Replay& r, int32_t rank, RankProjection* projection,
                         std::map<WaitKey, ProjectedWait>* waits) {
  const std::vector<int> chain = chain_to(r, last_node(r, rank));
  WaitKey entry{rank, -1, ""};
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const Node& node = r.nodes[size_t(*it)];
    const double duration = node.end - node.start;
    if (node.span->rank == rank) {
      projection->path_compute_us += duration;
      if (node.binding >= 0) {
        const DoorbellOp& wait = r.waits[size_t(node.binding)];
        entry = WaitKey{rank, wait.sender, wait.kind};
      }
    } else {
      (*waits)[entry].path_us += duration;
    }
  }
}

std::vector<RankProjection> summarize_ranks(const Replay& r, double ttft_us, std::map<WaitKey, ProjectedWait>* waits) {
  std::vector<RankProjection> ranks(size_t(r.cp));
  std::vector<std::vector<std::pair<double, double>>> intervals(size_t(r.cp));
  for (int32_t rank = 0; rank < r.cp; ++rank) ranks[size_t(rank)].rank = rank;
  for (const Node& node : r.nodes) {
    RankProjection& rank = ranks[size_t(node.span->rank)];
    rank.end_us = std::max(rank.end_us, node.end);
    if (node.end > node.start) intervals[size_t(node.span->rank)].emplace_back(node.start, node.end);
    if (node.binding < 0) continue;
    const DoorbellOp& wait = r.waits[size_t(node.binding)];
    rank.wait_us += node.start - node.ready;
    (*waits)[WaitKey{rank.rank, wait.sender, wait.kind}].stall_us += node.start - node.ready;
  }
  for (RankProjection& rank : ranks) {
    rank.busy_us = union_length(intervals[size_t(rank.rank)]);
    rank.idle_us = ttft_us - rank.busy_us;
    attribute_rank_path(r, rank.rank, &rank, waits);
  }
  return ranks;
}

std::vector<PathStep> gang_path(const Replay& r) {
  std::vector<PathStep> path;
  for (int n : chain_to(r, last_node(r, -1))) {
    const Node& node = r.nodes[size_t(n)];
    PathStep step;
    step.span = node.row;
    step.rank = node.span->rank;
    step.stream = node.span->stream;
    step.layer = node.span->layer;
    step.kernel = node.span->kernel;
    step.start_us = node.start;
    step.end_us = node.end;
    if (node.binding >= 0) {
      const DoorbellOp& wait = r.waits[size_t(node.binding)];
      step.peer = wait.sender;
      step.kind = wait.kind;
      step.waited_us = node.start - node.ready;
    }
    path.push_back(step);
  }
  return path;
}

ProjectedRep rep_times(const VariantResult& v, const Replay& r, double ttft_us) {
  ProjectedRep rep;
  rep.rep = r.rep;
  rep.ttft_ms = ttft_us / 1e3;
  rep.serialized_ttft_ms = rep.host_ms = std::numeric_limits<double>::quiet_NaN();
  if (r.rep >= 0 && size_t(r.rep) < v.ttft_ms.size()) {
    double spans_us = 0;
    for (const Node& node : r.nodes) spans_us += node.span->time_us;
    rep.serialized_ttft_ms = v.ttft_ms[size_t(r.rep)];
    rep.host_ms = rep.serialized_ttft_ms - spans_us / 1e3;
  }
  return rep;
}

Projection summarize_replay(const VariantResult& v, const Replay& r, const LinkCost& link) {
  double ttft_us = 0;
  for (const Node& node : r.nodes) ttft_us = std::max(ttft_us, node.end);
  Projection p;
  p.link = link.name;
  p.link_source = link.source;
  p.rep = r.rep;
  p.ttft_ms = ttft_us / 1e3;
  p.reps = {rep_times(v, r, ttft_us)};
  std::map<WaitKey, ProjectedWait> waits;
  p.ranks = summarize_ranks(r, ttft_us, &waits);
  for (auto& [key, wait] : waits) {
    std::tie(wait.rank, wait.peer, wait.kind) = key;
    p.waits.push_back(wait);
  }
  p.path = gang_path(r);
  for (const Node& node : r.nodes) p.timeline.push_back(ProjectedSpan{node.row, node.start, node.end});
  return p;
}

std::vector<int32_t> measured_reps(const VariantResult& v) {
  std::set<int32_t> reps;
  for (const Span& span : v.spans)
    if (span.rep >= 0) reps.insert(span.rep);
  return {reps.begin(), reps.end()};
}

}  // namespace

// ---- the public functions --------------------------------------------------------------------

std::vector<std::string> projection_link_names() {
  std::vector<std::string> names = {kMeasuredLink};
  for (const std::string& name : link_profile_names()) names.push_back(name);
  return names;
}

std::string doorbell_kind(int cp, int flag) {
  PB_CHECK(cp >= 1 && flag >= 0 && flag < cp * kBellKinds,
           fmt::format("doorbell flag {} is outside [0, {}) at cp {}", flag, cp * kBellKinds, cp));
  return bell_name(Bell(flag / cp));
}

bool can_project(const VariantResult& variant) {
  std::set<int32_t> ranks;
  for (const Span& span : variant.spans)
    if (span.rep >= 0) ranks.insert(span.rank);
  return !ranks.empty() && (ranks.size() == 1 || !variant.bells.empty());
}

Projection project_rep(const VariantResult& variant, int32_t rep, const std::string& link) {
  const LinkCost cost = link_cost(link);
  Replay replay = build_replay(variant, rep, cost);
  Simulation(replay).run();
  return summarize_replay(variant, replay, cost);
}

Projection project_variant(const VariantResult& variant, const std::string& link) {
  const std::vector<int32_t> reps = measured_reps(variant);
  PB_CHECK(!reps.empty(), fmt::format("projection of variant '{}': no measured spans (rep >= 0)", variant.name));
  std::vector<Projection> each;
  std::vector<ProjectedRep> rows;
  for (int32_t rep : reps) {
    each.push_back(project_rep(variant, rep, link));
    rows.push_back(each.back().reps.front());
  }
  std::vector<size_t> order(each.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return each[a].ttft_ms < each[b].ttft_ms; });
  Projection detailed = std::move(each[order[(order.size() - 1) / 2]]);
  detailed.reps = std::move(rows);
  return detailed;
}

// ---- printing ----------------------------------------------------------------------------------

namespace {

std::string ms_text(double us) { return fmt::format("{:.2f}", us / 1e3); }

// "own 4500.00, rank 1 released 300.10 (+2 more)": the rank's critical path.
std::string path_text(const Projection& p, const RankProjection& rank) {
  const ProjectedWait* most = nullptr;
  int others = 0;
  for (const ProjectedWait& wait : p.waits) {
    if (wait.rank != rank.rank || wait.path_us <= 0) continue;
    if (most) ++others;
    if (!most || wait.path_us > most->path_us) most = &wait;
  }
  std::string text = "own " + ms_text(rank.path_compute_us);
  if (most) text += fmt::format(", rank {} {} {}", most->peer, most->kind, ms_text(most->path_us));
  if (others) text += fmt::format(" (+{} more)", others);
  return text;
}

std::string reps_text(const Projection& p) {
  std::vector<double> ttft, host;
  for (const ProjectedRep& rep : p.reps) {
    ttft.push_back(rep.ttft_ms);
    if (!std::isnan(rep.host_ms)) host.push_back(rep.host_ms);
  }
  std::string text;
  if (ttft.size() > 1) {
    const Summary s = summarize(ttft);
    text += fmt::format(" ({} reps: min {:.2f} / median {:.2f} / max {:.2f})", s.count, s.min, s.median, s.max);
  }
  if (!host.empty())
    text += fmt::format("; serialized run's host time {:.2f} ms (median), not included", median(host));
  return text;
}

}  // namespace

std::string format_projection(const std::string& variant_name, const Projection& p) {
  std::string out = fmt::format("projected gang, variant {}, link {} ({}): TTFT {:.2f} ms, rep {}{}\n",
                                variant_name, p.link, p.link_source, p.ttft_ms, p.rep, reps_text(p));
  out += fmt::format("  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n", "rank", "end ms", "busy ms", "wait ms",
                     "idle ms", "critical path ms (own spans, then the doorbell most of the rest came through)");
  const double deep_end = p.ranks.empty() ? 0.0  // (a damaged file's projection may hold no ranks)
                          : std::max_element(p.ranks.begin(), p.ranks.end(), [](const auto& a, const auto& b) {
                              return a.end_us < b.end_us;
                            })->end_us;
  for (const RankProjection& rank : p.ranks)
    out += fmt::format("  {:>5}{}  {:>10}  {:>10}  {:>10}  {:>10}  {}\n", rank.rank,
                       rank.end_us == deep_end ? "*" : " ", ms_text(rank.end_us), ms_text(rank.busy_us),
                       ms_text(rank.wait_us), ms_text(rank.idle_us), path_text(p, rank));
  return out;
}

namespace {

bool same_outcome(const Projection& a, const Projection& b) {
  if (a.reps.size() != b.reps.size() || a.ranks.size() != b.ranks.size() || a.ttft_ms != b.ttft_ms) return false;
  for (size_t i = 0; i < a.reps.size(); ++i)
    if (a.reps[i].rep != b.reps[i].rep || a.reps[i].ttft_ms != b.reps[i].ttft_ms) return false;
  for (size_t i = 0; i < a.ranks.size(); ++i) {
    const RankProjection &x = a.ranks[i], &y = b.ranks[i];
    if (x.rank != y.rank || x.end_us != y.end_us || x.busy_us != y.busy_us || x.wait_us != y.wait_us ||
        x.idle_us != y.idle_us)
      return false;
  }
  return true;
}

}  // namespace

std::string format_projections(const std::string& variant_name, const std::vector<Projection>& projections,
                               const std::string& prefix) {
  std::string out;
  for (size_t i = 0; i < projections.size(); ++i) {
    const Projection& p = projections[i];
    const auto same = std::find_if(projections.begin(), projections.begin() + long(i),
                                   [&](const Projection& earlier) { return same_outcome(earlier, p); });
    if (same == projections.begin() + long(i))
      out += prefix + format_projection(variant_name, p);
    else
      out += fmt::format("{}projected gang, variant {}, link {} ({}): TTFT {:.2f} ms, the same as link {} (no span's "
                         "time depends on the link)\n",
                         prefix, variant_name, p.link, p.link_source, p.ttft_ms, same->link);
  }
  return out;
}

// ---- the check against a real gang -------------------------------------------------------------

namespace {

double relative_error(double projected, double measured) {
  return measured > 0 ? projected / measured - 1 : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

GangCheck compare_projection_to_gang(const Projection& projected, const VariantResult& measured) {
  PB_CHECK(!projected.reps.empty(), "gang check: the projection holds no reps");
  PB_CHECK(!measured.ttft_ms.empty(), fmt::format("gang check: the gang's variant '{}' has no TTFT", measured.name));
  GangCheck check;
  check.link = projected.link;
  std::vector<double> ttft;
  for (const ProjectedRep& rep : projected.reps) ttft.push_back(rep.ttft_ms);
  check.projected_ttft_ms = median(ttft);
  check.measured_ttft_ms = median(measured.ttft_ms);
  check.ttft_error = relative_error(check.projected_ttft_ms, check.measured_ttft_ms);
  for (const RankProjection& rank : projected.ranks) {
    std::vector<double> walls, waits;
    for (const RankRep& rr : measured.rank_reps)
      if (rr.rank == rank.rank && rr.rep >= 0) {
        walls.push_back(rr.wall_us / 1e3);
        waits.push_back(rr.wait_us / 1e3);
      }
    PB_CHECK(!walls.empty(),
             fmt::format("gang check: the gang's variant '{}' has no rank_reps of rank {}", measured.name, rank.rank));
    GangCheckRank row;
    row.rank = rank.rank;
    row.projected_end_ms = rank.end_us / 1e3;
    row.measured_end_ms = median(walls);
    row.end_error = relative_error(row.projected_end_ms, row.measured_end_ms);
    row.projected_wait_ms = rank.wait_us / 1e3;
    row.measured_wait_ms = median(waits);
    check.ranks.push_back(row);
  }
  return check;
}

std::string format_gang_check(const GangCheck& check) {
  std::string out = fmt::format("projection (link {}) against the gang: TTFT projected {:.2f} ms, measured {:.2f} ms, "
                                "error {:+.2f}%\n",
                                check.link, check.projected_ttft_ms, check.measured_ttft_ms, 100 * check.ttft_error);
  out += fmt::format("  {:>5}  {:>12}  {:>12}  {:>8}  {:>12}  {:>12}\n", "rank", "end proj ms", "end meas ms",
                     "error", "wait proj ms", "wait meas ms");
  for (const GangCheckRank& rank : check.ranks)
    out += fmt::format("  {:>5}  {:>12.2f}  {:>12.2f}  {:>+7.2f}%  {:>12.2f}  {:>12.2f}\n", rank.rank,
                       rank.projected_end_ms, rank.measured_end_ms, 100 * rank.end_error, rank.projected_wait_ms,
                       rank.measured_wait_ms);
  return out;
}

}  // namespace pb
