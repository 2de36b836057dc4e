#!/usr/bin/env bash
# A short device call: build the named test targets and run them through ctest.
# Usage: scripts/gpu-targets.sh <ctest regex> <target>...   (logs under $OUT)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
regex=${1:?ctest regex}
shift
OUT=${OUT:-$here/../gpu-out}
mkdir -p "$OUT"
source "$here/env.sh"
if ! pb_build "$@" >"$OUT/build.log" 2>&1; then
  grep -E "error" -A3 "$OUT/build.log" | head -40
  echo "gpu-targets: build failed"
  exit 1
fi
(cd "$PB_BUILD" && ctest -R "$regex" --output-on-failure --timeout 300) >"$OUT/tests.log" 2>&1
rc=$?
grep -E "Test +#|tests passed|tests failed" "$OUT/tests.log" | tail -25
exit $rc
