// Error checking for every CUDA, cuBLAS, NCCL and MPI call, in every build type.
//
//   PB_CHECK(cond, "message")      throws pb::Error when cond is false
//   PB_CUDA(expr)                  throws when a runtime call fails
//   PB_CUDA_LAUNCH()               throws when the last launch failed (call after every <<<>>>)
//   PB_CUDA_NOTHROW(expr)          prints instead of throwing: for destructors
//
// Library-specific twins (cuBLAS, cuDNN, NCCL, the driver API) live beside
// their one user and throw through pb::throw_error the same way.
// A message states what failed (for CUDA calls, the failing expression); the
// source file and line are added only with the environment variable PB_DEBUG
// set (and not "0"). Errors carry no process prefix: whoever prints them adds
// one (Gang::fail: "[rank r on host] error: ..."). Warnings are printed here,
// prefixed with the process context that the driver sets once with
// pb::set_error_context().
#pragma once

#include <stdexcept>
#include <string>

namespace pb {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "rank 3 on gpu07", set by the MPI driver; empty in single-process tools.
void set_error_context(const std::string& context);
const std::string& error_context();

// Whether PB_DEBUG asks for source locations in messages.
bool debug_messages();

[[noreturn]] void throw_error(const char* file, int line, const std::string& what);
void warn_error(const char* file, int line, const std::string& what);

}  // namespace pb

#define PB_CHECK(cond, msg)                                                  \
  do {                                                                       \
    if (!(cond)) ::pb::throw_error(__FILE__, __LINE__, std::string(msg));    \
  } while (0)

// The CUDA runtime checks (check_cuda.h) come with this header wherever the
// runtime's headers are in scope; include check_cuda.h to have them regardless.
#if defined(__CUDACC__) || defined(CUDART_VERSION)
#include "check_cuda.h"
#endif
