// Libraries loaded at run time rather than linked (NCCL, NVML, CUPTI), so a
// build needs none of them and a run says which one is missing.
//
//   open_first(names, flags, tried): dlopen each name in turn, the first that
//     loads; nullptr when none did, with what was tried (and dlerror's reason)
//     appended to `tried`.
//   resolve(lib, name, out, problem, library): out = dlsym(lib, name); when the
//     symbol is missing and `problem` is still empty, problem says so, naming
//     `library`. Returns whether it resolved.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace pb {

inline void* open_first(const std::vector<std::string>& names, int flags, std::string& tried) {
  for (const std::string& name : names) {
    if (void* lib = dlopen(name.c_str(), flags)) return lib;
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + (why ? std::string(why) : name);
  }
  return nullptr;
}

template <class Fn>
bool resolve(void* lib, const char* name, Fn*& out, std::string& problem, const char* library) {
  out = reinterpret_cast<Fn*>(dlsym(lib, name));
  if (!out && problem.empty()) problem = std::string("the ") + library + " library has no " + name;
  return out != nullptr;
}

}  // namespace pb
