// Plain C++ references of the FP8 quantization kernels (quant.h), bit for bit
// the contract of fp8.h, and the host helpers the FP8 tests dequantize with.
// Host code only: the e4m3 encoder here is written by hand from the format
// (no cuda_fp8.h conversion is called), so the GPU tests hold the device's
// cvt.rn.satfinite.e4m3x2.f32 to an independent implementation.
//
//   e4m3_encode(v)     the code of f32 v (fp8.h: RN-even, saturating, NaN -> 0x7F|sign)
//   e4m3_value(c)      the exact value of code c as f32 (NaN for 0x7F / 0xFF)
//   e4m3_is_nan(c)     c is 0x7F or 0xFF
//   fp8_scale(amax)    amax == 0 ? 1.0f : amax / 448.0f
//   quantize_act_fp8 / quantize_weight_fp8   the kernels' contracts on bf16 bit
//                      patterns (uint16_t) -> codes (uint8_t) and f32 scales,
//                      same shapes, strides and checks as the launchers
#pragma once

#include <cstdint>

#include "quant.h"

namespace pb::ref {

uint8_t e4m3_encode(float v);
float e4m3_value(uint8_t code);
inline bool e4m3_is_nan(uint8_t code) { return (code & 0x7f) == 0x7f; }
float fp8_scale(float amax);

// Writes q rows [m, k] (row stride ldq; the bytes between k and ldq are left
// alone) and the m × k/128 scales at s[r * s_row + g * s_group] (nothing else).
void quantize_act_fp8(const uint16_t* x, uint8_t* q, float* s, const ActQuantShape& shape);
// Writes q [n, k] (row stride ldq) and sw[nb * ld_sw + kb] for kb < ld_sw
// (1.0f on the padding kb >= k/128).
void quantize_weight_fp8(const uint16_t* w, uint8_t* q, float* sw, const WeightQuantShape& shape);

}  // namespace pb::ref
