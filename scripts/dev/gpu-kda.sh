#!/usr/bin/env bash
# The KDA core on a device (its acceptance run): build prefill-bench, test_kda and test_kda_cp;
# run test_kda (float64 reference checks), test_kda_cp at CP2 and CP4 (serialized ranks on one
# GPU), then `prefill-bench kda` (K3 widths, 4096 and 16384 tokens, GEMM ceiling in the same
# run). Logs and kda.h5 go to $OUT; the benchmark's table is printed last.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
pb_build_logged "$OUT/build.log" prefill-bench test_kda test_kda_cp || exit 1
rc=0
timeout 180 "$PB_BUILD/test_kda" >"$OUT/test_kda.log" 2>&1 || rc=$?
grep -E "MESSAGE|ERROR|FAILED|error" "$OUT/test_kda.log" | grep -v "^  logged" | head -80
tail -4 "$OUT/test_kda.log"
echo "test_kda exit $rc"
for np in 2 4; do
  timeout 200 mpirun --oversubscribe -np $np "$PB_BUILD/test_kda_cp" >"$OUT/test_kda_cp$np.log" 2>&1
  crc=$?
  grep -E "k3 cp $np rank|FAILED" "$OUT/test_kda_cp$np.log" | tail -$np
  echo "test_kda_cp -np $np exit $crc"
  ((crc != 0 && rc == 0)) && rc=$crc
done
timeout 240 "$PB_BUILD/prefill-bench" kda --output "$OUT/kda.h5" --overwrite >"$OUT/kda.log" 2>&1
brc=$?
cat "$OUT/kda.log"
echo "prefill-bench kda exit $brc"
exit $((rc != 0 ? rc : brc))
