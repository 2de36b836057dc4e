#!/usr/bin/env bash
# Device helper: the wgmma walk at 16k x 96 heads -- kda.state_wgmma and kda.forward_wgmma,
# then the walk with PB_KDA_WALK_PROBE=1 (the per-chunk chain alone: no loads after chunk 1)
# and =2 (the loads alone: no compute). Needs a build (scripts/env.sh pb_build).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
walk_rows() {
  timeout 120 "$PB_BUILD/prefill-bench" kda --tokens 16384 --reps 10 --warmup 2 -o /tmp/kda-walk.h5 --overwrite 2>&1 |
    grep -E "^kda.(state|forward)_wgmma|wgmma walk|GEMM ceiling"
}
walk_rows
for probe in 1 2; do
  echo "PB_KDA_WALK_PROBE=$probe: $(PB_KDA_WALK_PROBE=$probe walk_rows | grep state_wgmma)"
done
