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

namespace {
const std::vector<LinkProfile>& links() {
  static const std::vector<LinkProfile> all = {
      {"same-gpu", "measured: half the H200's 4.25 TB/s device-to-device copy (docs/design.md §5)", 2125.0, 2.0,
       false},
      {"nvlink4", "datasheet: H200 NVLink 4, 450 GB/s per direction", 450.0, 2.0, true},
      {"nvlink5", "datasheet: GB300 NVLink 5, 900 GB/s per direction", 900.0, 2.0, true},
      {"ib400", "datasheet: one 400 Gb/s InfiniBand NIC, 50 GB/s", 50.0, 5.0, true},
  };
  return all;
}
}  // namespace

std::vector<std::string> link_profile_names() {
  std::vector<std::string> names;
  for (const auto& l : links()) names.push_back(l.name);
  return names;
}

LinkProfile link_profile(const std::string& name) {
  for (const auto& l : links())
    if (l.name == name) return l;
  std::string allowed;
  for (const auto& n : link_profile_names()) allowed += (allowed.empty() ? "" : ", ") + n;
  throw_error(__FILE__, __LINE__, "unknown link profile '" + name + "'; allowed: " + allowed);
}

}  // namespace pb
