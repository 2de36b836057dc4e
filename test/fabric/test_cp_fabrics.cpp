// The MLA and KDA blocks across the CP lane over NCCL (fabric.h), on ranks
// that may share one GPU: each rank runs the same calls over fabric ipc and
// then over the fabric under test, and every call's output rows must be equal
// bit for bit (the transport moves bytes; the kernels see the same bytes):
//   - fabric nccl, every rank its own emulated host (CP2, CP4);
//   - fabric auto, 2 emulated hosts x cp / 2 ranks (CP4): IPC inside an
//     emulated host, NCCL across.
// MLA calls switch schedules (prefix, stripe, balance, cut 4) so both return
// slabs, the helped windows (balance's moved halves among them: the tests run
// at even cp) and the acknowledgements of earlier calls are crossed;
// KDA calls cover both halo and package parities. Both blocks also run calls
// with cut 8 (overlap) on among the plain ones: their sends and waits come in
// another order. Both layouts: contiguous,
// and zigzag (keys of part 0 only for k < rank; two KDA pieces a rank, halos
// and packages in their slots, schedule.h). Tiny widths with uneven segments
// (zigzag: odd chunks), and K3 widths at short length.
//
// NCCL reads NCCL_HOSTID once per process, so each fabric under test runs in a
// process of its own: CTest selects the test case (--test-case=*fabric nccl*
// or *fabric auto*). The ranks run concurrently, so CTest gives them
// CUDA_MODULE_LOADING=EAGER (fabric.h).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "fabric.h"
#include "fabric_plan.h"
#include "kda_block.h"
#include "mla_block.h"
#include "mpi_gpu_test.h"
#include "random_fill.h"

using namespace pb;

namespace {

using Bits = std::vector<uint16_t>;
using test::cuts_with;

Bits download(const __nv_bfloat16* p, int64_t n) {
  Bits out(static_cast<size_t>(n));
  PB_CUDA(cudaMemcpy(out.data(), p, out.size() * 2, cudaMemcpyDeviceToHost));
  return out;
}

// This rank's share of a seeded [context, hidden] input under a layout, in a
// bucket of `rows`, and the stream its calls run on.
struct Lane {
  int cp = 0, me = 0;
  Layout layout;
  std::vector<Segment> segs;
  int64_t rows = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer<__nv_bfloat16> input;
  Lane(const ModelShape& m, int64_t context, int64_t pad_rows, uint64_t seed, Layout layout)
      : cp(test_gang().size()), me(test_gang().rank()), layout(layout), segs(lane_segments(layout, context, cp)),
        rows(segs[0].len + pad_rows) {
    PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    DeviceBuffer<__nv_bfloat16> full(size_t(context * m.hidden));
    input = DeviceBuffer<__nv_bfloat16>(size_t(rows * m.hidden));
    fill_uniform_bf16(full.get(), context * m.hidden, seed, 1.0f, stream);
    fill_uniform_bf16(input.get(), rows * m.hidden, seed + 1, 1.0f, stream);  // rows >= T: anything
    test::copy_rank_rows(full.get(), input.get(), layout, context, cp, me, m.hidden, stream);
    PB_CUDA(cudaStreamSynchronize(stream));
  }
  ~Lane() { PB_CUDA_NOTHROW(cudaStreamDestroy(stream)); }
};

// The gang's sums of this rank's counters, so every rank checks the same numbers.
int64_t gang_sum(int64_t mine) {
  int64_t all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, test_gang().comm());
  return all;
}

// The calls of one block over one fabric: each call's output rows.
using Calls = std::function<std::vector<Bits>(Fabric& fab)>;

// call(seq, cuts) for seq 0, 1, ... over `order`, the fabric drained after
// each; read() gives the call's rows. Then every NCCL transfer settles.
std::vector<Bits> run_calls(Fabric& fab, Timeline& tl, const std::vector<CutSet>& order,
                            const std::function<void(int64_t, const CutSet&)>& call,
                            const std::function<std::vector<Bits>()>& read) {
  std::vector<Bits> out;
  int64_t seq = 0;
  for (const CutSet& cuts : order) {
    call(seq++, cuts);
    fab.drain();
    tl.collect();
    for (Bits& b : read()) out.push_back(std::move(b));
  }
  fab.settle_transfers();
  return out;
}

struct Traffic {
  int64_t ipc = 0, nccl = 0;
};

// Runs `calls` over fabric ipc, then over `plan`; each call must give the same bits.
Traffic check_against_ipc(const SlabLayout& shared, const FabricPlan& plan, const Calls& calls, const char* what) {
  const Gang& gang = test_gang();
  std::vector<Bits> ipc, other;
  {
    Fabric fab(gang, shared, 30.0);
    ipc = calls(fab);
    gang.barrier();  // no peer touches our slab any more
  }
  FabricStats st;
  {
    Fabric fab(gang, shared, 30.0, plan);
    other = calls(fab);
    st = fab.stats();
    gang.barrier();
  }
  REQUIRE(ipc.size() == other.size());
  for (size_t i = 0; i < ipc.size(); ++i) {
    CAPTURE(i);
    CHECK_MESSAGE(ipc[i] == other[i], what << ": call " << i << " over fabric " << plan.mode << " differs from ipc");
  }
  std::printf("[%s, rank %d, fabric %s] %lld NCCL messages in, %lld B; %lld IPC B; waits %.1f us IPC, %.1f us NCCL\n",
              what, gang.rank(), plan.mode.c_str(), (long long)st.nccl_messages_received,
              (long long)st.nccl_bytes_received, (long long)st.ipc_bytes(), st.ipc_wait_us, st.nccl_wait_us);
  return {gang_sum(st.ipc_bytes()), gang_sum(st.nccl_bytes_received)};
}

