#include "profile.h"

#include <fmt/format.h>

#include "check.h"
#include "text.h"

namespace pb {

namespace {
const std::vector<GpuProfile>& profiles() {
  static const std::vector<GpuProfile> all = {
      {"h200", "copy and GEMM measured on the H200 here (docs/design.md §5); f32 and link from the datasheet",
       4.25, "measured: device-to-device copy, read + write, on the H200 here (docs/design.md §5)",
       797.0, "measured: cuBLAS bf16 GEMM 8192^3 on the H200 here (docs/design.md §5)",
       659.0, "measured: cuBLAS bf16 GEMM 8192^3 back to back for 60 s on the H200 here, median; the card at its 700 W "
              "cap, SM clock 1.46 GHz",
       67.0, "datasheet: NVIDIA H200 SXM, 67 TFLOP/s FP32 (peak)",
       1226.0, "measured: cuBLASLt e4m3 GEMM 8192^3, 1x128 x 128x128 block scales, on the H200 here (shared/FP8.md)",
       1189.0, "measured: cuBLASLt e4m3 GEMM 8192^3 with per-tensor scales back to back for 30 s on the H200 here; "
               "the card at its 700 W cap, SM clock 1.32 GHz (the block-scaled GEMM has no sustained figure yet)",
       0.0, "none: Hopper has no FP4 tensor cores",
       "nvlink4", ""},
      {"h100", "datasheet peaks (NVIDIA H100 SXM), not measured",
       3.35, "datasheet: NVIDIA H100 SXM, 3.35 TB/s HBM3 (peak, not measured)",
       989.0, "datasheet: NVIDIA H100 SXM, 989 TFLOP/s dense BF16 (peak, not measured)",
       0.0, "none: a datasheet gives no sustained rate",
       67.0, "datasheet: NVIDIA H100 SXM, 67 TFLOP/s FP32 (peak)",
       1979.0, "datasheet: NVIDIA H100 SXM, 1979 TFLOP/s dense FP8 (peak, not measured)",
       0.0, "none: a datasheet gives no sustained rate",
       0.0, "none: Hopper has no FP4 tensor cores",
       "nvlink4",
       "datasheet peaks: the measured H200 reaches 89% of its 4.8 TB/s and 81% of its 989 TFLOP/s datasheet "
       "figures, so a measured H100 would sit that much below this roofline"},
      {"gb300", "datasheet peaks (NVIDIA B300 / GB300 NVL72), not measured",
       8.0, "datasheet: NVIDIA B300, 8 TB/s HBM3e (peak, not measured)",
       2500.0, "datasheet: NVIDIA B300, 2.5 PFLOP/s dense BF16 (peak, not measured)",
       0.0, "none: a datasheet gives no sustained rate",
       75.0, "datasheet: NVIDIA B300, 75 TFLOP/s FP32 (peak)",
       5000.0, "datasheet: NVIDIA GB300 NVL72, 720 PFLOP/s FP8 with sparsity over 72 GPUs: 5 PFLOP/s dense per GPU "
               "(peak, not measured)",
       0.0, "none: a datasheet gives no sustained rate",
       15000.0, "datasheet: NVIDIA GB300 NVL72, 1,080 PFLOP/s dense FP4 over 72 GPUs: 15 PFLOP/s dense per GPU "
                "(peak, not measured; the format the fleet's experts run)",
       "nvlink5",
       "datasheet peaks, not measured (the H200 here reaches 89% of its datasheet copy rate and 81% of its "
       "GEMM rate). The seed's fleet TTFTs on GB300 (16k: 1,150 -> 946 ms; 65k: 2,810 -> 2,231; 128k: "
       "6,387 -> 5,021) are CP8 gangs: at 16k each GPU holds 2k tokens, so compare them with a cp 8 plan at "
       "that context (--set cp=8 --set bucket=2048 at 16k), not with cp1-16k, where one GPU does all 16k "
       "tokens. The engine's experts are MXFP4/NVFP4: plan them with precision fp4 (NVFP4 experts, fp8 dense "
       "GEMMs)"},
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
  throw_error(__FILE__, __LINE__, "unknown gpu_profile '" + name + "'; allowed: " + join(gpu_profile_names()));
}

DatasheetPeak datasheet_peak(const std::string& profile_name) {
  static const std::vector<std::pair<std::string, DatasheetPeak>> peaks = {
      {"h200", {989.0, 1979.0, "datasheet: NVIDIA H200 SXM, 989 TFLOP/s dense BF16, 1979 dense FP8"}},
      {"h100", {989.0, 1979.0, "datasheet: NVIDIA H100 SXM, 989 TFLOP/s dense BF16, 1979 dense FP8"}},
      {"gb300", {2500.0, 5000.0, "datasheet: NVIDIA B300, 2.5 PFLOP/s dense BF16, 5 PFLOP/s dense FP8"}},
  };
  for (const auto& [name, peak] : peaks)
    if (name == profile_name) return peak;
  throw_error(__FILE__, __LINE__,
              "no datasheet peak for gpu_profile '" + profile_name + "'; allowed: " + join(gpu_profile_names()));
}

ProcessMemory process_memory(const std::string& profile_name) {
  static const std::vector<std::pair<std::string, ProcessMemory>> figures = {
      {"h200", {0.45e9, "measured: device memory in use less the planned budget, 0.450-0.452 GB a process at 1 and "
                        "8 processes with the 64 B stack limit (results/h200: cp1-16k-fp8-64b-stack, "
                        "cp8-128k-fp8-all-64b-stack); a bf16 run, which loads no fp8 engine, takes 0.40 GB "
                        "(cp1-16k-bf16-64b-stack), so the figure bounds it"}},
      {"h100", {0.0, "not measured"}},
      {"gb300", {0.0, "not measured"}},
  };
  for (const auto& [name, figure] : figures)
    if (name == profile_name) return figure;
  throw_error(__FILE__, __LINE__,
              "no process memory for gpu_profile '" + profile_name + "'; allowed: " + join(gpu_profile_names()));
}

std::string profile_of_device(const std::string& device_name) {
  if (device_name.find("H200") != std::string::npos) return "h200";
  if (device_name.find("H100") != std::string::npos) return "h100";
  if (device_name.find("B300") != std::string::npos) return "gb300";
  return "";
}

bool is_datasheet(const std::string& figure_source) { return figure_source.rfind("datasheet", 0) == 0; }

std::string describe_figures(const GpuProfile& p) {
  std::string out = fmt::format("  copy  {:>8.2f} TB/s      {}\n  GEMM  {:>8.0f} TFLOP/s   {}\n", p.copy_tbps,
                                p.copy_source, p.gemm_tflops, p.gemm_source);
  if (p.gemm_ceiling == "burst" && p.gemm_sustained_tflops > 0)
    out += fmt::format("  GEMM  {:>8.0f} TFLOP/s   sustained (plan --ceiling sustained), {}\n",
                       p.gemm_sustained_tflops, p.gemm_sustained_source);
  out += fmt::format("  fp8   {:>8.0f} TFLOP/s   {}\n", p.fp8_tflops, p.fp8_source);
  if (p.fp4_tflops > 0) out += fmt::format("  fp4   {:>8.0f} TFLOP/s   {}\n", p.fp4_tflops, p.fp4_source);
  return out + fmt::format("  f32   {:>8.0f} TFLOP/s   {}\n", p.fp32_tflops, p.fp32_source);
}

std::string precision_rate_problem(const Precision& p, const GpuProfile& profile) {
  if (p.experts != Format::fp4 || profile.fp4_tflops > 0) return "";
  std::vector<std::string> with;
  for (const auto& q : profiles())
    if (q.fp4_tflops > 0) with.push_back(q.name);
  return "precision.experts fp4 needs a gpu_profile with an FP4 rate, and " + profile.name + " has none (" +
         profile.fp4_source + "); allowed: " + join(with);
}

std::vector<std::string> gemm_ceiling_names() { return {"burst", "sustained"}; }

GpuProfile at_gemm_ceiling(const GpuProfile& p, const std::string& ceiling) {
  if (ceiling == "burst") return p;
  PB_CHECK(ceiling == "sustained",
           "unknown GEMM ceiling '" + ceiling + "'; allowed: " + join(gemm_ceiling_names()));
  PB_CHECK(p.gemm_sustained_tflops > 0, "profile " + p.name + " has no sustained GEMM figure (" +
                                            p.gemm_sustained_source + "); allowed for it: burst");
  GpuProfile out = p;
  out.gemm_tflops = p.gemm_sustained_tflops;
  out.gemm_source = "sustained, " + p.gemm_sustained_source;
  if (p.fp8_sustained_tflops > 0) {
    out.fp8_tflops = p.fp8_sustained_tflops;
    out.fp8_source = "sustained, " + p.fp8_sustained_source;
  }
  out.gemm_ceiling = "sustained";
  return out;
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
  throw_error(__FILE__, __LINE__, "unknown link profile '" + name + "'; allowed: " + join(link_profile_names()));
}

}  // namespace pb
