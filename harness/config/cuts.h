// The switchable cuts: the seed's five (docs/design.md §4) and three beyond the
// seed: AttnRes (the sixth), balance (the seventh, docs/design.md §3; it
// refines the stripe, so it needs the stripe on) and overlap (the eighth: the
// mixers launch the work that waits on no peer before the waits, same
// arithmetic; docs/cuts.md). A scenario spells a cut set as `all`, `none`,
// `seed` (the five of the seed), a list of names, or a map name -> on/off.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace pb {

enum class Cut { land, conv, stripe, lse_merge, elementwise, attnres, balance, overlap };
constexpr int kCutCount = 8;
constexpr std::array<Cut, kCutCount> kAllCuts = {Cut::land,        Cut::conv,    Cut::stripe,  Cut::lse_merge,
                                                 Cut::elementwise, Cut::attnres, Cut::balance, Cut::overlap};

const char* cut_name(Cut c);
// nullptr-safe lookup; returns false for an unknown name.
bool cut_from_name(const std::string& name, Cut* out);
std::string allowed_cut_names();  // "land, conv, stripe, lse_merge, elementwise, attnres, balance, overlap"
// The cut that `c` refines and needs on (balance: the stripe); false when none.
bool cut_requires(Cut c, Cut* prerequisite);
// Whether the cut is one of the seed's five.
bool seed_cut(Cut c);

struct CutSet {
  std::array<bool, kCutCount> on{};

  bool operator[](Cut c) const { return on[int(c)]; }
  void set(Cut c, bool value) { on[int(c)] = value; }
  bool operator==(const CutSet& o) const { return on == o.on; }

  static CutSet none() { return {}; }
  static CutSet all();   // every cut
  static CutSet seed();  // the five cuts of the seed PR
  // This set with `c` off, and every cut that requires c off too.
  CutSet without(Cut c) const;
  // "" when every cut that is on has its prerequisite on; else the sentence.
  std::string problem() const;
  // "land=on conv=off ..." in kAllCuts order
  std::string describe() const;
  // "none", "all", or the names of the cuts that are on joined by '+'
  std::string short_name() const;
};

}  // namespace pb
