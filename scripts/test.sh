#!/usr/bin/env bash
# The test command: set-up, build, then every CTest suite. GPU suites report
# "skipped" where no CUDA device is visible. Extra arguments go to ctest
# (e.g. scripts/test.sh -L gpu).
#
# scripts/test.sh --sanitize [ctest arguments]: instead, the host suites (no
# CUDA object: parse, plan, schedule, compare, results, projection, trace, the
# doorbell protocol, the gang, descriptor passing, the kernels' C++ references)
# built with AddressSanitizer and UndefinedBehaviorSanitizer in their own
# folder ($PB_BUILD-sanitize; cmake -DPB_SANITIZE=ON, target pb_sanitized) and
# run there (label sanitized). CI runs both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sanitize=0
if [[ ${1:-} == --sanitize ]]; then
  sanitize=1
  shift
fi
bash "$here/setup.sh"
source "$here/env.sh"
if ((sanitize)); then
  PB_BUILD=$PB_BUILD-sanitize
  PB_CMAKE_ARGS="${PB_CMAKE_ARGS:-} -DPB_SANITIZE=ON" pb_build pb_sanitized
  cd "$PB_BUILD"
  ctest -L sanitized --output-on-failure --timeout 600 "$@"
  exit
fi
pb_build
cd "$PB_BUILD"
ctest --output-on-failure --timeout 600 "$@"
