// CUPTI's activity API as the timeline's clock (scenario key timing: cupti):
// CUPTI records every kernel's, memcpy's and memset's start and end on the GPU
// without anything enqueued between launches, and the external correlation id
// the timeline pushes around each span ties the records to their span
// (harness/analysis/activity_spans.h does the mapping).
//
// libcupti is loaded at run time (dlopen: libcupti.so.<CUDA major>, then the
// build's CUDA toolkit folders), so the build gains no link dependency. The
// library must be the version whose header the build used (its activity
// records' layout). Without it, constructing a KernelActivity throws an error
// naming what is missing.
//
// CUPTI's activity state is per process: one KernelActivity at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "activity_spans.h"

namespace pb {

class KernelActivity {
 public:
  // Loads libcupti, enables the kernel, memcpy, memset, CUDA API and external
  // correlation records. Throws pb::Error naming what is missing.
  KernelActivity();
  ~KernelActivity();
  KernelActivity(const KernelActivity&) = delete;
  KernelActivity& operator=(const KernelActivity&) = delete;

  // The calling thread's CUDA calls between enter(span) and leave() carry `span`.
  void enter(uint64_t span);
  void leave();
  // After the work is synchronized: flushes CUPTI's buffers and hands over
  // (and forgets) the records gathered since the last call. Throws when CUPTI
  // dropped records (its buffers overflowed).
  void drain(std::vector<ApiCorrelation>& calls, std::vector<GpuActivity>& activities);

  // "" when libcupti loads with every entry point used; else why not.
  static std::string unavailable_reason();
};

}  // namespace pb
