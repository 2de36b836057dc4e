// Shared frame of the MPI + GPU suites (mpi_gpu_test_main.cpp): one gang for
// the whole run, each rank on device local_rank mod devices. Exit 77 (CTest:
// skipped) on every rank when any rank sees no CUDA device: the ranks decide
// together, so none is left waiting in a collective. Only rank 0 prints
// doctest's report; a failure on any rank fails the run.
#pragma once

#include "gang.h"
#include "ref_math.h"

namespace pb {
const Gang& test_gang();

namespace test {
using ref::rel_l2_bf16;
}  // namespace test
}  // namespace pb
