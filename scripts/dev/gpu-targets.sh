#!/usr/bin/env bash
# A short device call: build the named test targets and run them through ctest.
# Usage: scripts/dev/gpu-targets.sh <ctest regex> <target>...   (logs under $OUT)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
regex=${1:?ctest regex}
shift
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
pb_build_logged "$OUT/build.log" "$@" || exit 1
(cd "$PB_BUILD" && ctest -R "$regex" --output-on-failure --timeout 300) >"$OUT/tests.log" 2>&1
rc=$?
grep -E "Test +#|tests passed|tests failed" "$OUT/tests.log" | tail -25
exit $rc
