// The CP lane's IPC fabric (harness/fabric.h) under mpirun -np 4: every rank
// maps every other rank's slab, and a ring of doorbells carries a pattern from
// rank r into rank r + 1's slab, region after region, with back-pressure
// ("consumed") flags in the other direction. Several ranks may share one GPU.
#include <doctest/doctest.h>

#include <cuda_runtime.h>  // the typed cudaMalloc overloads device_buffer.h uses

#include <cstdio>
#include <vector>

#include "device_buffer.h"
#include "fabric.h"
#include "mpi_gpu_test.h"

using namespace pb;

namespace {

// The words rank `sender` writes in round `round`: distinct per sender, round, index.
uint32_t pattern(int sender, int round, size_t i) {
  return (uint32_t(sender) << 28) ^ (uint32_t(round) << 20) ^ uint32_t(i * 2654435761u);
}
}  // namespace

TEST_CASE("every rank maps every peer's slab") {
  const Gang& gang = test_gang();
  Fabric fab(gang, slab_layout(gang.size(), 64, 4), 30.0);
  CHECK(fab.peer_base(gang.rank()) == fab.own_base());
  for (int r = 0; r < gang.size(); ++r) {
    CHECK(fab.peer_base(r) != nullptr);
    for (int s = 0; s < r; ++s) CHECK(fab.peer_base(r) != fab.peer_base(s));
  }
  for (int f = 0; f < fab.layout().n_doorbells(); ++f) CHECK(fab.doorbell(f) == 0);
  CHECK_THROWS(fab.peer_base(gang.size()));
  gang.barrier();
}

TEST_CASE("a ring of doorbells carries a pattern into the next rank's slab, region by region") {
  const Gang& gang = test_gang();
  const int cp = gang.size(), me = gang.rank();
  const int next = (me + 1) % cp, prev = (me + cp - 1) % cp;
  Fabric fab(gang, slab_layout(cp, 64, 4), 30.0);
  const SlabLayout& L = fab.layout();
  std::vector<Region> regions = {L.kv, L.q};
  for (int s = 0; s < 2 && L.slots >= 1; ++s) {  // return slots exist from cp 3 on
    regions.push_back(L.o[s][0]);
    regions.push_back(L.lse[s][0]);
  }
  int64_t max_bytes = 0;
  for (const Region& g : regions) max_bytes = std::max(max_bytes, g.bytes);
  DeviceBuffer<uint32_t> src(size_t(max_bytes / 4));
  uint32_t* got = nullptr;  // pinned: a D2H copy into pageable memory would block the host behind the wait
  REQUIRE(cudaMallocHost(&got, size_t(max_bytes)) == cudaSuccess);  // typed overload
  cudaStream_t stream;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);

  const int rounds = 2 * int(regions.size());
  int64_t sent = 0;
  for (int k = 0; k < rounds; ++k) {
    const Region& g = regions[k % regions.size()];
    const int window = k % int(regions.size());
    const size_t words = size_t(g.bytes / 4);
    std::vector<uint32_t> mine(size_t(max_bytes / 4));
    for (size_t i = 0; i < words; ++i) mine[i] = pattern(me, k, i);
    src.upload(mine);

    // Sender: the next rank must have consumed round k - 1 before we overwrite.
    if (k > 0)
      fab.wait(doorbell_index(cp, next, Bell::consumed), doorbell_value(k - 1, 0), stream,
               {k - 1, 0, "rank " + std::to_string(next) + " consumed the previous round"});
    fab.copy_to_peer(next, g.offset, src.get(), g.bytes, stream);
    fab.ring(next, doorbell_index(cp, me, Bell::window), doorbell_value(k, window), stream);
    sent += g.bytes;

    // Receiver: wait for the previous rank's pattern, read it, release the region.
    fab.wait(doorbell_index(cp, prev, Bell::window), doorbell_value(k, window), stream,
             {k, window, "pattern from rank " + std::to_string(prev)});
    REQUIRE(cudaMemcpyAsync(got, fab.at(me, g), size_t(g.bytes), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    fab.ring(prev, doorbell_index(cp, me, Bell::consumed), doorbell_value(k, 0), stream);
    fab.drain();
    CHECK(fab.pending_waits() == 0);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);  // no wait pending: safe

    size_t wrong = 0;
    for (size_t i = 0; i < words; ++i) wrong += got[i] != pattern(prev, k, i);
    INFO("round " << k << " region at " << g.offset << ", " << g.bytes << " bytes");
    CHECK(wrong == 0);
  }

  // GEQ: a wait for an older value passes at once; the flags hold the last round.
  fab.wait(doorbell_index(cp, prev, Bell::window), doorbell_value(0, 0), stream, {0, 0, "older value"});
  fab.drain();
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(fab.doorbell(doorbell_index(cp, prev, Bell::window)) ==
        doorbell_value(rounds - 1, (rounds - 1) % int(regions.size())));

  const FabricStats& st = fab.stats();
  CHECK(st.waits == 2 * rounds);  // (rounds - 1) consumed + rounds windows + the older-value wait
  CHECK(st.rings == 2 * rounds);
  CHECK(st.bytes_written == sent);
  CHECK(st.wait_us_total >= 0);
  CHECK(st.wait_us_max <= st.wait_us_total);
  std::printf("[rank %d] fabric: %lld waits, %.1f us waiting (max %.1f), %lld rings, %lld bytes written\n", me,
              (long long)st.waits, st.wait_us_total, st.wait_us_max, (long long)st.rings,
              (long long)st.bytes_written);

  gang.barrier();  // no peer stores into our slab any more
  cudaStreamDestroy(stream);
  cudaFreeHost(got);
}
