// The model FLOPs utilization (MFU) of a superstep, from what a results file
// holds, the figure the CP literature reports beside TTFT:
//
//   MFU = model_flops / (TTFT x gpus x peak)
//
//   model_flops  the superstep's FLOPs over every rank: the FLOPs the plan
//                gives each launch (the spans' `flops`), summed over one rep
//                of every rank (the first measured rep; a plan's rep -1);
//   TTFT         the headline TTFT's median (headline.h); a plan: its
//                calibrated superstep (root number calibrated_ms.<variant>),
//                else the rank that ends last, its launches' roofline sum;
//   gpus         cp: the gang with a GPU per rank (a serialized run's
//                headline is that gang's projection);
//   peak         the datasheet's dense bf16 rate of the file's GPU
//                (profile.h: datasheet_peak) and, where the weight GEMMs run
//                fp8, its dense fp8 rate; and, for a bf16 run, the bf16 GEMM
//                ceilings it measured (burst and sustained), which the
//                datasheet's figure overstates on a power-capped card.
// A peak or a TTFT the file lacks leaves its MFU NaN.
#pragma once

#include <string>

#include "results.h"

namespace pb {

struct Efficiency {
  double model_flops = 0;
  double ttft_ms = kNoValue;
  int gpus = 0;
  std::string profile;  // the datasheet's GPU, "" when the file names none
  double mfu_bf16_datasheet = kNoValue;
  double mfu_fp8_datasheet = kNoValue;  // weight GEMMs in fp8 only
  double mfu_burst = kNoValue, mfu_sustained = kNoValue;
};

Efficiency efficiency_of(const RunResult& run, const VariantResult& variant);

// Into the file's root numbers, per variant (as a plan's calibrated_ms.<v>):
// model_flops.<v>, and mfu_bf16_datasheet.<v>, mfu_fp8_datasheet.<v>,
// mfu_burst.<v>, mfu_sustained.<v> where known. Readers recompute them with
// efficiency_of; these are for dashboards reading the file alone.
void record_efficiency(const Efficiency& e, const std::string& variant, RunResult& result);

// One line: "MFU <p>% of the datasheet bf16 peak (<profile>, <n> GPUs)[, <p>% of
// its fp8 peak]; <p>% of the bf16 GEMM burst measured, <p>% of the sustained;
// model <f> PFLOP per superstep", each part only where it is known.
std::string describe_efficiency(const Efficiency& e);

}  // namespace pb
