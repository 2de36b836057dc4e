#!/usr/bin/env bash
# Device helper: the wgmma walk at 16k x 96 heads -- kda.state_wgmma and kda.forward_wgmma.
# Needs a build (scripts/env.sh pb_build).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
timeout 120 "$PB_BUILD/prefill-bench" kda --tokens 16384 --reps 10 --warmup 2 -o /tmp/kda-walk.h5 --overwrite 2>&1 |
  grep -E "^kda.(state|forward)_wgmma|wgmma walk|GEMM ceiling"
