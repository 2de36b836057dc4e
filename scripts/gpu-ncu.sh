#!/usr/bin/env bash
# Nsight Compute on one kernel of a benchmark subcommand (device call helper).
# Usage: scripts/gpu-ncu.sh <kernel regex> <launches to skip> <out name> -- <prefill-bench args...>
# Prints the headline metrics; the full report text goes to $OUT/<out name>.txt.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
regex=${1:?kernel regex}; skip=${2:?skip}; name=${3:?name}; shift 4
OUT=${OUT:-$here/../gpu-out}
source "$here/env.sh"
ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout 240 "$ncu" --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats --section ComputeWorkloadAnalysis \
  -k "regex:$regex" --launch-skip "$skip" --launch-count 1 "$PB_BUILD/prefill-bench" "$@" >"$OUT/$name.txt" 2>&1
grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occ|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Executed Ipc A|Shared Memory Config|Dynamic Shared|Block Limit" "$OUT/$name.txt" | head -40
