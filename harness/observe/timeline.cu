#include "timeline.h"

#include <nvtx3/nvToolsExt.h>

#include <functional>

#include "activity_spans.h"
#include "check.h"
#include "cupti_timing.h"
#include "debug_delay.h"

namespace pb {

namespace {

nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("prefill-bench");
  return d;
}

// One colour per family name, stable across runs.
uint32_t family_colour(const char* family) {
  const uint32_t h = uint32_t(std::hash<std::string>{}(family));
  return 0xff000000u | (0x404040u + (h & 0x7f7f7fu));
}

void nvtx_push(const std::string& name, const char* family) {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.colorType = NVTX_COLOR_ARGB;
  a.color = family_colour(family);
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name.c_str();
  nvtxDomainRangePushEx(nvtx_domain(), &a);
}

}  // namespace

Timeline::Timeline(cudaStream_t stream, bool timed) : stream_(stream), timed_(timed) {}

Timeline::~Timeline() {
  for (cudaEvent_t e : events_) PB_CUDA_NOTHROW(cudaEventDestroy(e));
}

cudaEvent_t Timeline::event(size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e;
    PB_CUDA(cudaEventCreate(&e));
    events_.push_back(e);
  }
  return events_[i];
}

void Timeline::launch(const char* family, const std::string& kernel, const std::function<void()>& work) {
  PB_CHECK(!in_launch_, "Timeline: launch '" + kernel + "' inside another launch");
  const size_t i = pending_.size();
  const bool events = timed_ && !activity_, cupti = timed_ && activity_;
  if (events) PB_CUDA(cudaEventRecord(event(2 * i), stream_));
  if (cupti) activity_->enter(first_span_ + i);
  in_launch_ = true;
  bells_.clear();
  if (nvtx_) nvtx_push(nvtx_label_ + " L" + std::to_string(layer_) + " " + kernel, family);
  work();
  if (nvtx_) nvtxDomainRangePop(nvtx_domain());
  in_launch_ = false;
  if (delay_us_ > 0 && family == delay_family_) gpu_delay(delay_us_, stream_);
  if (cupti) activity_->leave();
  if (events) PB_CUDA(cudaEventRecord(event(2 * i + 1), stream_));
  TimedLaunch l;
  l.layer = layer_;
  l.family = family;
  l.kernel = kernel;
  l.bells = std::move(bells_);
  pending_.push_back(std::move(l));
}

void Timeline::note_bell(const BellNote& bell) {
  PB_CHECK(in_launch_, "Timeline: a doorbell outside a launch");
  bells_.push_back(bell);
}

std::vector<TimedLaunch> Timeline::collect() {
  PB_CUDA(cudaStreamSynchronize(stream_));
  if (timed_ && activity_) {
    std::vector<ApiCorrelation> calls;
    std::vector<GpuActivity> activities;
    activity_->drain(calls, activities);
    const std::vector<SpanTime> times = span_times(first_span_, pending_.size(), calls, activities);
    for (size_t i = 0; i < pending_.size(); ++i) {
      pending_[i].ms = times[i].ms;
      pending_[i].start_ms = times[i].start_ms;
    }
  } else if (timed_) {
    for (size_t i = 0; i < pending_.size(); ++i) {
      float ms = 0;
      PB_CUDA(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
      pending_[i].ms = ms;
      float start = 0;
      PB_CUDA(cudaEventElapsedTime(&start, events_[0], events_[2 * i]));
      pending_[i].start_ms = start;
    }
  }
  first_span_ += pending_.size();
  std::vector<TimedLaunch> out;
  out.swap(pending_);
  return out;
}

}  // namespace pb
