#!/usr/bin/env bash
# One device call made of steps, each logged under $OUT, a short summary last.
# Usage: scripts/dev/gpu-steps.sh <step>...
#   tests[=regex]                  ctest -L gpu (the GPU and MPI+GPU suites), optionally -R regex;
#                                  PB_TEST_JOBS suites at a time (default 1; RUN_SERIAL ones alone)
#   run=<scenario>=<name>[=opts]   mpirun -np <cp> prefill-bench run scenarios/<scenario>.yaml
#                                  -o $OUT/<name>.h5; opts: run options, ',' for spaces
#                                  (e.g. --set,serialize_ranks=true,--set,reps=5)
#   lane=<scenario>=<name>[=opts]  mpirun -np <cp> prefill-bench lane, as run
#   verify=<scenario>[=opts]       mpirun -np <cp> prefill-bench verify
#   plan=<scenario>[=opts]         prefill-bench plan (the memory budget and roofline)
#   bench=<kind>=<name>[=opts]     prefill-bench <kind> (kernels, fmha, kda, moe) -o $OUT/<name>.h5
#   sanitize[=tool,suite,...]      scripts/dev/sanitize.sh (its logs come back in logs.tgz)
#   regress=<scenario>=<baseline>  scripts/regress.sh scenarios/<scenario>.yaml <baseline> (the gate as CI runs it)
#   sweep=<scenario>=<name>[=opts] prefill-bench sweep scenarios/<scenario>.yaml -o $OUT/<name>.h5; a carried
#                                  build-carry/<name>.h5 (an earlier call's file) is copied there first, so the
#                                  sweep resumes: the points it holds are skipped
# The build comes first (carry .deps): every target, or PB_BUILD_TARGETS (e.g. prefill-bench,
# when no test step follows: about half the build). With a carried .pb-bin.tar.xz whose stamp
# equals the carried .pb-source (scripts/dev/pack-build.sh), it configures and unpacks instead.
# Every step gets PB_STEP_TIMEOUT seconds (default 540), within PB_CALL_BUDGET for the call (default 570). The logs come back as $OUT/logs.tgz.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
source "$here/../args.sh"
cd "$PB_ROOT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used,memory.total --format=csv,noheader >"$OUT/env.txt" 2>&1
B=$PB_BUILD
packed_stamp=""
if [[ -f .pb-bin.tar.xz ]]; then
  packed_stamp=$(tar -xJOf .pb-bin.tar.xz pb-bin.source) || echo "gpu-steps: cannot read the carried build"
fi
if [[ -n $packed_stamp && $packed_stamp == "$(cat .pb-source 2>/dev/null)" ]]; then
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release >"$OUT/build.log" 2>&1 && tar -xJf .pb-bin.tar.xz -C "$B" ||
    { tail -20 "$OUT/build.log"; echo "gpu-steps: unpacking the carried build failed"; exit 1; }
  export LD_LIBRARY_PATH=$B/carried-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  missing=$(ldd "$B/prefill-bench" | grep "not found")
  [[ -z $missing ]] || { echo "gpu-steps: the carried build lacks here: $missing"; exit 1; }
  export PB_PREBUILT=1
  echo "gpu-steps: the carried build of $(head -1 .pb-source)"
else
  [[ -n $packed_stamp ]] && echo "gpu-steps: the carried build is stale; building here"
  pb_build_logged "$OUT/build.log" ${PB_BUILD_TARGETS:-} || exit 1
