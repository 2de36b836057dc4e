// Where the tokens lie across the CP ranks (scenario key `layout`):
// contiguous segments, or the zigzag chunks (docs/design.md §11). The
// schedules that follow from a layout live in harness/analytic/schedule.h.
#pragma once

#include <string>
#include <vector>

namespace pb {

enum class Layout { contiguous, zigzag };
const char* layout_name(Layout l);
bool layout_from_name(const std::string& name, Layout* out);
std::vector<std::string> layout_names();  // contiguous, zigzag

}  // namespace pb
