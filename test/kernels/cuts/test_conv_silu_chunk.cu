// conv_silu_chunk (cut 2) on the device: the cut, the baseline over both land
// variants and the C++ reference (fed the device's expf) agree bit for bit on
// y and next; chunked calls threading next -> carry equal one call; the cut's
// reciprocal path equals 1.0f / d on every float of its range.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "conv_silu_chunk.h"
#include "fast_math.cuh"
#include "gpu_test.h"

namespace pb::test {
namespace {

struct ConvCase {
  int64_t tokens, inner, ld, commit_rows;
  int64_t p_offset = 0;  // floats: > 0 misaligns p for the vector path
};

std::string describe(const ConvCase& c) {
  return "tokens " + std::to_string(c.tokens) + " inner " + std::to_string(c.inner) + " ld " +
         std::to_string(c.ld) + " commit_rows " + std::to_string(c.commit_rows) + " p_offset " +
         std::to_string(c.p_offset);
}

struct ConvInputs {
  std::vector<float> p;       // [tokens, ld]
  std::vector<float> cw;      // [4, inner]
  std::vector<uint16_t> carry;  // [3, inner]
};

ConvInputs make_inputs(int64_t tokens, int64_t inner, int64_t ld, uint64_t seed) {
  ConvInputs in;
  in.p = random_f32(size_t(tokens * ld), seed);
  in.cw = random_f32(size_t(4 * inner), seed + 1, 0.25f);
  in.carry = random_bf16(size_t(3 * inner), seed + 2);
  // A few non-finite partials: NaN and inf must flow through every path alike.
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), -0.0f};
  for (size_t i = 0; i < in.p.size(); i += 97) in.p[i] = specials[(i / 97) % 4];
  return in;
}

struct ConvResult {
  std::vector<uint16_t> y, next;
};

ConvResult reference(const ConvInputs& in, const ConvShape& s) {
  return evaluate_with_device_math([&](const ref::Transcendentals& math) {
    ConvResult r;
    r.y.assign(size_t(s.tokens * s.inner), 0);
    r.next.assign(size_t(3 * s.inner), 0);
    ref::conv_silu_chunk(in.p.data(), in.cw.data(), in.carry.data(), r.y.data(),
                         s.commit_rows > 0 ? r.next.data() : nullptr, s, math);
    return r;
  });
}

// The three device paths under test.
struct Path {
  Variant conv;
  Variant land;
  const char* name;
};
const Path kPaths[] = {{Variant::cut, Variant::cut, "cut"},
                       {Variant::baseline, Variant::baseline, "baseline (land baseline)"},
                       {Variant::baseline, Variant::cut, "baseline (land cut)"}};

// Device buffers for one shape; p sits p_offset floats into its allocation.
struct ConvDevice {
  DeviceBuffer<float> p_alloc, cw;
  DeviceBuffer<__nv_bfloat16> carry, y, next;
  DeviceBuffer<unsigned char> scratch;
  int64_t p_offset;

  ConvDevice(const ConvInputs& in, const ConvShape& s, int64_t p_offset_floats)
      : p_alloc(in.p.size() + size_t(p_offset_floats)),
        cw(in.cw.size()),
        carry(in.carry.size()),
        y(size_t(s.tokens * s.inner)),
        next(size_t(3 * s.inner)),
        scratch(conv_baseline_scratch_bytes(s)),
        p_offset(p_offset_floats) {
    PB_CUDA(cudaMemcpy(p_alloc.get() + p_offset, in.p.data(), in.p.size() * sizeof(float),
                       cudaMemcpyHostToDevice));
    cw.upload(in.cw);
    carry.upload(in.carry);
  }
  const float* p() const { return p_alloc.get() + p_offset; }
};

