// The FP8 expert GEMM's one kernel (moe_gemm_fp8_cutlass.h): a CUTLASS 4.2
// Hopper ptr-array grouped GEMM with blockwise scaling, built from the
// collective builders in the shape of CUTLASS's example 68 (Hopper FP8 grouped
// GEMM with blockwise scaling), with K-major scales, a sourceless bf16 epilogue
// and this project's own staging and contract checks.
//
// CuTe naming: problem (M, N, K) = (an expert's rows, weight rows of a band,
// reduction). A = activations [M, K] row-major (K contiguous), B = weights
// [N, K] (K contiguous: CUTLASS's "column-major B"), D = [M, N] row-major.
// SFA ((1, M), (128, K / 128)) and SFB ((128, N / 128), (128, K / 128)), both
// K-major: the scale layouts of the header.
#include "moe_gemm_fp8_cutlass.h"

#include <string>
#include <vector>

#include "check.h"
#include "grouped_staging.h"
#include "launch.h"

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
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
#error "moe_gemm_fp8_cutlass.cu needs sm_90a and CUDA 12.3+ (ptr-array TMA); cmake/cutlass.cmake compiles it for 90a"
#endif

namespace pb {

namespace {

using namespace cute;

using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int, int, int>>;  // (M, N, K) per problem
using ElementAB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using Accumulator = float;  // also the scales' type (the collective requires it)
using LayoutA = cutlass::layout::RowMajor;     // activations [M, K]
using LayoutB = cutlass::layout::ColumnMajor;  // weights [N, K], K contiguous
using LayoutD = cutlass::layout::RowMajor;     // output [M, N]
constexpr int kAlignAB = 128 / cutlass::sizeof_bits<ElementAB>::value;  // 16 elements = 16 bytes (TMA)
constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;    // 8 elements = 16 bytes (TMA)

// DeepSeek-V3 granularity: A 1 x 128, B 128 x 128; both scale arrays K-major.
using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, int(kFp8ScaleBlock), int(kFp8ScaleBlock),
                                                              cute::GMMA::Major::K, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

using TileShape = Shape<_128, _128, _128>;
using ClusterShape = Shape<_1, _2, _1>;
using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
static_assert(size<2>(TileShape{}) == kFp8ScaleBlock,
              "moe_gemm_fp8_cutlass: one K tile must be one scale block (the contract's k % 128 == 0)");
static_assert(size<1>(TileShape{}) % kFp8ScaleBlock == 0,
              "moe_gemm_fp8_cutlass: the N tile must hold whole 128-row SFB blocks");

using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, Accumulator, Accumulator,
    void, LayoutD*, kAlignD,      // no source (beta 0)
    ElementD, LayoutD*, kAlignD,  // D
    EpilogueSchedule,
    cutlass::epilogue::fusion::LinearCombination<ElementD, Accumulator, void, Accumulator>>::CollectiveOp;

using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    ElementAB, cute::tuple<LayoutA*, LayoutSFA*>, kAlignAB,
    ElementAB, cute::tuple<LayoutB*, LayoutSFB*>, kAlignAB,
    Accumulator, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    MainloopSchedule>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

using Shape3 = typename ProblemShape::UnderlyingProblemShape;
using StrideA = typename Kernel::InternalStrideA;
using StrideB = typename Kernel::InternalStrideB;
using StrideD = typename Kernel::InternalStrideD;
using InternalLayoutSFA = typename Mainloop::InternalLayoutSFA;
using InternalLayoutSFB = typename Mainloop::InternalLayoutSFB;
static_assert(cute::is_static_v<decltype(get<1>(StrideA{}))> && cute::is_static_v<decltype(get<1>(StrideB{}))> &&
                  cute::is_static_v<decltype(get<1>(StrideD{}))>,
              "moe_gemm_fp8_cutlass: A, B and D must be contiguous along their second mode (K, K, N)");
static_assert(!Mainloop::MMajorSFA && !Mainloop::NMajorSFB, "moe_gemm_fp8_cutlass: the scales must be K-major");
static_assert(Mainloop::ScaleGranularityM == 1 && Mainloop::ScaleGranularityN == kFp8ScaleBlock &&
                  Mainloop::ScaleGranularityK == kFp8ScaleBlock,
              "moe_gemm_fp8_cutlass: the scale granularity must be 1 x 128 (A) and 128 x 128 (B)");

// One slot's arrays, each P long, in one pinned block mirrored on the device.
struct Layout {
  size_t shapes, a, b, d, sfa, sfb, sa, sb, sd, lsfa, lsfb, bytes;
  explicit Layout(size_t P) {
    cutlass_grouped::ArrayOffsets o(P);
    shapes = o.next(sizeof(Shape3));
    a = o.next(sizeof(void*));
    b = o.next(sizeof(void*));
    d = o.next(sizeof(void*));
    sfa = o.next(sizeof(void*));
    sfb = o.next(sizeof(void*));
    sa = o.next(sizeof(StrideA));
    sb = o.next(sizeof(StrideB));
    sd = o.next(sizeof(StrideD));
    lsfa = o.next(sizeof(InternalLayoutSFA));
    lsfb = o.next(sizeof(InternalLayoutSFB));
    bytes = o.bytes();
  }
};

std::string problem_str(int i) { return "problem " + std::to_string(i); }

}  // namespace

struct CutlassFp8GroupedGemm::Impl : cutlass_grouped::Engine<Gemm, Layout> {
  using Engine::Engine;
};

bool cutlass_fp8_grouped_device_ok() { return sm90_device(); }

CutlassFp8GroupedGemm::CutlassFp8GroupedGemm(int max_problems) {
  PB_CHECK(max_problems >= 1,
           "CutlassFp8GroupedGemm: max_problems must be positive, got " + std::to_string(max_problems));
  impl_ = std::make_unique<Impl>(max_problems);
}

CutlassFp8GroupedGemm::~CutlassFp8GroupedGemm() = default;

void CutlassFp8GroupedGemm::run(int problems, const int32_t* m, int64_t n, int64_t k, const __nv_fp8_e4m3* const* a,
                                int64_t lda, const float* const* sfa, int64_t ld_sfa, const __nv_fp8_e4m3* const* b,
                                int64_t ldb, const float* const* sfb, int64_t ld_sfb, __nv_bfloat16* const* d,
                                int64_t ldd, cudaStream_t stream) {
  Impl& im = *impl_;
  PB_CHECK(problems >= 1 && problems <= im.max_problems, "moe_gemm fp8 cutlass: problems must be 1 .. " +
                                                             std::to_string(im.max_problems) + ", got " +
                                                             std::to_string(problems));
  PB_CHECK(k >= kFp8ScaleBlock && k % kFp8ScaleBlock == 0 && k <= INT32_MAX,
           "moe_gemm fp8 cutlass: k must be a positive multiple of 128 (the scale block) below 2^31, got k = " + std::to_string(k));
  PB_CHECK(n >= kFp8ScaleBlock && n % kFp8ScaleBlock == 0 && n <= INT32_MAX,
           "moe_gemm fp8 cutlass: n must be a positive multiple of 128 (the weight scale block) below 2^31, got n = " +
               std::to_string(n));
  PB_CHECK(lda % kAlignAB == 0 && ldb % kAlignAB == 0,
           "moe_gemm fp8 cutlass: lda and ldb must be multiples of 16 elements (16-byte TMA rows), got lda = " +
               std::to_string(lda) + ", ldb = " + std::to_string(ldb));
  PB_CHECK(ldd % kAlignD == 0, "moe_gemm fp8 cutlass: ldd must be a multiple of 8 elements (16-byte TMA rows), got " +
                                   std::to_string(ldd));
  PB_CHECK(lda >= k && ldb >= k && ldd >= n,
           "moe_gemm fp8 cutlass: a row stride is below the row length: lda = " + std::to_string(lda) + ", ldb = " +
               std::to_string(ldb) + " (k = " + std::to_string(k) + "), ldd = " + std::to_string(ldd) + " (n = " +
               std::to_string(n) + ")");
  const int64_t kb = k / kFp8ScaleBlock;
  PB_CHECK(ld_sfa == kb && ld_sfb == kb,
           "moe_gemm fp8 cutlass: ld_sfa and ld_sfb must equal k / 128 = " + std::to_string(kb) +
               " (CUTLASS 4.2's grouped blockwise kernel assumes compact K-major scales), got ld_sfa = " +
               std::to_string(ld_sfa) + ", ld_sfb = " + std::to_string(ld_sfb));
  for (int i = 0; i < problems; ++i) {
    PB_CHECK(m[i] >= 1, "moe_gemm fp8 cutlass: " + problem_str(i) + " has m = " + std::to_string(m[i]) +
                            " (empty experts get no problem)");
    PB_CHECK(aligned16(a[i]) && aligned16(b[i]) && aligned16(d[i]),
             "moe_gemm fp8 cutlass: " + problem_str(i) + " has an operand (a, b or d) not 16-byte aligned");
    PB_CHECK(sfa[i] != nullptr && sfb[i] != nullptr && aligned_to(sfa[i], 4) && aligned_to(sfb[i], 4),
             "moe_gemm fp8 cutlass: " + problem_str(i) + " has a scale pointer null or not 4-byte aligned");
  }

  GroupedStaging::Slot& slot = im.staging.take();

  const Layout& L = im.layout;
  auto* shapes = reinterpret_cast<Shape3*>(slot.host + L.shapes);
  auto* pa = reinterpret_cast<const ElementAB**>(slot.host + L.a);
  auto* pb = reinterpret_cast<const ElementAB**>(slot.host + L.b);
  auto* pd = reinterpret_cast<ElementD**>(slot.host + L.d);
  auto* psfa = reinterpret_cast<const float**>(slot.host + L.sfa);
  auto* psfb = reinterpret_cast<const float**>(slot.host + L.sfb);
  auto* sa = reinterpret_cast<StrideA*>(slot.host + L.sa);
  auto* sb = reinterpret_cast<StrideB*>(slot.host + L.sb);
  auto* sd = reinterpret_cast<StrideD*>(slot.host + L.sd);
  auto* lsfa = reinterpret_cast<InternalLayoutSFA*>(slot.host + L.lsfa);
  auto* lsfb = reinterpret_cast<InternalLayoutSFB*>(slot.host + L.lsfb);
  for (int i = 0; i < problems; ++i) {
    shapes[i] = Shape3{int(m[i]), int(n), int(k)};
    pa[i] = reinterpret_cast<const ElementAB*>(a[i]);
    pb[i] = reinterpret_cast<const ElementAB*>(b[i]);
    pd[i] = reinterpret_cast<ElementD*>(d[i]);
    psfa[i] = sfa[i];
    psfb[i] = sfb[i];
    cutlass_grouped::row_strides(sa, sb, sd, i, lda, ldb, ldd);
    // The kernel rebuilds these on the device from (M, N, K) (header); they are
    // passed as the API asks, equal to what it rebuilds (ld_sfa == ld_sfb == k / 128).
    lsfa[i] = ScaleConfig::tile_atom_to_shape_SFA(make_shape(int(m[i]), int(n), int(k), 1));
    lsfb[i] = ScaleConfig::tile_atom_to_shape_SFB(make_shape(int(m[i]), int(n), int(k), 1));
  }
  im.staging.upload(slot, stream);

  typename Gemm::Arguments args;
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = {problems, reinterpret_cast<Shape3*>(slot.device + L.shapes), shapes};
  args.mainloop.ptr_A = reinterpret_cast<const ElementAB**>(slot.device + L.a);
  args.mainloop.dA = reinterpret_cast<StrideA*>(slot.device + L.sa);
  args.mainloop.ptr_B = reinterpret_cast<const ElementAB**>(slot.device + L.b);
  args.mainloop.dB = reinterpret_cast<StrideB*>(slot.device + L.sb);
  args.mainloop.ptr_SFA = reinterpret_cast<const float**>(slot.device + L.sfa);
  args.mainloop.layout_SFA = reinterpret_cast<InternalLayoutSFA*>(slot.device + L.lsfa);
  args.mainloop.ptr_SFB = reinterpret_cast<const float**>(slot.device + L.sfb);
  args.mainloop.layout_SFB = reinterpret_cast<InternalLayoutSFB*>(slot.device + L.lsfb);
  cutlass_grouped::sourceless_epilogue(args, reinterpret_cast<ElementD**>(slot.device + L.d),
                                       reinterpret_cast<StrideD*>(slot.device + L.sd));
  args.hw_info = im.hw;
  cutlass_grouped::launch(im.gemm, args, slot, "moe_gemm fp8 cutlass", stream);
}

}  // namespace pb
