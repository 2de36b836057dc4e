#include "check.h"

#include <cstdio>

namespace pb {

namespace {
std::string& context_storage() {
  static std::string context;
  return context;
}

std::string format(const char* file, int line, const std::string& what) {
  std::string msg;
  if (!error_context().empty()) msg += "[" + error_context() + "] ";
  msg += std::string(file) + ":" + std::to_string(line) + ": " + what;
  return msg;
}
}  // namespace

void set_error_context(const std::string& context) { context_storage() = context; }
const std::string& error_context() { return context_storage(); }

void throw_error(const char* file, int line, const std::string& what) {
  throw Error(format(file, line, what));
}

void warn_error(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "warning: %s\n", format(file, line, what).c_str());
}

}  // namespace pb
