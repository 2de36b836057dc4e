// The cutlass engine's one kernel (moe_gemm_cutlass.h): a CUTLASS 3.x Hopper
// ptr-array grouped GEMM built from the collective builders, the structure of
// CUTLASS's example 57 (Hopper grouped GEMM) with bf16 operands, f32
// accumulate, a sourceless bf16 epilogue and this project's own staging.
//
// CuTe naming: problem (M, N, K) = (an expert's rows, weight rows of a band,
// reduction). A = activations [M, K] row-major (K contiguous), B = weights
// [N, K] (K contiguous: CUTLASS's "column-major B"), D = [M, N] row-major.
// Both operands K-major: the layout wgmma reads without transposes.
#include "moe_gemm_cutlass.h"

#include <string>
#include <vector>

#include "check.h"
#include "grouped_staging.h"
#include "launch.h"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"

#include "cutlass_grouped.cuh"

#if !defined(CUTLASS_ARCH_MMA_MODIFIABLE_TMA_SM90_SUPPORTED)
#error "moe_gemm_cutlass.cu needs sm_90a and CUDA 12.3+ (ptr-array TMA); cmake/cutlass.cmake compiles it for 90a"
#endif

namespace pb {

namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per problem
using Element = cutlass::bfloat16_t;     // A, B and D
using Accumulator = float;
using LayoutA = cutlass::layout::RowMajor;     // activations [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // weights [N, K], K contiguous
using LayoutD = cutlass::layout::RowMajor;     // output [M, N]
constexpr int kAlign = 128 / cutlass::sizeof_bits<Element>::value;  // 8 elements = 16 bytes (TMA)

using TileShape = Shape<_128, _256, _64>;
using ClusterShape = Shape<_1, _2, _1>;
using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, Accumulator,
    void, LayoutD*, kAlign,      // no source (beta 0)
    Element, LayoutD*, kAlign,   // D
    EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<Element, Accumulator, void, Accumulator>>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlign, Element, LayoutB*, kAlign,
    Accumulator, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    MainloopSchedule>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

using Shape3 = typename ProblemShape::UnderlyingProblemShape;
using StrideA = typename Kernel::InternalStrideA;
using StrideB = typename Kernel::InternalStrideB;
using StrideD = typename Kernel::InternalStrideD;
static_assert(cute::is_static_v<decltype(get<1>(StrideA{}))> && cute::is_static_v<decltype(get<1>(StrideB{}))> &&
                  cute::is_static_v<decltype(get<1>(StrideD{}))>,
              "moe_gemm_cutlass: A, B and D must be contiguous along their second mode (K, K, N)");

// One slot's arrays, each P long, in one pinned block mirrored on the device.
struct Layout {
  size_t shapes, a, b, d, sa, sb, sd, bytes;
  explicit Layout(size_t P) {
    cutlass_grouped::ArrayOffsets o(P);
    shapes = o.next(sizeof(Shape3));
    a = o.next(sizeof(void*));
    b = o.next(sizeof(void*));
    d = o.next(sizeof(void*));
    sa = o.next(sizeof(StrideA));
    sb = o.next(sizeof(StrideB));
    sd = o.next(sizeof(StrideD));
    bytes = o.bytes();
  }
};

}  // namespace

struct CutlassGroupedGemm::Impl : cutlass_grouped::Engine<Gemm, Layout> {
  using Engine::Engine;
};

bool cutlass_grouped_device_ok() { return sm90_device(); }

CutlassGroupedGemm::CutlassGroupedGemm(int max_problems) {
  PB_CHECK(max_problems >= 1, "CutlassGroupedGemm: max_problems must be positive");
  impl_ = std::make_unique<Impl>(max_problems);
}

CutlassGroupedGemm::~CutlassGroupedGemm() = default;

void CutlassGroupedGemm::run(int problems, const int32_t* m, int64_t n, int64_t k, const __nv_bfloat16* const* a,
                             int64_t lda, const __nv_bfloat16* const* b, int64_t ldb, __nv_bfloat16* const* d,
                             int64_t ldd, cudaStream_t stream) {
  Impl& im = *impl_;
  PB_CHECK(problems >= 1 && problems <= im.max_problems,
           "moe_gemm cutlass: problems must be 1 .. " + std::to_string(im.max_problems));
  PB_CHECK(n >= 1 && k >= 1 && n <= INT32_MAX && k <= INT32_MAX, "moe_gemm cutlass: n, k must be 1 .. 2^31-1");
  PB_CHECK(n % kAlign == 0 && k % kAlign == 0 && lda % kAlign == 0 && ldb % kAlign == 0 && ldd % kAlign == 0,
           "moe_gemm cutlass: n, k and the row strides must be multiples of 8 elements (16-byte TMA alignment)");
  PB_CHECK(lda >= k && ldb >= k && ldd >= n, "moe_gemm cutlass: a row stride is below the row length");
  for (int i = 0; i < problems; ++i) {
    PB_CHECK(m[i] >= 1, "moe_gemm cutlass: problem " + std::to_string(i) + " has no rows");
    PB_CHECK(aligned16(a[i]) && aligned16(b[i]) && aligned16(d[i]),
             "moe_gemm cutlass: problem " + std::to_string(i) + " has an operand not 16-byte aligned");
  }

  GroupedStaging::Slot& slot = im.staging.take();

  const Layout& L = im.layout;
  auto* shapes = reinterpret_cast<Shape3*>(slot.host + L.shapes);
  auto* pa = reinterpret_cast<const Element**>(slot.host + L.a);
  auto* pb = reinterpret_cast<const Element**>(slot.host + L.b);
  auto* pd = reinterpret_cast<Element**>(slot.host + L.d);
  auto* sa = reinterpret_cast<StrideA*>(slot.host + L.sa);
  auto* sb = reinterpret_cast<StrideB*>(slot.host + L.sb);
  auto* sd = reinterpret_cast<StrideD*>(slot.host + L.sd);
  for (int i = 0; i < problems; ++i) {
    shapes[i] = Shape3{int(m[i]), int(n), int(k)};
    pa[i] = reinterpret_cast<const Element*>(a[i]);
    pb[i] = reinterpret_cast<const Element*>(b[i]);
    pd[i] = reinterpret_cast<Element*>(d[i]);
    cutlass_grouped::row_strides(sa, sb, sd, i, lda, ldb, ldd);
  }
  im.staging.upload(slot, stream);

  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {problems, reinterpret_cast<Shape3*>(slot.device + L.shapes), shapes};
  args.mainloop = {reinterpret_cast<const Element**>(slot.device + L.a),
                   reinterpret_cast<StrideA*>(slot.device + L.sa),
                   reinterpret_cast<const Element**>(slot.device + L.b),
                   reinterpret_cast<StrideB*>(slot.device + L.sb)};
  cutlass_grouped::sourceless_epilogue(args, reinterpret_cast<Element**>(slot.device + L.d),
                                       reinterpret_cast<StrideD*>(slot.device + L.sd));
  args.hw_info = im.hw;
  cutlass_grouped::launch(im.gemm, args, slot, "moe_gemm cutlass", stream);
}

}  // namespace pb
