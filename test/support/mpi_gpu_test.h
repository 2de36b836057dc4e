// Shared frame of the MPI + GPU suites (mpi_gpu_test_main.cpp): one gang for
// the whole run, each rank on device local_rank mod devices. Exit 77 (CTest:
// skipped) on every rank when any rank sees no CUDA device: the ranks decide
// together, so none is left waiting in a collective. Only rank 0 prints
// doctest's report; a failure on any rank fails the run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "check.h"
#include "cuts.h"
#include "device_buffer.h"
#include "gang.h"
#include "random_fill.h"
#include "ref_math.h"
#include "schedule.h"

namespace pb {
const Gang& test_gang();

namespace test {
using ref::rel_l2_bf16;

// Every cut but balance and overlap (the stripe schedule; the suites turn
// those two on by name), or none; cut 4 (lse_merge) as given.
inline CutSet cuts_with(bool all, bool lse_merge) {
  CutSet c = all ? CutSet::all().without(Cut::balance).without(Cut::overlap) : CutSet::none();
  c.on[int(Cut::lse_merge)] = lse_merge;
  return c;
}

// Every rank's rows [its rows, width] (bf16 bits, its token ranges in local
// order: rank_tokens) put back in sequence order, [context, width], on rank
// 0 of the gang; empty on the other ranks. Collective.
inline std::vector<uint16_t> gather_in_sequence(const Gang& gang, const std::vector<uint16_t>& mine, Layout layout,
                                                int64_t context, int64_t width) {
  const std::vector<std::string> parts =
      gang.gather(std::string(reinterpret_cast<const char*>(mine.data()), mine.size() * 2));
  if (!gang.is_root()) return {};
  std::vector<uint16_t> all(size_t(context * width), 0);
  for (int r = 0; r < gang.size(); ++r) {
    int64_t rows = 0;
    for (const Segment& seg : rank_tokens(layout, context, gang.size(), r)) rows += seg.len;
    PB_CHECK(int64_t(parts[size_t(r)].size()) == rows * width * 2,
             "gather_in_sequence: rank " + std::to_string(r) + " sent other than its rows");
    const char* from = parts[size_t(r)].data();
    for (const Segment& seg : rank_tokens(layout, context, gang.size(), r)) {
      std::memcpy(all.data() + seg.begin * width, from, size_t(seg.len * width) * 2);
      from += seg.len * width * 2;
    }
  }
  return all;
}

// The rows of `ranges` of `all` [*, width], in order.
inline std::vector<uint16_t> rows_of_ranges(const std::vector<uint16_t>& all, const std::vector<Segment>& ranges,
                                            int64_t width) {
  std::vector<uint16_t> out;
  for (const Segment& seg : ranges)
    out.insert(out.end(), all.begin() + seg.begin * width, all.begin() + (seg.begin + seg.len) * width);
  return out;
}

// A rank's input under a layout: the rows of its token ranges of `full`
// [context, hidden], in order, from row 0 of `local` (its bucket), on `stream`.
inline void copy_rank_rows(const __nv_bfloat16* full, __nv_bfloat16* local, Layout layout, int64_t context, int cp,
                           int rank, int64_t hidden, cudaStream_t stream) {
  int64_t row = 0;
  for (const Segment& seg : rank_tokens(layout, context, cp, rank)) {
    PB_CUDA(cudaMemcpyAsync(local + row * hidden, full + seg.begin * hidden, size_t(seg.len * hidden) * 2,
                            cudaMemcpyDeviceToDevice, stream));
    row += seg.len;
  }
}

// Layouts compared on one gang (-np cp): a seeded input [context, hidden], a
// bucket that fits either layout's rows plus pad_rows, and the stream the
// calls run on. Zigzag needs the context divisible by 2·cp; the contiguous
// layout alone takes any context (uneven segments).
struct LayoutInput {
  int cp = 0, me = 0;
  int64_t context = 0, hidden = 0, rows = 0;
  uint64_t seed = 0;
  cudaStream_t stream = nullptr;
  DeviceBuffer<__nv_bfloat16> full;
  LayoutInput(int64_t hidden_, int64_t context_, int64_t pad_rows, uint64_t seed_)
      : cp(test_gang().size()), me(test_gang().rank()), context(context_), hidden(hidden_), seed(seed_) {
    rows = contiguous_segments(context, cp)[0].len;
    if (context % (2 * cp) == 0) rows = std::max(rows, lane_segments(Layout::zigzag, context, cp)[0].len);
    rows += pad_rows;
    PB_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    full = DeviceBuffer<__nv_bfloat16>(size_t(context * hidden));
    fill_uniform_bf16(full.get(), context * hidden, seed, 1.0f, stream);
  }
  ~LayoutInput() { PB_CUDA_NOTHROW(cudaStreamDestroy(stream)); }
  LayoutInput(const LayoutInput&) = delete;
  LayoutInput& operator=(const LayoutInput&) = delete;
  // This rank's rows under `layout` in a bucket of `rows` (the padding rows seeded: anything).
  DeviceBuffer<__nv_bfloat16> local(Layout layout) const {
    PB_CHECK(layout != Layout::zigzag || context % (2 * cp) == 0,
             "LayoutInput: zigzag needs the context divisible by 2*cp");
    DeviceBuffer<__nv_bfloat16> out(size_t(rows * hidden));
    fill_uniform_bf16(out.get(), rows * hidden, seed + 1, 1.0f, stream);
    copy_rank_rows(full.get(), out.get(), layout, context, cp, me, hidden, stream);
    PB_CUDA(cudaStreamSynchronize(stream));
    return out;
  }
};
}  // namespace test
}  // namespace pb
