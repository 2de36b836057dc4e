#!/usr/bin/env bash
# One device call for a development round: build everything, run the GPU
# suites given (and the MPI+GPU ones), then the benchmarks given. Logs are
# concatenated so that few files come back: $OUT/tests.log, $OUT/bench.log,
# plus each benchmark's .h5. Usage:
#   scripts/dev/gpu-round.sh "test_a test_b" "mpi:test_x" "kda moe kernels:attnres lane:cp4-64k"
# Benchmark specs: kernels:<family>, lane:<scenario> (serialized ranks),
# lane-in-place:<scenario> (helped windows in place, helped_in_place=true),
# lane-back-to-back:<scenario> (serialized
# turns with no idle before them, turn_settle_ms=0), verify:<scenario>
# (mpirun -np cp verify), or a single-process command (kda, moe, fmha).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$here/../../gpu-out}
mkdir -p "$OUT"
source "$here/../env.sh"
pb_build_logged /tmp/pb-build.log || exit 1
grep -E "cuDNN FMHA engine|cutlass MoE GEMM engine" /tmp/pb-build.log | tail -2
B=$PB_BUILD
for t in ${1:-}; do
  timeout "${PB_TEST_TIMEOUT:-300}" "$B/$t" >>"$OUT/tests.log" 2>&1
  rc=$?
  echo "$t: exit $rc"
  ((rc != 0)) && grep -E "ERROR|FAILED|error" "$OUT/tests.log" | tail -8
done
for spec in ${2:-}; do
  t=${spec#mpi:}
  for np in 4 2; do
    timeout 200 mpirun --oversubscribe -np $np "$B/$t" >"/tmp/$t-$np.log" 2>&1
    rc=$?
    cat "/tmp/$t-$np.log" >>"$OUT/tests.log"
    echo "$t -np $np: exit $rc"
    grep -E "rel-L2|ERROR|error:" "/tmp/$t-$np.log" | head -12
  done
done
for spec in ${3:-}; do
  cmd=${spec%%:*}
  arg=${spec#*:}
  [[ $arg == "$spec" ]] && arg=""
  echo "== $spec" >>"$OUT/bench.log"
  case $cmd in
    kernels) timeout 300 "$B/prefill-bench" kernels --family "$arg" -o "$OUT/$arg.h5" --overwrite >/tmp/b.log 2>&1 ;;
    lane | lane-in-place | lane-back-to-back)
      np=$("$B/prefill-bench" ranks "scenarios/$arg.yaml")
      opts=(--set serialize_ranks=true)
      [[ $cmd == lane-in-place ]] && opts+=(--set helped_in_place=true)
      [[ $cmd == lane-back-to-back ]] && opts+=(--set turn_settle_ms=0)
      timeout 300 mpirun --oversubscribe -np "$np" "$B/prefill-bench" lane "scenarios/$arg.yaml" "${opts[@]}" \
        -o "$OUT/$cmd-$arg.h5" --overwrite >/tmp/b.log 2>&1 ;;
    verify)
      np=$("$B/prefill-bench" ranks "scenarios/$arg.yaml")
      timeout 400 mpirun --oversubscribe -np "$np" "$B/prefill-bench" verify "scenarios/$arg.yaml" >/tmp/b.log 2>&1 ;;
    *) timeout "${PB_BENCH_TIMEOUT:-300}" "$B/prefill-bench" "$cmd" -o "$OUT/$cmd.h5" --overwrite >/tmp/b.log 2>&1 ;;
  esac
  echo "$spec: exit $?" | tee -a "$OUT/bench.log"
  grep -vE "^lane: rep" /tmp/b.log >>"$OUT/bench.log"
done
