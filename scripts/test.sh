#!/usr/bin/env bash
# The test command: set-up, build, then every CTest suite. GPU suites report
# "skipped" where no CUDA device is visible. Extra arguments go to ctest
# (e.g. scripts/test.sh -L gpu).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bash "$here/setup.sh"
source "$here/env.sh"
pb_build
cd "$PB_BUILD"
ctest --output-on-failure --timeout 600 "$@"
