// The two versions every cut family ships: the retired implementation
// (baseline) and the cut. The superstep passes the scenario's switch here.
#pragma once

namespace pb {

enum class Variant { baseline, cut };

inline const char* variant_name(Variant v) { return v == Variant::cut ? "cut" : "baseline"; }

}  // namespace pb
