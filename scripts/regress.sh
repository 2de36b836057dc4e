#!/usr/bin/env bash
# The regression check CI can run on a GPU machine: the scenario once more
# (scripts/bench.sh: set-up, build, mpirun -np <cp> prefill-bench run), then
# `prefill-bench compare --baseline` against a committed results file. Exit 0
# when no variant's TTFT regressed past the threshold (median delta above it
# and a one-sided Mann-Whitney U test, README "compare and the regression
# check"), 1 when one did, other codes for failures.
# Usage: scripts/regress.sh <scenario.yaml> <baseline.h5> [max regression, e.g. 3%] [run options...]
#   scripts/regress.sh scenarios/cp1-16k.yaml results/h200/cp1-16k.h5 3%
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scenario=${1:?usage: scripts/regress.sh <scenario.yaml> <baseline.h5> [max regression] [run options]}
baseline=${2:?baseline results file}
threshold=${3:-3%}
shift $(($# >= 3 ? 3 : $#))
[[ -f $baseline ]] || { echo "regress.sh: no baseline file '$baseline'" >&2; exit 2; }
out=$(mktemp -d)/candidate.h5
bash "$here/bench.sh" "$scenario" --output "$out" "$@"
source "$here/env.sh"
"$PB_BUILD/prefill-bench" compare --baseline "$baseline" "$out" --max-regression "$threshold"