void run_path(const Path& path, ConvDevice& d, const ConvShape& s, __nv_bfloat16* next) {
  const ConvBaselineScratch scratch = conv_baseline_scratch_from(d.scratch.get(), s);
  conv_silu_chunk(path.conv, d.p(), d.cw.get(), d.carry.get(), d.y.get(), next, s, scratch,
                  path.land, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
}

void check_case(const ConvCase& c, uint64_t seed) {
  INFO(describe(c) << " seed " << seed);
  const ConvShape s{c.tokens, c.inner, c.ld, c.commit_rows};
  const ConvInputs in = make_inputs(c.tokens, c.inner, c.ld, seed);
  const ConvResult want = reference(in, s);
  ConvDevice d(in, s, c.p_offset);
  for (const Path& path : kPaths) {
    INFO(path.name);
    // next passed for real, and (commit_rows == 0) also as null.
    for (int pass = 0; pass < (c.commit_rows == 0 ? 2 : 1); ++pass) {
      d.y.poison();
      d.next.poison();
      run_path(path, d, s, pass == 0 ? d.next.get() : nullptr);
      std::string report;
      CHECK_MESSAGE(first_bit_mismatch(d.y.download<uint16_t>(), want.y, &report) == -1,
                    "y: " << report);
      const std::vector<uint16_t> next = d.next.download<uint16_t>();
      if (c.commit_rows > 0) {
        CHECK_MESSAGE(first_bit_mismatch(next, want.next, &report) == -1, "next: " << report);
      } else {
        // commit_rows == 0: next is not written.
        bool untouched = true;
        for (uint16_t v : next) untouched = untouched && v == 0xffff;
        CHECK_MESSAGE(untouched, "next written although commit_rows == 0");
      }
    }
  }
}

TEST_CASE("conv_silu_chunk: cut == baseline (both lands) == reference, bit for bit") {
  const ConvCase cases[] = {
      {64, 256, 1024, 64},    // vector path, commit = tokens
      {64, 256, 1024, 40},    // commit in the middle
      {64, 256, 256, 0},      // commit_rows 0: next untouched
      {37, 36, 40, 37},       // inner % 8 != 0 (vector path: 4 columns), tokens % 16 != 0
      {50, 1000, 1004, 49},   // two column slices, the second partial
      {33, 1024, 1024, 1},    // commit_rows 1: next = carry[1], carry[2], x_0
      {37, 37, 37, 20},       // odd inner and ld: scalar path
      {37, 36, 37, 2},        // odd ld: scalar path; commit_rows 2
      {48, 130, 130, 17},     // inner % 4 != 0: scalar path, two slices
      {40, 64, 64, 40, 1},    // p not 16-byte aligned: scalar path
      {1, 64, 64, 1},         // tokens < 3
      {2, 64, 68, 1},
      {2, 40, 41, 2},
      {1, 5, 5, 0},
      {17, 8, 8, 3},          // one full run + 1 row; commit_rows 3
  };
  for (uint64_t seed : {11u, 12u, 13u}) {
    for (const ConvCase& c : cases) check_case(c, seed);
  }
}

// Chunks [begin, end) with commit_rows; the next call starts at `commit` with
// carry = next. Returns the concatenated y and the last next.
ConvResult run_chunked(const Path& path, const ConvInputs& in, int64_t tokens, int64_t inner,
                       int64_t ld, const std::vector<std::pair<int64_t, int64_t>>& calls) {
  DeviceBuffer<float> p(in.p.size()), cw(in.cw.size());
  p.upload(in.p);
  cw.upload(in.cw);
  DeviceBuffer<__nv_bfloat16> y(size_t(tokens * inner));
  DeviceBuffer<__nv_bfloat16> carries[2] = {DeviceBuffer<__nv_bfloat16>(size_t(3 * inner)),
                                           DeviceBuffer<__nv_bfloat16>(size_t(3 * inner))};
  carries[0].upload(in.carry);
  y.poison();
  int64_t begin = 0;
  int cur = 0;
  for (const auto& [end, commit] : calls) {
    const ConvShape s{end - begin, inner, ld, commit - begin};
    DeviceBuffer<unsigned char> scratch(conv_baseline_scratch_bytes(s));
    carries[1 - cur].poison();
    conv_silu_chunk(path.conv, p.get() + begin * ld, cw.get(), carries[cur].get(),
                    y.get() + begin * inner, carries[1 - cur].get(), s,
                    conv_baseline_scratch_from(scratch.get(), s), path.land, nullptr);
    PB_CUDA(cudaDeviceSynchronize());
    cur = 1 - cur;
    begin = commit;
  }
  return {y.download<uint16_t>(), carries[cur].download<uint16_t>()};
}

TEST_CASE("conv_silu_chunk: chunked calls threading next -> carry == one call") {
  struct Layout {
    int64_t inner, ld;
  };
  const int64_t tokens = 53;
  // (end, commit_rows) per call; commit < end re-runs the uncommitted rows in
  // the next call, as speculative verification does.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> schedules = {
      {{3, 3}, {4, 4}, {21, 21}, {40, 40}, {53, 53}},
      {{30, 17}, {35, 19}, {53, 53}},
      {{1, 1}, {2, 2}, {18, 18}, {53, 53}},
  };
  for (const Layout& l : {Layout{40, 44}, Layout{37, 37}, Layout{256, 256}}) {
    for (uint64_t seed : {21u, 22u}) {
      const ConvInputs in = make_inputs(tokens, l.inner, l.ld, seed);
      const ConvShape whole{tokens, l.inner, l.ld, tokens};
      const ConvResult want = reference(in, whole);
      for (const Path& path : kPaths) {
        for (size_t k = 0; k < schedules.size(); ++k) {
          INFO(path.name << " inner " << l.inner << " ld " << l.ld << " seed " << seed
                         << " schedule " << k);
          const ConvResult got = run_chunked(path, in, tokens, l.inner, l.ld, schedules[k]);
          std::string report;
          CHECK_MESSAGE(first_bit_mismatch(got.y, want.y, &report) == -1, "y: " << report);
          CHECK_MESSAGE(first_bit_mismatch(got.next, want.next, &report) == -1,
                        "next: " << report);
        }
      }
    }
  }
}

