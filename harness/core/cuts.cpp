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

CutSet CutSet::all() {
  CutSet s;
  s.on.fill(true);
  return s;
}

CutSet CutSet::seed() {
  CutSet s = all();
  s.set(Cut::attnres, false);
  return s;
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
