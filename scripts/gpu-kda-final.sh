#!/usr/bin/env bash
# Device helper: the KDA core's acceptance run. Builds prefill-bench, test_kda and test_kda_cp;
# runs test_kda, test_kda_cp at CP2 and CP4 (serialized ranks on one GPU), then
# `prefill-bench kda` (4096 and 16384 tokens, GEMM ceiling in the same run). Logs: $OUT/tests.log,
# $OUT/kda.log; the benchmark's file: $OUT/kda.h5. The forward's rows are printed last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../gpu-out}
mkdir -p "$OUT"
source "$here/env.sh"
pb_build_logged /tmp/pb-build.log prefill-bench test_kda test_kda_cp || exit 1
T=$OUT/tests.log
timeout 200 "$PB_BUILD/test_kda" >>"$T" 2>&1
echo "test_kda exit $?"
for np in 2 4; do
  timeout 200 mpirun --oversubscribe -np $np "$PB_BUILD/test_kda_cp" >>"$T" 2>&1
  echo "test_kda_cp -np $np exit $?"
done
grep -E "k3 cp 4 rank" "$T" | tail -4
timeout 240 "$PB_BUILD/prefill-bench" kda -o "$OUT/kda.h5" --overwrite >"$OUT/kda.log" 2>&1
echo "prefill-bench kda exit $?"
grep -E "GEMM ceiling|^kda\.(forward_wgmma|prepare|state_wgmma)\." "$OUT/kda.log"
