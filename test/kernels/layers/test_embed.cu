// embed_gather == a host gather bit for bit (vector and scalar paths), and
// checksum_bf16 == ref::checksum_bf16, sensitive to one flipped bit.
#include <doctest/doctest.h>

#include <vector>

#include "embed.h"
#include "gpu_test.h"

using namespace pb;
using namespace pb::test;

TEST_CASE("embed_gather copies the rows the ids name") {
  for (int64_t hidden : {64, 13}) {
    const int64_t vocab = 50, rows = 37;
    const std::vector<uint16_t> table = random_bf16(size_t(vocab * hidden), 3);
    std::vector<int32_t> ids(rows);
    for (int64_t r = 0; r < rows; ++r) ids[size_t(r)] = int32_t((r * 17 + 5) % vocab);
    DeviceBuffer<__nv_bfloat16> dt(table.size()), dout(size_t(rows * hidden));
    DeviceBuffer<int32_t> di(ids.size());
    dt.upload(table);
    di.upload(ids);
    dout.poison();
    embed_gather(dt.get(), di.get(), dout.get(), rows, hidden, nullptr);
    const std::vector<uint16_t> got = dout.download<uint16_t>();
    std::vector<uint16_t> want(got.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < hidden; ++c) want[size_t(r * hidden + c)] = table[size_t(ids[size_t(r)] * hidden + c)];
    std::string report;
    CHECK_MESSAGE(first_bit_mismatch(got, want, &report) < 0, report);
  }
}

TEST_CASE("checksum_bf16 matches the reference and sees one flipped bit") {
  const int64_t n = 100003;
  std::vector<uint16_t> x = random_bf16(size_t(n), 9);
  DeviceBuffer<__nv_bfloat16> dx(x.size());
  DeviceBuffer<unsigned long long> sum(1);
  dx.upload(x);
  checksum_bf16(dx.get(), n, sum.get(), nullptr);
  const uint64_t a = sum.download<uint64_t>()[0];
  CHECK(a == ref::checksum_bf16(x.data(), n));
  x[777] ^= 1;
  dx.upload(x);
  checksum_bf16(dx.get(), n, sum.get(), nullptr);
  CHECK(sum.download<uint64_t>()[0] != a);
}
