#!/usr/bin/env bash
# One device call made of steps, each logged under $OUT, a short summary last.
# Usage: scripts/dev/gpu-steps.sh <step>...
#   tests[=regex]                  ctest -L gpu (the GPU and MPI+GPU suites), optionally -R regex
#   run=<scenario>=<name>[=opts]   mpirun -np <cp> prefill-bench run scenarios/<scenario>.yaml
#                                  -o $OUT/<name>.h5; opts: run options, ',' for spaces
#                                  (e.g. --set,serialize_ranks=true,--set,reps=5)
#   verify=<scenario>[=opts]       mpirun -np <cp> prefill-bench verify
#   plan=<scenario>[=opts]         prefill-bench plan (the memory budget and roofline)
# The build runs first, always (carry .deps): every target, or PB_BUILD_TARGETS (e.g. prefill-bench,
# when no test step follows: about half the build). Every step gets PB_STEP_TIMEOUT seconds (default 540).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
source "$here/../args.sh"
cd "$PB_ROOT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used,memory.total --format=csv,noheader >"$OUT/env.txt" 2>&1
pb_build_logged "$OUT/build.log" ${PB_BUILD_TARGETS:-} || exit 1
B=$PB_BUILD
summary=()
limit=${PB_STEP_TIMEOUT:-540}
for step in "$@"; do
  IFS='=' read -r kind a b c <<<"$step"
  opts=()
  case $kind in
    tests)
      (cd "$B" && timeout "$limit" ctest -L gpu --output-on-failure --timeout 600 ${a:+-R "$a"}) >"$OUT/tests.log" 2>&1
      summary+=("tests: $(grep -E 'tests passed|tests failed' "$OUT/tests.log" | tail -1)")
      grep -E "\(Failed\)|\(Timeout\)|Not Run" "$OUT/tests.log" | head -20
      ;;
    run | verify | plan)
      scenario=scenarios/$a.yaml
      extra=${b:-}
      [[ $kind == run ]] && extra=${c:-}
      [[ -n $extra ]] && IFS=',' read -r -a opts <<<"$extra"
      pb_parse_args "" "${opts[@]}"   # ranks takes only the --set overrides (PB_SET_ARGS)
      np=$("$B/prefill-bench" ranks "$scenario" "${PB_SET_ARGS[@]}" 2>/dev/null | grep -E '^[0-9]+$' || echo 1)
      log=$OUT/$kind-$a.log
      [[ $kind == run ]] && log=$OUT/run-$b.log
      case $kind in
        run) timeout "$limit" mpirun --oversubscribe -np "$np" "$B/prefill-bench" run "$scenario" -o "$OUT/$b.h5" \
               --overwrite "${opts[@]}" >"$log" 2>&1 ;;
        verify) timeout "$limit" mpirun --oversubscribe -np "$np" "$B/prefill-bench" verify "$scenario" "${opts[@]}" \
                  >"$log" 2>&1 ;;
        plan) "$B/prefill-bench" plan "$scenario" -o "$OUT/plan-$a.h5" --overwrite "${opts[@]}" >"$log" 2>&1 ;;
      esac
      rc=$?
      summary+=("$step: exit $rc")
      grep -E "^memory|TTFT min|verify:|FAIL|skip|error" "$log" | head -20
      ;;
    *) echo "gpu-steps: unknown step '$step'" ;;
  esac
done
printf '%s\n' "${summary[@]}"
