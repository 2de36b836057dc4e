#include "power_state.h"

#include <cmath>
#include <cstdio>
#include <map>

namespace pb {

std::vector<PowerStateNote> power_state_notes(const VariantResult& variant) {
  std::map<int32_t, double> best;  // rank -> the best rep's median SM clock
  for (const RankRep& r : variant.rank_reps)
    if (!std::isnan(r.sm_mhz)) best[r.rank] = std::max(best[r.rank], r.sm_mhz);
  std::vector<PowerStateNote> notes;
  for (const RankRep& r : variant.rank_reps) {
    if (std::isnan(r.sm_mhz)) continue;
    PowerStateNote n;
    n.rep = r.rep;
    n.rank = r.rank;
    n.sm_mhz = r.sm_mhz;
    n.best_sm_mhz = best[r.rank];
    n.power_capped = std::isnan(r.power_capped) ? 0 : r.power_capped;
    n.sagged = r.sm_mhz < kSaggedFraction * n.best_sm_mhz;
    n.capped = n.power_capped > kPowerCappedFraction;
    if (n.sagged || n.capped) notes.push_back(n);
  }
  return notes;
}

std::string format_power_state(const std::string& variant_name, const std::vector<PowerStateNote>& notes) {
  std::string out;
  char line[256];
  for (const PowerStateNote& n : notes) {
    std::snprintf(line, sizeof line, "  %s rep %d rank %d: SM clock median %.0f MHz (best rep %.0f)%s%s\n",
                  variant_name.c_str(), n.rep, n.rank, n.sm_mhz, n.best_sm_mhz, n.sagged ? ", sagged" : "",
                  n.capped ? ", at the power cap" : "");
    out += line;
  }
  if (!out.empty())
    out = "GPU power state (a TTFT change in these reps may be the GPU's clock, not the code):\n" + out;
  return out;
}

}  // namespace pb
