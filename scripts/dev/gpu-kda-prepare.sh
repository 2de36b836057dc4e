#!/usr/bin/env bash
# Device helper: the KDA prepare at 16k x 96 heads. Builds prefill-bench and test_kda, runs
# test_kda, then the kda rows (prepare, forward_wgmma, state_wgmma), then Nsight Compute on one
# kda_prepare_kernel launch (clocks left alone): headline metrics and warp stalls printed, the
# per-SASS-line source page (instructions executed, stall samples) to $OUT/prepare-sass.csv.
# Set PB_SKIP_NCU=1 to skip it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
pb_build_logged "$OUT/build.log" prefill-bench test_kda || exit 1
timeout 240 "$PB_BUILD/test_kda" >"$OUT/test_kda.log" 2>&1
echo "test_kda exit $? ($(tail -2 "$OUT/test_kda.log" | tr '\n' ' '))"
rows() {
  timeout 150 "$PB_BUILD/prefill-bench" kda --tokens 16384 --reps 10 --warmup 2 -o /tmp/kda-prep.h5 --overwrite 2>&1 |
    grep -E "^kda\.(forward|prepare|state_wgmma)|wgmma walk|GEMM ceiling|check"
}
rows
[[ ${PB_SKIP_NCU:-0} == 1 ]] && exit 0
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 200 "$ncu" --clock-control none --set full --import-source yes -k regex:kda_prepare_kernel --launch-count 1 -o /tmp/prep -f \
  "$PB_BUILD/prefill-bench" kda --tokens 16384 --reps 1 --warmup 0 -o /tmp/kda-ncu.h5 --overwrite >"$OUT/ncu.log" 2>&1
echo "ncu exit $?"
"$ncu" --import /tmp/prep.ncu-rep --page source --print-source sass --csv >"$OUT/prepare-sass.csv" 2>&1
"$ncu" --import /tmp/prep.ncu-rep --page details --print-details all >"$OUT/prepare-details.txt" 2>&1
grep -E "Duration|DRAM Throughput|Compute \(SM\)|Executed Ipc A|Issue Slots Busy|Achieved Occupancy|Registers Per|No Eligible|Warp Cycles Per Issued|Executed Instructions  " \
  "$OUT/prepare-details.txt" | head -20
"$ncu" --import /tmp/prep.ncu-rep --page raw --csv \
  --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' 2>/dev/null |
  python3 -c '
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) >= 3:
    pairs = [(h, v) for h, v in zip(rows[0], rows[2]) if "issue_stalled" in h]
    pairs = sorted(pairs, key=lambda p: -float(p[1].replace(",", "") or 0))
    for h, v in pairs[:10]:
        print("  stall", h.replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", ""), v)'
ls -la "$OUT"
