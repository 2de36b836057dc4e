// Text helpers every layer of the harness shares.
#pragma once

#include <string>
#include <vector>

namespace pb {

// The items with `separator` between them: "a, b, c".
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");
// The pieces of `text` between separators, empty ones dropped: split("a b  c", ' ') is {a, b, c}.
std::vector<std::string> split(const std::string& text, char separator);

}  // namespace pb
