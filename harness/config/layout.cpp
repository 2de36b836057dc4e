#include "layout.h"

namespace pb {

const char* layout_name(Layout l) { return l == Layout::zigzag ? "zigzag" : "contiguous"; }

bool layout_from_name(const std::string& name, Layout* out) {
  for (Layout l : {Layout::contiguous, Layout::zigzag})
    if (name == layout_name(l)) {
      *out = l;
      return true;
    }
  return false;
}

std::vector<std::string> layout_names() { return {"contiguous", "zigzag"}; }

}  // namespace pb