Traffic check_mla(const ModelShape& m, int64_t context, int64_t pad_rows, const FabricPlan& plan, Layout layout) {
  Lane lane(m, context, pad_rows, 5, layout);
  INFO("MLA, model " << m.preset << " cp " << lane.cp << " rank " << lane.me << " fabric " << plan.mode << " layout "
                     << layout_name(layout));
  const MlaWeights w(m, 77, lane.stream);
  const Blas blas;
  // Two prefix calls before the first stripe call, then back and forth, balance
  // among them (mla_block.h's acknowledgements), then overlap (cut 8: sends and
  // waits in another order) switched on and off among the three schedules.
  CutSet balance = cuts_with(true, true);
  balance.set(Cut::balance, true);
  const auto overlapped = [](CutSet c) {
    c.set(Cut::overlap, true);
    return c;
  };
  const std::vector<CutSet> order = {cuts_with(false, false), cuts_with(false, true), cuts_with(true, true),
                                     cuts_with(true, false),  cuts_with(false, false), cuts_with(true, true),
                                     balance,                 cuts_with(false, false), cuts_with(true, true),
                                     balance,                 balance,                 overlapped(balance),
                                     overlapped(cuts_with(true, true)), cuts_with(false, false),
                                     overlapped(cuts_with(false, false)), overlapped(balance), balance};
  const Calls calls = [&](Fabric& fab) {
    Timeline tl(lane.stream, false);
    tl.set_layer(1);
    MlaBlock block(m, w, {lane.me, lane.cp, lane.segs, lane.rows, &fab, false, layout, true}, FmhaEngine::native);
    return run_calls(
        fab, tl, order, [&](int64_t seq, const CutSet& cuts) { block.run(lane.input.get(), seq, cuts, tl, blas); },
        [&] { return std::vector<Bits>{download(block.attn_out(), block.live_rows() * m.hidden)}; });
  };
  const SlabLayout shared = slab_layout(lane.cp, lane.rows, int(m.heads), int(m.kv_lora), int(m.qk_rope),
                                        int(m.d_qk()), int(m.v_head), layout);
  return check_against_ipc(shared, plan, calls, ("MLA " + m.preset + " " + layout_name(layout)).c_str());
}

Traffic check_kda(const ModelShape& m, int64_t context, int64_t pad_rows, const FabricPlan& plan, Layout layout) {
  Lane lane(m, context, pad_rows, 8, layout);
  INFO("KDA, model " << m.preset << " cp " << lane.cp << " rank " << lane.me << " fabric " << plan.mode << " layout "
                     << layout_name(layout));
  const KdaWeights w(m, 91, lane.stream);
  const Blas blas;
  const CutSet plain = CutSet::all().without(Cut::overlap);
  const CutSet all_overlapped = CutSet::all();  // cut 8: the halo sent and waited for in another place
  const std::vector<CutSet> order = {CutSet::none(), plain, CutSet::none(), plain, all_overlapped,
                                     CutSet::none(), all_overlapped};
  const Calls calls = [&](Fabric& fab) {
    Timeline tl(lane.stream, false);
    tl.set_layer(2);
    KdaBlock block(m, w, {lane.me, lane.cp, lane.segs, lane.rows, &fab, layout});
    return run_calls(
        fab, tl, order, [&](int64_t seq, const CutSet& cuts) { block.run(lane.input.get(), seq, cuts, tl, blas); },
        [&] {
          return std::vector<Bits>{download(block.attn_out(), block.live_rows() * m.hidden),
                                   download(block.core_out(), block.live_rows() * m.kda_inner())};
        });
  };
  return check_against_ipc(model_slab_layout(m, lane.cp, lane.rows, layout), plan, calls,
                           ("KDA " + m.preset + " " + layout_name(layout)).c_str());
}

FabricPlan emulated(const std::string& mode, int hosts) {
  return plan_fabric(mode, gang_hosts(test_gang()), hosts, "test_cp_fabrics");
}

void check_blocks(const FabricPlan& plan, bool expect_ipc) {
  const int cp = test_gang().size();
  for (Layout layout : {Layout::contiguous, Layout::zigzag})
    for (const char* preset : {"tiny", "k3"}) {
      const ModelShape m = model_preset(preset);
      const bool tiny = std::string(preset) == "tiny", zigzag = layout == Layout::zigzag;
      // tiny: uneven segments; zigzag: 2cp odd chunks
      const int64_t context = tiny ? (zigzag ? 2 * cp * 51 : 203) : 256, pad = tiny ? 13 : 16;
      const Traffic mla = check_mla(m, context, pad, plan, layout);
      const Traffic kda = check_kda(m, context, pad, plan, layout);
      CHECK(mla.nccl > 0);
      CHECK(kda.nccl > 0);
      CHECK((kda.ipc > 0) == expect_ipc);
      if (!expect_ipc) CHECK(mla.ipc == 0);
    }
}

}  // namespace

TEST_CASE("MLA and KDA over fabric nccl (every rank its own emulated host) equal fabric ipc bit for bit") {
  const int cp = test_gang().size();
  REQUIRE(cp >= 2);
  const FabricPlan plan = emulated("nccl", cp);
  prepare_nccl_environment(plan, test_gang().rank(), /*serialized=*/false);
  check_blocks(plan, false);
}

TEST_CASE("MLA and KDA over fabric auto (2 emulated hosts) equal fabric ipc bit for bit") {
  const int cp = test_gang().size();
  REQUIRE(cp >= 4);
  REQUIRE(cp % 2 == 0);
  const FabricPlan plan = emulated("auto", 2);
  prepare_nccl_environment(plan, test_gang().rank(), /*serialized=*/false);
  check_blocks(plan, true);
}
