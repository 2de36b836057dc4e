#include "cupti_timing.h"

#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "check.h"
#include "runtime_library.h"

#ifndef PB_CUPTI_DIRS
#define PB_CUPTI_DIRS ""  // ':'-separated folders tried after the loader's path (CMakeLists.txt)
#endif

namespace pb {

namespace {

// The entry points used, by their C ABI (cupti_activity.h), resolved from the library.
struct CuptiApi {
  CUptiResult (*GetVersion)(uint32_t*) = nullptr;
  CUptiResult (*GetResultString)(CUptiResult, const char**) = nullptr;
  CUptiResult (*RegisterCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*Enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*Disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*FlushAll)(uint32_t) = nullptr;
  CUptiResult (*GetNextRecord)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*GetNumDroppedRecords)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*PushExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
  CUptiResult (*PopExternalCorrelationId)(CUpti_ExternalCorrelationKind, uint64_t*) = nullptr;
  std::string problem;  // empty when loaded
};

constexpr CUpti_ExternalCorrelationKind kSpanKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;
const CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                     CUPTI_ACTIVITY_KIND_MEMCPY2,           CUPTI_ACTIVITY_KIND_MEMSET,
                                     CUPTI_ACTIVITY_KIND_RUNTIME,           CUPTI_ACTIVITY_KIND_DRIVER,
                                     CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};

std::vector<std::string> library_candidates() {
  const std::string file = "libcupti.so." + std::to_string(CUPTI_API_VERSION / 10000);
  std::vector<std::string> names = {file, "libcupti.so"};
  std::stringstream dirs(PB_CUPTI_DIRS);
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty()) names.push_back(dir + "/" + file);
  return names;
}

CuptiApi load_cupti() {
  CuptiApi a;
  std::string tried;
  void* lib = open_first(library_candidates(), RTLD_NOW | RTLD_LOCAL, tried);
  if (!lib) {
    a.problem = "timing: cupti needs CUPTI's library from the CUDA toolkit, and none loaded (tried " + tried +
                "): add the folder holding libcupti.so to LD_LIBRARY_PATH, or use timing: events";
    return a;
  }
  std::string& p = a.problem;
  resolve(lib, "cuptiGetVersion", a.GetVersion, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiGetResultString", a.GetResultString, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityRegisterCallbacks", a.RegisterCallbacks, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityEnable", a.Enable, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityDisable", a.Disable, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityFlushAll", a.FlushAll, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityGetNextRecord", a.GetNextRecord, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityGetNumDroppedRecords", a.GetNumDroppedRecords, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityPushExternalCorrelationId", a.PushExternalCorrelationId, p, "CUPTI (timing: cupti)");
  resolve(lib, "cuptiActivityPopExternalCorrelationId", a.PopExternalCorrelationId, p, "CUPTI (timing: cupti)");
  if (!p.empty()) return a;
  uint32_t version = 0;
  if (a.GetVersion(&version) != CUPTI_SUCCESS || version != CUPTI_API_VERSION)
    p = "timing: cupti: the CUPTI library loaded has API version " + std::to_string(version) +
        ", the build's cupti.h " + std::to_string(CUPTI_API_VERSION) +
        " (the activity records' layout differs): put the matching toolkit's libcupti first on LD_LIBRARY_PATH, "
        "or use timing: events";
  return a;
}

const CuptiApi& cupti() {
  static const CuptiApi a = load_cupti();
  return a;
}

void check_cupti(CUptiResult rc, const char* what) {
  if (rc == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  if (cupti().GetResultString) cupti().GetResultString(rc, &text);
  throw_error(__FILE__, __LINE__,
              std::string("timing: cupti: ") + what + " failed: " + (text ? text : std::to_string(int(rc))));
}

// What the buffer callbacks gathered (CUPTI may call them from its own thread).
struct Gathered {
  std::mutex mutex;
  std::vector<ApiCorrelation> calls;
  std::vector<GpuActivity> activities;
  size_t dropped = 0;
};

Gathered& gathered() {
  static Gathered g;
  return g;
}

constexpr size_t kBufferBytes = size_t(8) << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

template <class Record>
GpuActivity activity(const CUpti_Activity* r) {
  const auto* x = reinterpret_cast<const Record*>(r);
  return {x->correlationId, x->start, x->end};
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  if (!buffer) return;
  std::vector<ApiCorrelation> calls;
  std::vector<GpuActivity> activities;
  CUpti_Activity* r = nullptr;
  while (valid > 0 && cupti().GetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    switch (r->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        activities.push_back(activity<CUpti_ActivityKernel10>(r));
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        activities.push_back(activity<CUpti_ActivityMemcpy6>(r));
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY2:
        activities.push_back(activity<CUpti_ActivityMemcpyPtoP4>(r));
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        activities.push_back(activity<CUpti_ActivityMemset4>(r));
        break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(r);
        if (x->externalKind == kSpanKind) calls.push_back({x->externalId, x->correlationId});
        break;
      }
      default:  // the CUDA API records: only there to carry the external correlation
        break;
    }
  }
  size_t dropped = 0;
  cupti().GetNumDroppedRecords(context, stream, &dropped);
  std::free(buffer);
  Gathered& g = gathered();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.calls.insert(g.calls.end(), calls.begin(), calls.end());
  g.activities.insert(g.activities.end(), activities.begin(), activities.end());
  g.dropped += dropped;
}

std::atomic<bool> g_active{false};

}  // namespace

std::string KernelActivity::unavailable_reason() { return cupti().problem; }

KernelActivity::KernelActivity() {
  const CuptiApi& a = cupti();
  PB_CHECK(a.problem.empty(), a.problem);
  PB_CHECK(!g_active.exchange(true), "timing: cupti: one KernelActivity at a time (CUPTI's activity state is per process)");
  try {
    check_cupti(a.RegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
    for (CUpti_ActivityKind k : kKinds) check_cupti(a.Enable(k), "cuptiActivityEnable");
  } catch (...) {
    for (CUpti_ActivityKind k : kKinds) a.Disable(k);
    g_active = false;
    throw;
  }
}

KernelActivity::~KernelActivity() {
  const CuptiApi& a = cupti();
  a.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  for (CUpti_ActivityKind k : kKinds) a.Disable(k);
  Gathered& g = gathered();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    g.calls.clear();
    g.activities.clear();
    g.dropped = 0;
  }
  g_active = false;
}

void KernelActivity::enter(uint64_t span) {
  check_cupti(cupti().PushExternalCorrelationId(kSpanKind, span), "cuptiActivityPushExternalCorrelationId");
}

void KernelActivity::leave() {
  check_cupti(cupti().PopExternalCorrelationId(kSpanKind, nullptr), "cuptiActivityPopExternalCorrelationId");
}

void KernelActivity::drain(std::vector<ApiCorrelation>& calls, std::vector<GpuActivity>& activities) {
  check_cupti(cupti().FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  Gathered& g = gathered();
  std::lock_guard<std::mutex> lock(g.mutex);
  PB_CHECK(g.dropped == 0, "timing: cupti: CUPTI dropped " + std::to_string(g.dropped) +
                               " activity records (its buffers overflowed); the spans' times would be incomplete");
  calls.swap(g.calls);
  activities.swap(g.activities);
  g.calls.clear();
  g.activities.clear();
}

}  // namespace pb
