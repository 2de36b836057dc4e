#include "gpu_test.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace pb::test {

namespace {
float draw(std::mt19937_64& rng, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::uniform_int_distribution<int> pick(0, 63);
  switch (pick(rng)) {
    case 0: return -0.0f;
    case 1: return 0.0f;
    case 2: return normal(rng) * 1048576.0f;  // large magnitude
    case 3: return -std::abs(normal(rng)) * 4096.0f;
    default: return normal(rng);
  }
}
}  // namespace

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> out(n);
  for (auto& v : out) v = ref::f32_to_bf16_rn(draw(rng, scale));
  return out;
}

std::vector<float> random_f32(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(n);
  for (auto& v : out) v = draw(rng, scale);
  return out;
}

int64_t first_bit_mismatch(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                           std::string* report) {
  if (got.size() != want.size()) {
    if (report) *report = "sizes differ";
    return 0;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    bool both_nan = (got[i] & 0x7fff) > 0x7f80 && (want[i] & 0x7fff) > 0x7f80;
    if (got[i] != want[i] && !both_nan) {
      if (report) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "index %zu: got 0x%04x (%g), want 0x%04x (%g)", i, got[i],
                      ref::bf16_to_f32(got[i]), want[i], ref::bf16_to_f32(want[i]));
        *report = buf;
      }
      return int64_t(i);
    }
  }
  return -1;
}

int64_t first_bit_mismatch(const std::vector<float>& got, const std::vector<float>& want,
                           std::string* report) {
  if (got.size() != want.size()) {
    if (report) *report = "sizes differ";
    return 0;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (std::memcmp(&got[i], &want[i], 4) != 0 && !both_nan) {
      if (report) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "index %zu: got %.9g, want %.9g", i, got[i], want[i]);
        *report = buf;
      }
      return int64_t(i);
    }
  }
  return -1;
}

}  // namespace pb::test
