// The measured superstep's span recorder: every launch of a block goes
// through Timeline::launch with the family and kernel name `plan` gives it
// (harness/analytic/plan.cpp), between two CUDA events on the block's stream, so
// the measured launch list can be checked against the plan's, name by name.
//
//   Timeline tl(stream);
//   tl.set_layer(3);
//   tl.launch("land", "land.q_b", [&] { land(...); });
//   ... tl.collect() -> the launches since the last collect, in order, with ms.
//
// Untimed (timed = false), launch() only runs the lambda and records the names:
// verification runs and the plan-equality test use that.
//
// Timing (scenario key timing): events (default) puts a CUDA event before and
// after every span; cupti (set_activity) enqueues nothing between launches and
// times a span from CUPTI's records of the GPU work its CUDA calls launched,
// on any stream: its first kernel's (memcpy's, memset's) start to its last
// one's end (cupti_timing.h, activity_spans.h). A span that launched no GPU
// work takes 0 ms under cupti. Either way collect() reports ms and start_ms.
//
// NVTX: every launch is also an NVTX range in the "prefill-bench" domain,
// named "<label> L<layer> <kernel>" (label: e.g. "rank 3 all rep 2", set by the
// command), coloured by family, so `nsys profile` shows the superstep by name.
// Without a tool attached an NVTX call is a branch on a null pointer;
// set_nvtx(false) (scenario key nvtx: false) skips even that.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pb {

class KernelActivity;

// A doorbell a launch rang or waited on (docs/design.md §3): flag is the index
// in the receiver's doorbell array (doorbell_index), so a wait of rank r on
// (flag, value) is met by the ring of its sender into r's flag with a value >= it.
struct BellNote {
  bool ring = false;  // else a wait
  int peer = 0;       // ring: the receiver; wait: the sender
  int flag = 0;
  uint64_t value = 0;
};

struct TimedLaunch {
  int32_t layer = -1;
  std::string family;
  std::string kernel;
  double ms = 0;        // the span's time (events: between its two; cupti: its GPU work's); 0 when untimed
  double start_ms = 0;  // its start after the first launch's since the last collect(); 0 untimed
  int32_t stream = 0;  // the rank's stream it ran on (0: the work stream)
  std::vector<BellNote> bells;
};

class Timeline {
 public:
  explicit Timeline(cudaStream_t stream, bool timed = true);
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  cudaStream_t stream() const { return stream_; }
  bool timed() const { return timed_; }
  void set_layer(int32_t layer) { layer_ = layer; }
  // Test-only: every launch of `family` is followed, inside its span, by a
  // GPU spin of `us` microseconds (scenario debug.delay_family / delay_us).
  void set_delay(const std::string& family, double us) {
    delay_family_ = family;
    delay_us_ = us;
  }
  int32_t layer() const { return layer_; }
  void set_nvtx(bool on) { nvtx_ = on; }
  void set_nvtx_label(const std::string& label) { nvtx_label_ = label; }
  // timing: cupti: spans timed from `activity`'s records; null (the default): CUDA events.
  // Set between collects; the activity outlives the timeline's use of it.
  void set_activity(KernelActivity* activity) { activity_ = activity; }

  // Enqueues `work` (launches on stream()) between two events named family / kernel.
  void launch(const char* family, const std::string& kernel, const std::function<void()>& work);
  // Inside a launch's work: a doorbell it rings or waits on (the blocks' fabric calls).
  void note_bell(const BellNote& bell);
  // Waits for the stream; returns the launches since the last collect(), in order.
  std::vector<TimedLaunch> collect();
  size_t pending() const { return pending_.size(); }

 private:
  cudaEvent_t event(size_t i);
  cudaStream_t stream_;
  bool timed_;
  int32_t layer_ = -1;
  std::string delay_family_;
  double delay_us_ = 0;
  std::vector<cudaEvent_t> events_;  // pool: launch i uses events 2i, 2i + 1
  std::vector<TimedLaunch> pending_;
  bool in_launch_ = false;
  bool nvtx_ = true;
  std::string nvtx_label_;
  std::vector<BellNote> bells_;  // the launch in progress's
  KernelActivity* activity_ = nullptr;
  uint64_t first_span_ = 0;  // the CUPTI span id of pending_[0]: ids never repeat within a process's timeline
};

}  // namespace pb
