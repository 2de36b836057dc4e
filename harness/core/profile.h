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

// A GPU-to-GPU link for costing fabric transfers: a transfer of n bytes takes
// latency_us + n / (gbytes_per_s * 1e3) microseconds, one direction.
//   same-gpu   a device-to-device copy on one GPU (the serialized gang's own
//              fabric): half the measured copy rate, which counts read + write
//   nvlink4    H200 NVLink 4, 450 GB/s per direction (datasheet)
//   nvlink5    GB300 NVLink 5, 900 GB/s per direction (datasheet)
//   ib400      one 400 Gb/s InfiniBand NIC, 50 GB/s (datasheet)
struct LinkProfile {
  std::string name;
  std::string source;   // "measured ..." or "datasheet: ..."
  double gbytes_per_s;  // one direction
  double latency_us;    // per transfer
  bool datasheet;       // true: a vendor figure, not measured here
  double transfer_us(double bytes) const { return latency_us + bytes / (gbytes_per_s * 1e3); }
};

std::vector<std::string> link_profile_names();
// Throws pb::Error naming the allowed values for an unknown name.
LinkProfile link_profile(const std::string& name);

}  // namespace pb
