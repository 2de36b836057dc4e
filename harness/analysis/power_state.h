// Which reps of a variant ran while the GPU was not at its usual clock: the
// SM clock sagged (its median below kSaggedFraction of the variant's best
// rep's), or the GPU sat at its software power cap for most of the rep.
// `compare` prints these beside a TTFT verdict, so that a "regression" caused
// by the GPU's power state shows as that (docs/lane.md: an H200 at its 700 W
// cap drops from 1.98 to 1.5-1.74 GHz).
#pragma once

#include <string>
#include <vector>

#include "results.h"

namespace pb {

constexpr double kSaggedFraction = 0.95;     // median SM clock below 95% of the best rep's
constexpr double kPowerCappedFraction = 0.5;  // at the power cap in more than half the samples

struct PowerStateNote {
  int32_t rep = 0, rank = 0;
  double sm_mhz = 0, best_sm_mhz = 0;
  double power_capped = 0;
  bool sagged = false, capped = false;
};

// The reps (per rank) that sagged or were capped; empty when the file has no
// clocks (files before schema 3, runs without NVML).
std::vector<PowerStateNote> power_state_notes(const VariantResult& variant);
// One line per note, or "" when there are none.
std::string format_power_state(const std::string& variant_name, const std::vector<PowerStateNote>& notes);

}  // namespace pb
