#include "profile.h"

#include "check.h"

namespace pb {

namespace {
const std::vector<GpuProfile>& profiles() {
  static const std::vector<GpuProfile> all = {
      // docs/design.md §5: 4.25 TB/s copy, 797 TFLOP/s cuBLAS bf16 8192^3.
      // f32: 67 TFLOP/s and NVLink 4: 450 GB/s per direction, from the datasheet.
      {"h200", "copy and GEMM measured on the H200 here (docs/design.md §5); f32 and link from the datasheet",
       4.25, 797.0, 67.0, 0.45},
      {"h100", "datasheet peak (H100 SXM: 3.35 TB/s HBM3, 989 TFLOP/s dense bf16), not measured",
       3.35, 989.0, 67.0, 0.45},
      {"gb300", "datasheet peak (B300: 8 TB/s HBM3e, 2500 TFLOP/s dense bf16, NVLink 5), not measured",
       8.0, 2500.0, 75.0, 0.9},
  };
  return all;
}
}  // namespace

std::vector<std::string> gpu_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : profiles()) names.push_back(p.name);
  return names;
}

GpuProfile gpu_profile(const std::string& name) {
  for (const auto& p : profiles())
    if (p.name == name) return p;
  throw_error(__FILE__, __LINE__, "unknown gpu_profile '" + name + "'; allowed: h200, h100, gb300");
}

}  // namespace pb
