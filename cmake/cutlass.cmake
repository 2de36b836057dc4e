# Optional cutlass MoE expert GEMM engine (kernels/moe/moe_gemm_cutlass.cu): the
# header-only CUTLASS / CuTe from the nvidia-cutlass wheel (docs/design.md §7,
# unpacked by scripts/setup.sh into .deps/cutlass/include). Sets
# PB_CUTLASS_ENABLED, and when it is ON: PB_CUTLASS_INCLUDE_DIR,
# PB_CUTLASS_VERSION. Never fails the configure: a missing piece turns the
# engine OFF with a STATUS line saying why. The kernel is Hopper-only (TMA +
# wgmma, sm_90a): the engine needs 90a among CMAKE_CUDA_ARCHITECTURES, and its
# one file is compiled for 90a alone.

set(PB_CUTLASS_DIR ${CMAKE_SOURCE_DIR}/.deps/cutlass/include CACHE PATH
    "CUTLASS headers (folder holding cutlass/ and cute/; scripts/setup.sh unpacks them from PyPI)")
option(PB_WITH_CUTLASS "Build the cutlass MoE GEMM engine when the CUTLASS headers are found" ON)

set(PB_CUTLASS_ENABLED OFF)
set(pb_cutlass_why "")
if(NOT PB_WITH_CUTLASS)
  set(pb_cutlass_why "PB_WITH_CUTLASS=OFF")
elseif(NOT EXISTS ${PB_CUTLASS_DIR}/cutlass/cutlass.h OR NOT EXISTS ${PB_CUTLASS_DIR}/cute/tensor.hpp)
  set(pb_cutlass_why "no cutlass/cutlass.h + cute/tensor.hpp in PB_CUTLASS_DIR=${PB_CUTLASS_DIR} (run scripts/setup.sh, or carry .deps/)")
elseif(NOT "90a" IN_LIST CMAKE_CUDA_ARCHITECTURES)
  set(pb_cutlass_why "CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES} lacks 90a (the kernel is sm_90a only)")
elseif(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.3)
  set(pb_cutlass_why "nvcc ${CMAKE_CUDA_COMPILER_VERSION} is older than 12.3 (ptr-array TMA needs 12.3+)")
else()
  file(STRINGS ${PB_CUTLASS_DIR}/cutlass/version.h pb_cutlass_defs REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) +[0-9]+")
  set(PB_CUTLASS_VERSION "")
  foreach(part MAJOR MINOR PATCH)
    string(REGEX MATCH "CUTLASS_${part} +([0-9]+)" _ "${pb_cutlass_defs}")
    list(APPEND PB_CUTLASS_VERSION "${CMAKE_MATCH_1}")
  endforeach()
  list(JOIN PB_CUTLASS_VERSION "." PB_CUTLASS_VERSION)
  set(PB_CUTLASS_ENABLED ON)
  set(PB_CUTLASS_INCLUDE_DIR ${PB_CUTLASS_DIR})
endif()

if(PB_CUTLASS_ENABLED)
  message(STATUS "cutlass MoE GEMM engine: ON (CUTLASS ${PB_CUTLASS_VERSION} at ${PB_CUTLASS_INCLUDE_DIR}, sm_90a)")
else()
  message(STATUS "cutlass MoE GEMM engine: OFF: ${pb_cutlass_why}")
endif()