// Every float d in [1, 2^126): fast_math::reciprocal_rn_1_to_2p126(d) has the
// bits of 1.0f / d (this file is compiled with the project's flags, so the
// division is the IEEE one).
__global__ void count_reciprocal_mismatches(uint32_t first, uint32_t last,
                                            unsigned long long* mismatches, uint32_t* example) {
  const uint32_t stride = gridDim.x * blockDim.x;  // last + stride < 2^32: no wrap
  for (uint32_t u = first + blockIdx.x * blockDim.x + threadIdx.x; u < last; u += stride) {
    const float d = __uint_as_float(u);
    const float fast = fast_math::reciprocal_rn_1_to_2p126(d);
    const float ieee = 1.0f / d;
    if (__float_as_uint(fast) != __float_as_uint(ieee)) {
      atomicAdd(mismatches, 1ull);
      atomicMin(example, u);
    }
  }
}

TEST_CASE("conv_silu_chunk: the cut's reciprocal == 1.0f / d on every float in [1, 2^126)") {
  const uint32_t first = 0x3f800000u;  // 1.0f
  const uint32_t last = 0x7e800000u;   // 2^126
  DeviceBuffer<unsigned long long> mismatches(1);
  DeviceBuffer<uint32_t> example(1);
  PB_CUDA(cudaMemset(mismatches.get(), 0, sizeof(unsigned long long)));
  example.poison();  // 0xffffffff: atomicMin keeps the smallest mismatching pattern
  count_reciprocal_mismatches<<<4096, 256>>>(first, last, mismatches.get(), example.get());
  PB_CUDA_LAUNCH();
  PB_CUDA(cudaDeviceSynchronize());
  const unsigned long long count = mismatches.download()[0];
  const uint32_t u = example.download()[0];
  float d;
  std::memcpy(&d, &u, 4);
  CHECK_MESSAGE(count == 0, count << " mismatches, first at d = " << d << " (0x" << std::hex << u
                                  << ")");
}

TEST_CASE("conv_silu_chunk: contract checks") {
  const ConvShape s{8, 16, 16, 9};  // commit_rows > tokens
  CHECK_THROWS_AS(conv_silu_chunk_cut(nullptr, nullptr, nullptr, nullptr, nullptr, s, nullptr),
                  pb::Error);
  DeviceBuffer<float> p(8 * 16), cw(4 * 16);
  DeviceBuffer<__nv_bfloat16> carry(3 * 16), y(8 * 16);
  const ConvShape no_next{8, 16, 16, 4};
  CHECK_THROWS_AS(conv_silu_chunk_cut(p.get(), cw.get(), carry.get(), y.get(), nullptr, no_next,
                                      nullptr),
                  pb::Error);
  // next aliasing carry would race in the cut.
  CHECK_THROWS_AS(conv_silu_chunk_cut(p.get(), cw.get(), carry.get(), y.get(), carry.get(),
                                      no_next, nullptr),
                  pb::Error);
  // Empty shapes launch nothing.
  const ConvShape empty{0, 16, 16, 0};
  CHECK_NOTHROW(conv_silu_chunk_cut(nullptr, nullptr, nullptr, nullptr, nullptr, empty, nullptr));
}

}  // namespace
}  // namespace pb::test
