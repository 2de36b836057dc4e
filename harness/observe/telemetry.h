// GPU telemetry during a run: every ~20 ms a thread samples the GPU's SM and
// memory clocks, power, temperature and clock-event (throttle) reasons
// through NVML. NVML is loaded at run time from the driver's library
// (libnvidia-ml.so.1), so the build gains no dependency; without it the
// sampler is unavailable and says why, and the run carries on.
//
// Why: an H200 under sustained load sits at its 700 W cap with the SM clock
// between ~1.5 and 1.98 GHz (docs/lane.md), so a "regression" can be the
// GPU's power state. Each rep's clocks go into the results (rank_reps) and
// `compare` flags a rep whose clock sagged or that hit the power cap.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "results.h"

namespace pb {

class GpuTelemetry {
 public:
  // Samples CUDA device `device` every period_ms until destroyed.
  explicit GpuTelemetry(int device, int period_ms = 20);
  ~GpuTelemetry();
  GpuTelemetry(const GpuTelemetry&) = delete;
  GpuTelemetry& operator=(const GpuTelemetry&) = delete;

  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }  // when unavailable
  // Milliseconds on the samples' clock (steady, from the sampler's start).
  double now_ms() const;
  // The samples taken in [t0_ms, t1_ms], and all of them.
  std::vector<TelemetrySample> between(double t0_ms, double t1_ms) const;
  std::vector<TelemetrySample> all() const;

 private:
  void sample_loop(int period_ms);

  bool available_ = false;
  std::string why_not_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::chrono::steady_clock::time_point epoch_;
  std::atomic<bool> stop_{false};
  mutable std::mutex mutex_;
  std::vector<TelemetrySample> samples_;
  std::thread thread_;
};

// A rep's summary of its samples: the SM clock's median, the highest power,
// the fraction of samples under the software power cap. NaN without samples.
void summarize_clocks(const std::vector<TelemetrySample>& samples, RankRep& into);

}  // namespace pb
