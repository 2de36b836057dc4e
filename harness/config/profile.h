// GPU ceilings for the plan's roofline and for the fraction-of-ceiling column
// of every measured span, and the GPU-to-GPU links that cost the fabric. Every
// figure carries its provenance: "measured ..." (on the H200 here,
// docs/design.md §5) or "datasheet: ..." (a vendor's peak, not measured). A run
// replaces the copy and GEMM rates with the ones it measures itself.
//
// Two GEMM ceilings: the burst (a short run of GEMMs from a cool, idle card)
// and the sustained (the rate the card holds through a superstep, at its
// power cap). `plan --ceiling sustained` costs tensor work at the second.
// The bf16 and the fp8 GEMM each have both (precision.h picks which a launch's
// tensor work runs at: cost.h's Unit); the fp4 GEMM (planned experts) has a
// datasheet burst figure where the GPU has FP4 tensor cores.
#pragma once

#include <string>
#include <vector>

#include "precision.h"

namespace pb {

struct GpuProfile {
  std::string name;
  std::string source;       // one line: where the figures come from
  double copy_tbps;         // device-to-device copy, read + write
  std::string copy_source;  // "measured: ..." or "datasheet: ..."
  double gemm_tflops;       // dense bf16 tensor-core GEMM, burst
  std::string gemm_source;
  double gemm_sustained_tflops;  // the same GEMM held for a superstep's length; 0: no figure
  std::string gemm_sustained_source;
  double fp32_tflops;       // plain f32 FMA (SIMT)
  std::string fp32_source;
  double fp8_tflops;        // dense e4m3 GEMM with DeepSeek-V3 block scales (1x128 x 128x128), burst
  std::string fp8_source;
  double fp8_sustained_tflops;  // the same held for a superstep's length; 0: no figure
  std::string fp8_sustained_source;
  double fp4_tflops;        // dense NVFP4 GEMM (e2m1, e4m3 scales per 16), burst; 0: no FP4 tensor cores
  std::string fp4_source;
  std::string link;         // the natural GPU-to-GPU link (link_profile name)
  std::string note;         // what a reader must know to compare this profile with a measurement; may be empty
  std::string gemm_ceiling = "burst";  // which of the two gemm_tflops holds (at_gemm_ceiling)
};

std::vector<std::string> gpu_profile_names();
// Throws pb::Error for an unknown name.
GpuProfile gpu_profile(const std::string& name);
// True when a figure's source is a vendor datasheet rather than a measurement.
bool is_datasheet(const std::string& figure_source);
// The profile's figures, one per line, each with its source:
//   "  copy   4.25 TB/s       measured: ..."
// At the burst ceiling, a sustained figure follows the GEMM line as its own
// line ("  GEMM  659 TFLOP/s   sustained (plan --ceiling sustained), measured: ...");
// an fp4 line only where the profile has an FP4 rate.
std::string describe_figures(const GpuProfile& p);
// "" when the profile has a rate for every format of `p`; else why, naming the
// key and the profiles that have one.
std::string precision_rate_problem(const Precision& p, const GpuProfile& profile);

// The vendor's dense tensor peaks of a profile's GPU, the denominator of the
// model FLOPs utilization (analysis/efficiency.h); a datasheet's, not measured.
struct DatasheetPeak {
  double bf16_tflops = 0;
  double fp8_tflops = 0;
  std::string source;
};
// Throws pb::Error for an unknown profile name.
DatasheetPeak datasheet_peak(const std::string& profile_name);
// What each process adds on its GPU beyond the buffers the memory budget
// counts: its CUDA context and the libraries' workspaces (cuBLAS, cuBLASLt,
// cuDNN). bytes 0: no figure for this profile (source says so).
struct ProcessMemory {
  double bytes = 0;
  std::string source;
};
// Throws pb::Error for an unknown profile name.
ProcessMemory process_memory(const std::string& profile_name);
// The profile of a device by its name ("NVIDIA H200" -> h200, "NVIDIA H100
// 80GB HBM3" -> h100, "NVIDIA B300" or "GB300" -> gb300); "" when none fits.
std::string profile_of_device(const std::string& device_name);

// The GEMM ceilings a roofline can use: "burst" (gemm_tflops), "sustained".
std::vector<std::string> gemm_ceiling_names();
// The profile with its tensor rates (gemm_tflops and fp8_tflops, with their
// sources) at `ceiling`; "burst" returns it unchanged. Throws pb::Error naming the allowed values for
// an unknown ceiling, and for "sustained" on a profile without that figure.
GpuProfile at_gemm_ceiling(const GpuProfile& p, const std::string& ceiling);

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
