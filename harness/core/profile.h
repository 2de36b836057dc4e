// GPU ceilings for the plan's roofline and for the fraction-of-ceiling column
// of every measured span. `h200` holds what was measured on the H200 here
// (docs/design.md §5); `h100` and `gb300` come from vendor datasheets (peak, not
// measured) and say so. A run replaces the copy and GEMM rates with the ones
// it measures itself.
#pragma once

#include <string>
#include <vector>

namespace pb {

struct GpuProfile {
  std::string name;
  std::string source;     // "measured on H200 here (docs/design.md §5)" / "datasheet peak"
  double copy_tbps;       // device-to-device copy, read + write
  double gemm_tflops;     // dense bf16 tensor-core GEMM
  double fp32_tflops;     // plain f32 FMA (SIMT)
  double link_tbps;       // one direction of the GPU-to-GPU fabric per GPU
};

std::vector<std::string> gpu_profile_names();
// Throws pb::Error for an unknown name.
GpuProfile gpu_profile(const std::string& name);

}  // namespace pb
