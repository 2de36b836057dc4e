#!/usr/bin/env bash
# Nsight Compute on one kernel of a benchmark subcommand (device call helper).
# Usage: scripts/dev/gpu-ncu.sh [--stalls] <kernel regex> <launches to skip> <out name> -- <prefill-bench args...>
# Prints the headline metrics; the full report text goes to $OUT/<out name>.txt.
# --stalls: the warp-state breakdown instead (every stall reason, cycles per
# issued instruction, the reasons >= 0.2 printed largest first).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
stalls=0
[[ ${1:-} == --stalls ]] && { stalls=1; shift; }
regex=${1:?kernel regex}; skip=${2:?skip}; name=${3:?name}; shift 4
OUT=${OUT:-$here/../../gpu-out}
source "$here/../env.sh"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
if ((stalls)); then
  what=(--section SpeedOfLight --section WarpStateStats --print-details all
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio')
else
  what=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
    --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis)
fi
timeout 240 "$ncu" --clock-control none "${what[@]}" -k "regex:$regex" --launch-skip "$skip" --launch-count 1 \
  "$PB_BUILD/prefill-bench" "$@" >"$OUT/$name.txt" 2>&1
if ((stalls)); then
  grep -E "Duration|DRAM Throughput|Compute \(SM\)|issue_stalled" "$OUT/$name.txt" | sort -k3 -n -r |
    awk '$NF+0 >= 0.2 || /Duration|DRAM|Compute/' | head -24
else
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Executed Ipc A|Shared Memory Config|Dynamic Shared|Block Limit" "$OUT/$name.txt" | head -40
fi