fi
summary=()
budget=${PB_CALL_BUDGET:-570}  # seconds for the whole call: a step gets what is left, at most PB_STEP_TIMEOUT
for step in "$@"; do
  left=$((budget - SECONDS))
  if ((left < 20)); then
    summary+=("$step: skipped, the call's ${budget} s are spent")
    continue
  fi
  limit=${PB_STEP_TIMEOUT:-540}
  ((limit > left)) && limit=$left
  IFS='=' read -r kind a b c <<<"$step"
  opts=()
  case $kind in
    tests)
      (cd "$B" && timeout "$limit" ctest -L gpu -j"${PB_TEST_JOBS:-1}" --output-on-failure --timeout 600 ${a:+-R "$a"}) >"$OUT/tests.log" 2>&1
      summary+=("tests: $(grep -E 'tests passed|tests failed' "$OUT/tests.log" | tail -1)")
      grep -E "\(Failed\)|\(Timeout\)|Not Run" "$OUT/tests.log" | head -20
      ;;
    bench)
      [[ -n ${c:-} ]] && IFS=',' read -r -a opts <<<"$c"
      timeout "$limit" "$B/prefill-bench" "$a" -o "$OUT/$b.h5" --overwrite "${opts[@]}" >"$OUT/bench-$b.log" 2>&1
      summary+=("$step: exit $?")
      tail -15 "$OUT/bench-$b.log"
      ;;
    sanitize)
      IFS=',' read -r -a opts <<<"${a:-}"
      PB_SANITIZE_TIMEOUT=$limit timeout "$limit" bash scripts/dev/sanitize.sh "${opts[@]}" \
        >"$OUT/sanitize.log" 2>&1
      summary+=("$step: exit $?")
      tail -30 "$OUT/sanitize.log"
      ;;
    sweep)
      [[ -n ${c:-} ]] && IFS=',' read -r -a opts <<<"$c"
      [[ -f build-carry/$b.h5 ]] && cp "build-carry/$b.h5" "$OUT/$b.h5"
      timeout "$limit" "$B/prefill-bench" sweep "scenarios/$a.yaml" -o "$OUT/$b.h5" "${opts[@]}" >"$OUT/sweep-$b.log" 2>&1
      summary+=("$step: exit $?")
      grep -E "^point|measured|planned|FAILED|wrote" "$OUT/sweep-$b.log" | tail -20
      ;;
    regress)
      timeout "$limit" bash scripts/regress.sh "scenarios/$a.yaml" "$b" >"$OUT/regress-$a.log" 2>&1
      summary+=("$step: exit $?")
      tail -15 "$OUT/regress-$a.log"
      ;;
    run | lane | verify | plan)
      scenario=scenarios/$a.yaml
      extra=${b:-}${c:+=$c}  # verify, plan: the rest of the step after the scenario
      [[ $kind == run || $kind == lane ]] && extra=${c:-}
      [[ -n $extra ]] && IFS=',' read -r -a opts <<<"$extra"
      pb_parse_args "" "${opts[@]}"   # ranks takes only the --set overrides (PB_SET_ARGS)
      np=$("$B/prefill-bench" ranks "$scenario" "${PB_SET_ARGS[@]}" 2>/dev/null | grep -E '^[0-9]+$' || echo 1)
      log=$OUT/$kind-$a.log
      [[ $kind == run || $kind == lane ]] && log=$OUT/$kind-$b.log
      case $kind in
        run | lane) timeout "$limit" mpirun --oversubscribe -np "$np" "$B/prefill-bench" "$kind" "$scenario" \
                      -o "$OUT/$b.h5" --overwrite "${opts[@]}" >"$log" 2>&1 ;;
        verify) timeout "$limit" mpirun --oversubscribe -np "$np" "$B/prefill-bench" verify "$scenario" "${opts[@]}" \
                  >"$log" 2>&1 ;;
        plan) "$B/prefill-bench" plan "$scenario" -o "$OUT/plan-$a.h5" --overwrite "${opts[@]}" >"$log" 2>&1 ;;
      esac
      rc=$?
      summary+=("$step: exit $rc")
      grep -E "^memory|TTFT min|verify:|FAIL|skip|error|^deep rank|within 10%" "$log" | head -20
      ;;
    *) echo "gpu-steps: unknown step '$step'" ;;
  esac
done
printf '%s\n' "${summary[@]}"
# What comes back from a device call is at most 8 files: the logs travel as one.
(cd "$OUT" && tar -czf logs.tgz --remove-files ./*.log env.txt $([[ -d sanitize ]] && echo sanitize) 2>/dev/null)
