// ref::argmax_bf16 (kernels/layers/argmax.h): the first token's order on the host.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "argmax.h"
#include "ref_math.h"

using namespace pb;

namespace {

uint16_t bf(float f) { return ref::f32_to_bf16_rn(f); }
constexpr uint16_t kNaN = 0x7fc0, kNegNaN = 0xffc0, kInf = 0x7f80, kNegInf = 0xff80, kPosZero = 0x0000,
                   kNegZero = 0x8000;

}  // namespace

TEST_CASE("argmax ref: the largest value, ties to the lower index") {
  CHECK(ref::argmax_bf16(std::vector<uint16_t>{bf(1), bf(3), bf(2)}.data(), 3) == 1);
  CHECK(ref::argmax_bf16(std::vector<uint16_t>{bf(1), bf(3), bf(3), bf(3)}.data(), 4) == 1);
  CHECK(ref::argmax_bf16(std::vector<uint16_t>{bf(-5)}.data(), 1) == 0);
  SUBCASE("+0 and -0 are equal: the lower index wins either way") {
    CHECK(ref::argmax_bf16(std::vector<uint16_t>{bf(-1), kNegZero, kPosZero}.data(), 3) == 1);
    CHECK(ref::argmax_bf16(std::vector<uint16_t>{bf(-1), kPosZero, kNegZero}.data(), 3) == 1);
  }
  SUBCASE("+inf wins, the first of several") {
    CHECK(ref::argmax_bf16(std::vector<uint16_t>{bf(7), kInf, bf(9), kInf}.data(), 4) == 1);
  }
}

TEST_CASE("argmax ref: NaN ranks below every number, -inf included") {
  CHECK(ref::argmax_bf16(std::vector<uint16_t>{kNaN, kNegInf, kNegNaN}.data(), 3) == 1);
  CHECK(ref::argmax_bf16(std::vector<uint16_t>{kNaN, bf(-3), kNaN, bf(-2)}.data(), 4) == 3);
  SUBCASE("all NaN: index 0") { CHECK(ref::argmax_bf16(std::vector<uint16_t>{kNegNaN, kNaN, kNaN}.data(), 3) == 0); }
}

TEST_CASE("argmax ref: n outside [1, 2^31 - 1] is refused") {
  std::vector<uint16_t> x{bf(1)};
  CHECK_THROWS(ref::argmax_bf16(x.data(), 0));
}
