// Shared frame of the MPI + GPU suites (mpi_gpu_test_main.cpp): one gang for
// the whole run, each rank on device local_rank mod devices. Exit 77 (CTest:
// skipped) on every rank when any rank sees no CUDA device: the ranks decide
// together, so none is left waiting in a collective. Only rank 0 prints
// doctest's report; a failure on any rank fails the run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gang.h"
#include "ref_math.h"

namespace pb {
const Gang& test_gang();

namespace test {
// rel-L2 of a against b, both bf16 bit patterns.
inline double rel_l2_bf16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = ref::bf16_to_f32(a[i]), y = ref::bf16_to_f32(b[i]);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
}  // namespace test
}  // namespace pb
