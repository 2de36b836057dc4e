// The switchable cuts: the seed's five (docs/design.md §4) and AttnRes, the sixth
// beyond the seed. A scenario spells a cut set as `all`, `none`,
// `seed` (the five of the seed), a list of names, or a map name -> on/off.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace pb {

enum class Cut { land, conv, stripe, lse_merge, elementwise, attnres };
constexpr int kCutCount = 6;
constexpr std::array<Cut, kCutCount> kAllCuts = {Cut::land,      Cut::conv,        Cut::stripe,
                                                 Cut::lse_merge, Cut::elementwise, Cut::attnres};

const char* cut_name(Cut c);
// nullptr-safe lookup; returns false for an unknown name.
bool cut_from_name(const std::string& name, Cut* out);
std::string allowed_cut_names();  // "land, conv, stripe, lse_merge, elementwise, attnres"

struct CutSet {
  std::array<bool, kCutCount> on{};

  bool operator[](Cut c) const { return on[int(c)]; }
  void set(Cut c, bool value) { on[int(c)] = value; }
  bool operator==(const CutSet& o) const { return on == o.on; }

  static CutSet none() { return {}; }
  static CutSet all();
  static CutSet seed();  // the five cuts of the seed PR, AttnRes off
  // "land=on conv=off ..." in kAllCuts order
  std::string describe() const;
  // "none", "all", or the names of the cuts that are on joined by '+'
  std::string short_name() const;
};

}  // namespace pb
