#!/usr/bin/env bash
# The regression gate CI can run on a GPU machine: the scenario once more
# (scripts/bench.sh: set-up, build, mpirun -np <cp> prefill-bench run), then
# `prefill-bench compare --baseline` against a committed results file.
#   scripts/regress.sh <scenario.yaml> <baseline.h5> [--max-regression 3%] [--only a,b] [run options]
#   scripts/regress.sh scenarios/cp1-16k.yaml results/h200/cp1-16k.h5 --max-regression 3%
# Options go in any position; a third word is the max regression as well
# (regress.sh s.yaml b.h5 3%). Exit codes are the README's table: 0 every
# judged variant within the allowance, 1 a variant's TTFT regressed, 2 cannot
# judge (files of different kinds or scenarios, incomplete, a baseline variant
# missing) or an error, 3 no CUDA device for the run. Before the
# run, the baseline is judged against itself: a threshold compare refuses, or
# a baseline the gate cannot judge, stops here (exit 2) rather than after it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: scripts/regress.sh <scenario.yaml> <baseline.h5> [--max-regression 3%] [--only a,b] [run options]"
source "$here/args.sh"
pb_script_args "$usage" "--max-regression= --only=" 2 3 "$@"
scenario=${PB_WORDS[0]}
baseline=${PB_WORDS[1]}
threshold=${PB_FLAGS[--max-regression]:-${PB_WORDS[2]:-3%}}
gate=(--max-regression "$threshold")
[[ -n ${PB_FLAGS[--only]:-} ]] && gate+=(--only "${PB_FLAGS[--only]}")
[[ -f $baseline ]] || { echo "regress.sh: no baseline file '$baseline'" >&2; exit 2; }

source "$here/env.sh"
if [[ ${PB_PREBUILT:-0} != 1 ]]; then  # PB_PREBUILT=1: the build in $PB_BUILD as it is
  bash "$here/setup.sh"
  pb_build prefill-bench
fi
bin=$PB_BUILD/prefill-bench
if ! check=$("$bin" compare --baseline "$baseline" "$baseline" "${gate[@]}" 2>&1); then
  grep -E "error|cannot judge|^    " <<<"$check" >&2 || true
  echo "regress.sh: the baseline '$baseline' cannot serve as the gate with ${gate[*]}" >&2
  exit 2
fi
out=$(mktemp -d)/candidate.h5
bash "$here/bench.sh" "$scenario" --output "$out" "${PB_RUN_ARGS[@]}"
"$bin" compare --baseline "$baseline" "$out" "${gate[@]}"
