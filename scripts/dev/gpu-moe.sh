#!/usr/bin/env bash
# The device call for the MoE family: build prefill-bench and the MoE / FFN / first
# token GPU tests, run the tests, then `prefill-bench moe`. Logs go to $OUT;
# the short table comes last. About 3-5 minutes on one H200 (the K3 expert
# weights, 15 GB, are allocated and filled once).
# Usage: scripts/dev/gpu-moe.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
tests=(test_moe_route test_moe_gemm test_moe_block)
pb_build_logged "$OUT/build.log" prefill-bench "${tests[@]}" || exit 1
status=0
for t in "${tests[@]}"; do
  "$PB_BUILD/$t" >"$OUT/$t.log" 2>&1
  rc=$?
  ((rc != 0)) && status=1
  echo "== $t: exit $rc"
  tail -4 "$OUT/$t.log"
done
"$PB_BUILD/prefill-bench" moe --output "$OUT/moe.h5" --overwrite >"$OUT/moe.log" 2>&1
rc=$?
((rc != 0)) && status=1
echo "== prefill-bench moe: exit $rc (full log: moe.log)"
tail -n 150 "$OUT/moe.log"  # the per-launch tables, then the summary last
exit $status
