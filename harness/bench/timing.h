// Timing hygiene in one place: CUDA events on the work stream, a warm-up,
// the median of many repetitions, and buffers rotated so that repeated
// launches do not read from L2.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <vector>

#include "gemm_ceiling.h"

namespace pb {

class Fp8Gemm;

struct Timing {
  double median_us = 0, min_us = 0, max_us = 0;
  int reps = 0;
};

// Times launch(slot, stream) `reps` times after `warmup` untimed calls, each
// repetition between two events; slot cycles through 0..slots-1 so that each
// repetition reads another copy of its inputs. settle_ms > 0: each timed
// repetition starts after the GPU has idled that long (turns.h).
Timing time_launches(const std::function<void(int slot, cudaStream_t)>& launch, int slots, int warmup, int reps,
                     cudaStream_t stream, int settle_ms = 0);

// How many rotating copies of a working set of `bytes` keep the total at
// least three times the device's L2 (at least 2).
int rotation_slots(double bytes);

// Device-to-device copy rate, counting bytes read plus bytes written, TB/s.
double measure_copy_tbps(cudaStream_t stream, int reps = 20);

// cuBLAS bf16 GEMM rate (f32 accumulate) on an n^3 product of random data,
// TFLOP/s: the burst ceiling, the median of `reps` GEMMs after 3 warm-ups.
double measure_gemm_tflops(cudaStream_t stream, int n = 8192, int reps = 20);

// The fp8 GEMM with DeepSeek-V3 block scales (cuBLASLt, kernels/fp8/gemm_fp8.h)
// on an n^3 product of random operands, quantized once: the fp8 burst
// ceiling, TFLOP/s, the median of `reps` after 3 warm-ups.
double measure_fp8_gemm_tflops(Fp8Gemm& gemm, cudaStream_t stream, int64_t n = 8192, int reps = 20);

// The sustained ceiling (gemm_ceiling.h): the same GEMM back to back on
// `stream` for `seconds` of GPU time (the last chunk of 32 GEMMs may run past
// it), each between two events, the queue kept ahead of the GPU; the median
// rate over the window's settled part.
SustainedGemm measure_gemm_sustained(cudaStream_t stream, double seconds, int n = 8192);

}  // namespace pb
