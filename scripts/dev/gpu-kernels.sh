#!/usr/bin/env bash
# A short device call for one kernel family: build its GPU test and the
# benchmark, run the test, then `prefill-bench kernels --family F`.
# Usage: scripts/dev/gpu-kernels.sh <family: land|conv|lse_merge|elementwise|attnres> <test target>
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
family=${1:?family}
test=${2:?test target, e.g. test_elementwise}
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
pb_build_logged "$OUT/build.log" prefill-bench "$test" || exit 1
"$PB_BUILD/$test" 2>&1 | tail -15 | tee "$OUT/test.log"
"$PB_BUILD/prefill-bench" kernels --family "$family" --output "$OUT/kernels.h5" --overwrite 2>&1 | tee "$OUT/kernels.log"
