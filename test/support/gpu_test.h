// Shared pieces of the GPU test suites (CTest label `gpu`).
//
// Every suite links gpu_test_main.cpp, which exits with code 77 (CTest: skipped)
// when no CUDA device is visible, so CI on a machine without a GPU reports the
// suites as skipped rather than passed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "device_buffer.h"
#include "device_math.h"
#include "ref_math.h"

namespace pb::test {

using pb::DeviceBuffer;

// bf16 bit patterns: mostly N(0, scale), with negatives, -0, +0 and large
// magnitudes (|x| up to 2^20 * scale) sprinkled in.
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed, float scale = 1.0f);
// f32 values drawn the same way.
std::vector<float> random_f32(size_t n, uint64_t seed, float scale = 1.0f);

// First index where two bit patterns differ, or -1 (NaN matches NaN of any
// payload: the host and the device spell NaN differently). Reports the values.
int64_t first_bit_mismatch(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                           std::string* report);
int64_t first_bit_mismatch(const std::vector<float>& got, const std::vector<float>& want,
                           std::string* report);

}  // namespace pb::test
