#include "check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace pb {

namespace {
std::string& context_storage() {
  static std::string context;
  return context;
}

// "what", or "file:line: what" under PB_DEBUG.
std::string located(const char* file, int line, const std::string& what) {
  if (!debug_messages()) return what;
  return std::string(file) + ":" + std::to_string(line) + ": " + what;
}
}  // namespace

void set_error_context(const std::string& context) { context_storage() = context; }
const std::string& error_context() { return context_storage(); }

bool debug_messages() {
  const char* value = std::getenv("PB_DEBUG");
  return value && *value && std::strcmp(value, "0") != 0;
}

void throw_error(const char* file, int line, const std::string& what) { throw Error(located(file, line, what)); }

void warn_error(const char* file, int line, const std::string& what) {
  const std::string prefix = error_context().empty() ? "" : "[" + error_context() + "] ";
  std::fprintf(stderr, "%swarning: %s\n", prefix.c_str(), located(file, line, what).c_str());
}

}  // namespace pb
