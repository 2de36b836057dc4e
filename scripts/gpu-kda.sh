#!/usr/bin/env bash
# The KDA core on a device: build prefill-bench and test_kda, run the GPU test
# (float64 reference checks), then `prefill-bench kda` (K3 widths, 4096 and
# 16384 tokens, GEMM ceiling in the same run). Logs and kda.h5 go to $OUT; the
# benchmark's table is printed last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../gpu-out}
mkdir -p "$OUT"
source "$here/env.sh"
pb_build_logged "$OUT/build.log" prefill-bench test_kda || exit 1
rc=0
timeout 180 "$PB_BUILD/test_kda" >"$OUT/test_kda.log" 2>&1 || rc=$?
grep -E "MESSAGE|ERROR|FAILED|error" "$OUT/test_kda.log" | grep -v "^  logged" | head -80
tail -4 "$OUT/test_kda.log"
echo "test_kda exit $rc"
timeout 240 "$PB_BUILD/prefill-bench" kda --output "$OUT/kda.h5" --overwrite >"$OUT/kda.log" 2>&1
brc=$?
cat "$OUT/kda.log"
echo "prefill-bench kda exit $brc"
exit $((rc != 0 ? rc : brc))
