// What the CUTLASS expert engines (moe_gemm_cutlass.cu, moe_gemm_fp8_cutlass.cu)
// share around their one kernel each: the engine's state (its staging ring,
// grouped_staging.h, the device's hardware info and the CUTLASS adapter), the
// offsets of a slot's per-problem arrays, each problem's row strides as CuTe
// strides, the sourceless epilogue (D = the accumulator), and the
// can_implement -> initialize -> run sequence on a staged slot, its errors
// naming the engine. Only those two translation units include it, after their
// CUTLASS headers; each still instantiates its own kernel alone.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "check.h"
#include "grouped_staging.h"

#include "cutlass/cutlass.h"
#include "cutlass/kernel_hardware_info.h"

namespace pb::cutlass_grouped {

// Staging slots in the ring: a launch may be queued while the host fills the next.
constexpr int kSlots = 4;

// P-long arrays laid one after another in a slot's block, each 16-byte aligned.
class ArrayOffsets {
 public:
  explicit ArrayOffsets(size_t problems) : problems_(problems) {}
  // The offset of the next array, of elements `element_bytes` wide.
  size_t next(size_t element_bytes) {
    const size_t at = end_;
    end_ = (end_ + problems_ * element_bytes + 15) / 16 * 16;
    return at;
  }
  size_t bytes() const { return end_; }

 private:
  size_t problems_;
  size_t end_ = 0;
};

// An engine's state: `Layout(problems)` gives the slot's offsets and `bytes`.
template <class Gemm, class Layout>
struct Engine {
  int max_problems;
  Layout layout;
  GroupedStaging staging;
  cutlass::KernelHardwareInfo hw;
  Gemm gemm;

  explicit Engine(int problems)
      : max_problems(problems), layout(size_t(problems)), staging(layout.bytes, kSlots) {
    PB_CUDA(cudaGetDevice(&hw.device_id));
    PB_CUDA(cudaDeviceGetAttribute(&hw.sm_count, cudaDevAttrMultiProcessorCount, hw.device_id));
  }
};

// Problem i's strides: A, B and D contiguous along their second mode, their
// row strides lda, ldb and ldd along the first.
template <class StrideA, class StrideB, class StrideD>
void row_strides(StrideA* sa, StrideB* sb, StrideD* sd, int i, int64_t lda, int64_t ldb, int64_t ldd) {
  StrideA a{};
  cute::get<0>(a) = lda;
  StrideB b{};
  cute::get<0>(b) = ldb;
  StrideD d{};
  cute::get<0>(d) = ldd;
  sa[i] = a;
  sb[i] = b;
  sd[i] = d;
}

// D = the accumulator (alpha 1, beta 0, no C), D's pointers and strides on the device.
template <class Arguments, class ElementD, class StrideD>
void sourceless_epilogue(Arguments& args, ElementD** d, StrideD* dd) {
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  args.epilogue.ptr_C = nullptr;
  args.epilogue.dC = nullptr;
  args.epilogue.ptr_D = d;
  args.epilogue.dD = dd;
}

// Checks, initializes and launches `gemm` on `args`, whose arrays `slot`
// holds, then marks the slot in use; errors name `engine` and CUTLASS's status.
template <class Gemm>
void launch(Gemm& gemm, const typename Gemm::Arguments& args, GroupedStaging::Slot& slot, const std::string& engine,
            cudaStream_t stream) {
  const cutlass::Status ok = gemm.can_implement(args);
  PB_CHECK(ok == cutlass::Status::kSuccess, engine + ": can_implement refused: " + cutlassGetStatusString(ok));
  cutlass::Status st = gemm.initialize(args, GroupedStaging::workspace(slot, Gemm::get_workspace_size(args)), stream);
  PB_CHECK(st == cutlass::Status::kSuccess, engine + ": initialize failed: " + cutlassGetStatusString(st));
  st = gemm.run(stream);
  PB_CHECK(st == cutlass::Status::kSuccess, engine + ": launch failed: " + cutlassGetStatusString(st));
  PB_CUDA(cudaGetLastError());
  GroupedStaging::launched(slot, stream);
}

}  // namespace pb::cutlass_grouped
