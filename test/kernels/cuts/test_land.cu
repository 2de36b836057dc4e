// Cut 1 (land) on the device: baseline == cut == ref::land, bit for bit, on
// aligned shapes (the cut's vector path) and on every shape or pointer that
// sends the cut to its scalar fallback. Outputs are poisoned before each run
// and guarded on both sides, so a missed or stray store shows up.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu_test.h"
#include "land.h"

using namespace pb;
using namespace pb::test;

namespace {

constexpr uint16_t kPoison = 0xffff;  // DeviceBuffer::poison() in bf16
constexpr size_t kGuard = 64;         // poisoned elements after the output

struct LandCase {
  const char* what;
  LandShape shape;
  int p_shift = 0;  // elements the partial's base pointer is moved by (1: misaligned)
  int o_shift = 0;  // same for the output
};

std::string describe(const LandCase& c, uint64_t seed) {
  const LandShape& s = c.shape;
  return std::string(c.what) + ": rows " + std::to_string(s.rows) + " split_k " +
         std::to_string(s.split_k) + " nt " + std::to_string(s.nt) + " off " +
         std::to_string(s.off) + " n " + std::to_string(s.n) + " p_shift " +
         std::to_string(c.p_shift) + " o_shift " + std::to_string(c.o_shift) + " seed " +
         std::to_string(seed);
}

// Runs one variant into a freshly poisoned output; checks the guards and
// returns the landed elements.
std::vector<uint16_t> run_land(Variant v, const float* p, const LandCase& c) {
  const size_t o_elems = size_t(c.shape.rows * c.shape.n);
  DeviceBuffer<__nv_bfloat16> o(c.o_shift + o_elems + kGuard);
  o.poison();
  land(v, p, o.get() + c.o_shift, c.shape, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> all = o.download<uint16_t>();
  bool guards_intact = true;
  for (size_t i = 0; i < size_t(c.o_shift); ++i) guards_intact &= all[i] == kPoison;
  for (size_t i = c.o_shift + o_elems; i < all.size(); ++i) guards_intact &= all[i] == kPoison;
  CHECK_MESSAGE(guards_intact, variant_name(v), ": store outside o");
  return std::vector<uint16_t>(all.begin() + c.o_shift, all.begin() + c.o_shift + o_elems);
}

void check_land_case(const LandCase& c, uint64_t seed) {
  INFO(describe(c, seed));
  const LandShape& s = c.shape;
  const size_t p_elems = size_t(s.rows * s.split_k * s.nt);
  const std::vector<float> p_host = random_f32(c.p_shift + p_elems, seed);
  DeviceBuffer<float> p(p_host.size());
  p.upload(p_host);

  std::vector<uint16_t> want(size_t(s.rows * s.n));
  ref::land(p_host.data() + c.p_shift, want.data(), s);

  const std::vector<uint16_t> base = run_land(Variant::baseline, p.get() + c.p_shift, c);
  const std::vector<uint16_t> cut = run_land(Variant::cut, p.get() + c.p_shift, c);
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(base, want, &report) == -1, "baseline vs ref: ", report);
  CHECK_MESSAGE(first_bit_mismatch(cut, want, &report) == -1, "cut vs ref: ", report);
  CHECK_MESSAGE(first_bit_mismatch(cut, base, &report) == -1, "cut vs baseline: ", report);
}

void check_cases(const std::vector<LandCase>& cases) {
  for (const LandCase& c : cases)
    for (uint64_t seed : {1u, 2u, 3u}) check_land_case(c, seed);
}

}  // namespace

TEST_CASE("land: vector path shapes, bit-identical") {
  check_cases({
      {"aligned, split_k 1", {64, 1, 1024, 256, 512}},
      {"aligned, split_k 3", {64, 3, 1024, 256, 512}},
      {"band ending at the slab edge", {3, 5, 64, 32, 32}},
      {"one row, 4 slabs", {1, 4, 4096, 0, 4096}},
      {"one vector", {1, 1, 8, 0, 8}},
      {"more vectors than one resident wave (grid-stride)", {1500, 1, 2008, 8, 2000}},
  });
}

TEST_CASE("land: scalar fallback shapes, bit-identical") {
  check_cases({
      {"n % 8 != 0", {37, 2, 1024, 256, 500}},
      {"odd off", {33, 1, 1024, 3, 512}},
      {"nt % 4 != 0", {17, 2, 1022, 4, 512}},
      {"n = 1", {5, 3, 7, 6, 1}},
      {"rows = 1, n = 3", {1, 1, 9, 2, 3}},
      {"misaligned p", {19, 2, 1024, 256, 512}, 1, 0},
      {"misaligned o", {19, 2, 1024, 256, 512}, 0, 1},
      {"more than 65535 rows (baseline grid-y stride)", {70000, 1, 8, 0, 8}},
  });
}

TEST_CASE("land: the launchers check their contract") {
  DeviceBuffer<float> p(64);
  DeviceBuffer<__nv_bfloat16> o(64);
  for (Variant v : {Variant::baseline, Variant::cut}) {
    INFO(variant_name(v));
    CHECK_THROWS_AS(land(v, p.get(), o.get(), LandShape{1, 0, 8, 0, 8}, nullptr), pb::Error);
    CHECK_THROWS_AS(land(v, p.get(), o.get(), LandShape{1, 1, 8, 4, 8}, nullptr), pb::Error);
    CHECK_THROWS_AS(land(v, p.get(), o.get(), LandShape{-1, 1, 8, 0, 8}, nullptr), pb::Error);
    CHECK_THROWS_AS(land(v, nullptr, o.get(), LandShape{1, 1, 8, 0, 8}, nullptr), pb::Error);
    // o inside p's range
    CHECK_THROWS_AS(land(v, p.get(), reinterpret_cast<__nv_bfloat16*>(p.get() + 4),
                         LandShape{1, 1, 16, 0, 8}, nullptr),
                    pb::Error);
    // empty shapes launch nothing, even on null pointers
    CHECK_NOTHROW(land(v, nullptr, nullptr, LandShape{0, 1, 8, 0, 8}, nullptr));
    CHECK_NOTHROW(land(v, nullptr, nullptr, LandShape{4, 1, 8, 0, 0}, nullptr));
  }
  PB_CUDA(cudaDeviceSynchronize());
}
