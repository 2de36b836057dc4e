#!/usr/bin/env bash
# Runs a command while nvidia-smi samples the SM clock, power and temperature
# every 20 ms into $OUT/<name>.csv (reading only; clocks are never set).
# Usage: scripts/dev/gpu-clocks.sh <name> -- <command...>
set -uo pipefail
name=${1:?name}; shift 2
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)/../gpu-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 20 >"$OUT/$name.csv" 2>&1 &
smi=$!
"$@"
rc=$?
kill "$smi" 2>/dev/null
wait "$smi" 2>/dev/null
exit $rc
