#!/usr/bin/env bash
# Nsight Compute stall breakdown of one kernel (device call helper): the warp
# state sampling of every stall reason, per issued instruction, plus the
# headline throughputs. Usage as gpu-ncu.sh:
#   scripts/gpu-ncu-stalls.sh <kernel regex> <launches to skip> <out name> -- <prefill-bench args...>
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
regex=${1:?kernel regex}; skip=${2:?skip}; name=${3:?name}; shift 4
OUT=${OUT:-$here/../gpu-out}
source "$here/env.sh"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 240 "$ncu" --section SpeedOfLight --section WarpStateStats --print-details all \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
  -k "regex:$regex" --launch-skip "$skip" --launch-count 1 "$PB_BUILD/prefill-bench" "$@" >"$OUT/$name.txt" 2>&1
grep -E "Duration|DRAM Throughput|Compute \(SM\)|issue_stalled" "$OUT/$name.txt" | sort -k3 -n -r | awk '$NF+0 >= 0.2 || /Duration|DRAM|Compute/' | head -24
