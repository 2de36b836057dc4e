// expand_k on the device == ref::expand_k bit for bit, on the 16-byte path
// and on the 2-byte fallback (odd widths, padded strides, misaligned rope).
#include <doctest/doctest.h>

#include <vector>

#include "gpu_test.h"
#include "mla_expand.h"

using namespace pb;
using namespace pb::test;

namespace {

void check_case(ExpandKShape s, int rope_shift, uint64_t seed) {
  INFO("tk " << s.tk << " heads " << s.heads << " nope " << s.nope << " rope " << s.rope << " v " << s.v << " ld_kvb "
             << s.ld_kvb << " ld_rope " << s.ld_rope << " rope_shift " << rope_shift);
  const int64_t ld_kvb = s.ld_kvb ? s.ld_kvb : int64_t(s.heads) * (s.nope + s.v);
  const int64_t ld_rope = s.ld_rope ? s.ld_rope : s.rope;
  const std::vector<uint16_t> kvb = random_bf16(size_t(s.tk * ld_kvb), seed);
  const std::vector<uint16_t> rope = random_bf16(size_t(rope_shift + s.tk * ld_rope), seed + 1);
  const size_t k_elems = size_t(s.tk * s.heads * (s.nope + s.rope));
  DeviceBuffer<__nv_bfloat16> dkvb(kvb.size()), drope(rope.size()), dk(k_elems);
  dkvb.upload(kvb);
  drope.upload(rope);
  dk.poison();
  expand_k(dkvb.get(), drope.get() + rope_shift, dk.get(), s, nullptr);
  PB_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> want(k_elems);
  ref::expand_k(kvb.data(), rope.data() + rope_shift, want.data(), s);
  std::string report;
  CHECK_MESSAGE(first_bit_mismatch(dk.download<uint16_t>(), want, &report) < 0, report);
}

}  // namespace

TEST_CASE("expand_k: device == reference bit for bit") {
  check_case({37, 3, 128, 64, 128, 0, 0}, 0, 1);        // vector path
  check_case({16, 96, 128, 64, 128, 0, 576}, 0, 2);     // K3 widths, rope inside kv_a rows
  check_case({9, 2, 128, 64, 128, 0, 0}, 1, 3);         // misaligned rope: scalar
  check_case({5, 2, 20, 12, 6, 60, 13}, 0, 4);          // odd widths and strides: scalar
  check_case({1, 1, 8, 0, 8, 0, 0}, 0, 5);             // no rope half
}
