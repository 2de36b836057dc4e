// The message of the pb::Error a test body throws (a test failure when it
// throws none), and a substring check for it.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "check.h"

namespace pb::test {

inline std::string error_of(const std::function<void()>& body) {
  try {
    body();
  } catch (const pb::Error& error) {
    return error.what();
  }
  FAIL("no pb::Error was thrown");
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace pb::test
