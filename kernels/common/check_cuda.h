// PB_CUDA, PB_CUDA_LAUNCH and PB_CUDA_NOTHROW (check.h describes them): the
// CUDA runtime's half of the error checks, for code that includes the runtime.
#pragma once

#include "check.h"
#include <cuda_runtime_api.h>
#define PB_CUDA(expr)                                                        \
  do {                                                                       \
    cudaError_t pb_err_ = (expr);                                            \
    if (pb_err_ != cudaSuccess)                                              \
      ::pb::throw_error(__FILE__, __LINE__,                                  \
                        std::string(#expr) + ": " + cudaGetErrorName(pb_err_) \
                            + " (" + cudaGetErrorString(pb_err_) + ")");     \
  } while (0)
#define PB_CUDA_LAUNCH() PB_CUDA(cudaGetLastError())
#define PB_CUDA_NOTHROW(expr)                                                \
  do {                                                                       \
    cudaError_t pb_err_ = (expr);                                            \
    if (pb_err_ != cudaSuccess)                                              \
      ::pb::warn_error(__FILE__, __LINE__,                                   \
                       std::string(#expr) + ": " + cudaGetErrorName(pb_err_)); \
  } while (0)
