#include "cuts.h"

namespace pb {

const char* cut_name(Cut c) {
  switch (c) {
    case Cut::land: return "land";
    case Cut::conv: return "conv";
    case Cut::stripe: return "stripe";
    case Cut::lse_merge: return "lse_merge";
    case Cut::elementwise: return "elementwise";
    case Cut::attnres: return "attnres";
    case Cut::balance: return "balance";
    case Cut::overlap: return "overlap";
  }
  return "?";
}

bool cut_from_name(const std::string& name, Cut* out) {
  for (Cut c : kAllCuts) {
    if (name == cut_name(c)) {
      *out = c;
      return true;
    }
  }
  return false;
}

std::string allowed_cut_names() {
  std::string s;
  for (Cut c : kAllCuts) s += std::string(s.empty() ? "" : ", ") + cut_name(c);
  return s;
}

bool cut_requires(Cut c, Cut* prerequisite) {
  if (c != Cut::balance) return false;
  *prerequisite = Cut::stripe;
  return true;
}

bool seed_cut(Cut c) { return c != Cut::attnres && c != Cut::balance && c != Cut::overlap; }

CutSet CutSet::all() {
  CutSet s;
  s.on.fill(true);
  return s;
}

CutSet CutSet::seed() {
  CutSet s;
  for (Cut c : kAllCuts) s.set(c, seed_cut(c));
  return s;
}

CutSet CutSet::without(Cut c) const {
  CutSet s = *this;
  s.set(c, false);
  for (Cut d : kAllCuts) {
    Cut needs;
    if (cut_requires(d, &needs) && needs == c) s = s.without(d);
  }
  return s;
}

std::string CutSet::problem() const {
  for (Cut c : kAllCuts) {
    Cut needs;
    if ((*this)[c] && cut_requires(c, &needs) && !(*this)[needs])
      return std::string("cut ") + cut_name(c) + " refines cut " + cut_name(needs) + " and needs it on; turn " +
             cut_name(needs) + " on too, or " + cut_name(c) + " off";
  }
  return "";
}

std::string CutSet::describe() const {
  std::string s;
  for (Cut c : kAllCuts)
    s += std::string(s.empty() ? "" : " ") + cut_name(c) + ((*this)[c] ? "=on" : "=off");
  return s;
}

std::string CutSet::short_name() const {
  if (*this == none()) return "none";
  if (*this == all()) return "all";
  std::string s;
  for (Cut c : kAllCuts)
    if ((*this)[c]) s += std::string(s.empty() ? "" : "+") + cut_name(c);
  return s;
}

}  // namespace pb
