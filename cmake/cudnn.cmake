# Optional cuDNN FMHA engine (kernels/fmha/fmha_cudnn.cu): cuDNN 9 (header + library)
# and the header-only cuDNN frontend (docs/design.md §7, unpacked by scripts/setup.sh).
# Sets PB_CUDNN_ENABLED, and when it is ON: PB_CUDNN_INCLUDE_DIR, PB_CUDNN_LIBRARY,
# PB_CUDNN_VERSION, PB_CUDNN_FRONTEND_VERSION. Never fails the configure: a
# missing piece turns the engine OFF with a STATUS line saying why.

set(PB_CUDNN_FRONTEND_DIR ${CMAKE_SOURCE_DIR}/.deps/cudnn-frontend/include CACHE PATH
    "cuDNN frontend headers (folder holding cudnn_frontend.h; scripts/setup.sh unpacks them from PyPI)")
option(PB_WITH_CUDNN "Build the cuDNN FMHA engine when cuDNN 9 and the frontend headers are found" ON)

set(PB_CUDNN_ENABLED OFF)
set(pb_cudnn_why "")

# cuDNN may come with the CUDA toolkit, the distribution, or only a pip wheel
# (nvidia-cudnn-cu12/13: <site-packages>/nvidia/cudnn/{include,lib}).
set(pb_cudnn_pip_include "")
set(pb_cudnn_pip_lib "")
foreach(pb_py python3 /usr/bin/python3)
  find_program(pb_cudnn_py_${pb_py} NAMES ${pb_py} NO_CACHE)
  if(pb_cudnn_py_${pb_py})
    execute_process(COMMAND ${pb_cudnn_py_${pb_py}} -c
                    "import nvidia.cudnn as m; print(list(m.__path__)[0])"
                    OUTPUT_VARIABLE pb_cudnn_pip_root OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE pb_cudnn_py_rc ERROR_QUIET)
    if(pb_cudnn_py_rc EQUAL 0 AND IS_DIRECTORY "${pb_cudnn_pip_root}")
      list(APPEND pb_cudnn_pip_include ${pb_cudnn_pip_root}/include)
      list(APPEND pb_cudnn_pip_lib ${pb_cudnn_pip_root}/lib)
    endif()
  endif()
endforeach()

if(NOT PB_WITH_CUDNN)
  set(pb_cudnn_why "PB_WITH_CUDNN=OFF")
else()
  find_path(CUDNN_INCLUDE_DIR cudnn.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/include /usr/local/include /usr/include/x86_64-linux-gnu
                  ${pb_cudnn_pip_include})
  find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9
               HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu /usr/local/lib /usr/local/cuda/lib64
                     ${pb_cudnn_pip_lib})
  set(pb_cudnn_version_h ${CUDNN_INCLUDE_DIR}/cudnn_version.h)
  if(NOT EXISTS ${pb_cudnn_version_h})
    set(pb_cudnn_version_h ${CUDNN_INCLUDE_DIR}/cudnn.h)
  endif()
  if(NOT CUDNN_INCLUDE_DIR OR NOT CUDNN_LIBRARY OR NOT EXISTS ${pb_cudnn_version_h})
    set(pb_cudnn_why "cuDNN not found (cudnn.h: ${CUDNN_INCLUDE_DIR}, libcudnn: ${CUDNN_LIBRARY})")
  else()
    file(STRINGS ${pb_cudnn_version_h} pb_cudnn_defs REGEX "^#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) +[0-9]+")
    set(PB_CUDNN_VERSION "")
    foreach(part MAJOR MINOR PATCHLEVEL)
      string(REGEX MATCH "CUDNN_${part} +([0-9]+)" _ "${pb_cudnn_defs}")
      list(APPEND PB_CUDNN_VERSION "${CMAKE_MATCH_1}")
    endforeach()
    list(GET PB_CUDNN_VERSION 0 pb_cudnn_major)
    list(JOIN PB_CUDNN_VERSION "." PB_CUDNN_VERSION)
    if(NOT pb_cudnn_major OR pb_cudnn_major LESS 9)
      set(pb_cudnn_why "cuDNN ${PB_CUDNN_VERSION} at ${CUDNN_INCLUDE_DIR} is older than 9")
    elseif(NOT EXISTS ${PB_CUDNN_FRONTEND_DIR}/cudnn_frontend.h)
      set(pb_cudnn_why "no cudnn_frontend.h in PB_CUDNN_FRONTEND_DIR=${PB_CUDNN_FRONTEND_DIR} (run scripts/setup.sh, or carry .deps/)")
    else()
      file(STRINGS ${PB_CUDNN_FRONTEND_DIR}/cudnn_frontend_version.h pb_fe_defs
           REGEX "^#define CUDNN_FRONTEND_(MAJOR|MINOR|PATCH)_VERSION +[0-9]+")
      set(PB_CUDNN_FRONTEND_VERSION "")
      foreach(part MAJOR MINOR PATCH)
        string(REGEX MATCH "CUDNN_FRONTEND_${part}_VERSION +([0-9]+)" _ "${pb_fe_defs}")
        list(APPEND PB_CUDNN_FRONTEND_VERSION "${CMAKE_MATCH_1}")
      endforeach()
      list(JOIN PB_CUDNN_FRONTEND_VERSION "." PB_CUDNN_FRONTEND_VERSION)
      # The frontend bundles nlohmann-json (cudnn_frontend/thirdparty); older
      # releases may want the system one (Debian nlohmann-json3-dev).
      set(PB_CUDNN_JSON_INCLUDE_DIR "")
      if(NOT EXISTS ${PB_CUDNN_FRONTEND_DIR}/cudnn_frontend/thirdparty/nlohmann/json.hpp)
        find_path(PB_NLOHMANN_JSON_INCLUDE_DIR nlohmann/json.hpp HINTS /usr/include /usr/local/include)
        if(PB_NLOHMANN_JSON_INCLUDE_DIR)
          set(PB_CUDNN_JSON_INCLUDE_DIR ${PB_NLOHMANN_JSON_INCLUDE_DIR})
        else()
          set(pb_cudnn_why "nlohmann/json.hpp not found (install nlohmann-json3-dev)")
        endif()
      endif()
      if(NOT pb_cudnn_why)
        set(PB_CUDNN_ENABLED ON)
        set(PB_CUDNN_INCLUDE_DIR ${CUDNN_INCLUDE_DIR})
        set(PB_CUDNN_LIBRARY ${CUDNN_LIBRARY})
      endif()
    endif()
  endif()
endif()

if(PB_CUDNN_ENABLED)
  message(STATUS "cuDNN FMHA engine: ON (cudnn ${PB_CUDNN_VERSION} ${PB_CUDNN_LIBRARY}, frontend ${PB_CUDNN_FRONTEND_VERSION})")
else()
  message(STATUS "cuDNN FMHA engine: OFF: ${pb_cudnn_why}")
endif()
