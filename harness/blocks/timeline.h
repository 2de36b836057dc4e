// The measured superstep's span recorder: every launch of a block goes
// through Timeline::launch with the family and kernel name `plan` gives it
// (harness/core/plan.cpp), between two CUDA events on the block's stream, so
// the measured launch list can be checked against the plan's, name by name.
//
//   Timeline tl(stream);
//   tl.set_layer(3);
//   tl.launch("land", "land.q_b", [&] { land(...); });
//   ... tl.collect() -> the launches since the last collect, in order, with ms.
//
// Untimed (timed = false), launch() only runs the lambda and records the names:
// verification runs and the plan-equality test use that.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pb {

struct TimedLaunch {
  int32_t layer = -1;
  std::string family;
  std::string kernel;
  double ms = 0;  // between the launch's two events; 0 when untimed
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

  // Enqueues `work` (launches on stream()) between two events named family / kernel.
  void launch(const char* family, const std::string& kernel, const std::function<void()>& work);
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
};

}  // namespace pb
