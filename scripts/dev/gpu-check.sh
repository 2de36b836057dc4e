#!/usr/bin/env bash
# One device call: build, the GPU test suites, then the kernels benchmark.
# Logs and result files go to $OUT (the device tool brings them back); the
# short table prints last. Usage: scripts/dev/gpu-check.sh [ctest -R regex]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
{
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,clocks.sm,clocks.mem --format=csv
  nvcc --version | tail -1
  cmake --version | head -1
} 2>&1 | tee "$OUT/env.txt"

bash "$here/../setup.sh" 2>&1 | tee -a "$OUT/env.txt"
if ! pb_build >"$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"
  echo "gpu-check: build failed (full log in build.log)"
  exit 1
fi
(cd "$PB_BUILD" && ctest -L gpu --output-on-failure --timeout 600 ${1:+-R "$1"}) >"$OUT/gpu-tests.log" 2>&1
tests_rc=$?
"$PB_BUILD/prefill-bench" kernels --output "$OUT/kernels-h200.h5" --overwrite >"$OUT/kernels.log" 2>&1
bench_rc=$?
"$PB_BUILD/prefill-bench" fmha --output "$OUT/fmha-h200.h5" --overwrite >"$OUT/fmha.log" 2>&1
fmha_rc=$?
grep -E "cuDNN FMHA engine" "$OUT/build.log" | tail -1
grep -E "tests passed|tests failed|Failed|Passed|\*\*\*" "$OUT/gpu-tests.log" | tail -20
cat "$OUT/kernels.log" "$OUT/fmha.log"
echo "gpu-check: tests rc=$tests_rc, kernels rc=$bench_rc, fmha rc=$fmha_rc"
