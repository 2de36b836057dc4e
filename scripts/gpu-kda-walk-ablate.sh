#!/usr/bin/env bash
# Device helper (A/B of the wgmma walk at 16k x 96 heads): kda.state_wgmma and
# kda.forward_wgmma for each PB_KDA_WALK_FUSED value given (default "0 1"), then the
# probes PB_KDA_WALK_PROBE=1 (the chain alone) and 2 (the loads alone). Needs a build.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/env.sh"
walk_rows() {
  timeout 120 "$PB_BUILD/prefill-bench" kda --tokens 16384 --reps 10 --warmup 2 -o /tmp/kda-ab.h5 --overwrite 2>&1 |
    grep -E "^kda.(state|forward)_wgmma|wgmma walk|GEMM ceiling"
}
for f in ${1:-0 1}; do
  echo "== PB_KDA_WALK_FUSED=$f"; PB_KDA_WALK_FUSED=$f walk_rows
  for probe in 1 2; do
    echo "   PB_KDA_WALK_PROBE=$probe: $(PB_KDA_WALK_FUSED=$f PB_KDA_WALK_PROBE=$probe walk_rows | grep state_wgmma)"
  done
done
