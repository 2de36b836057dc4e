#!/usr/bin/env bash
# scripts/dev/sanitize.sh [tool...] [suite...]: compute-sanitizer over the GPU
# suites, at the suites' own shapes (small, chosen to reach tails, scalar
# fallbacks and every schedule), one line per tool and suite:
#
#   memcheck   every GPU doctest suite (ctest label gpu: every kernel family,
#              the MoE / dense FFN / first-token blocks), the MLA and KDA blocks
#              across 2 ranks (test_mla_cp, test_kda_cp), and the whole
#              superstep through `verify` at cp 1 and at cp 2 (ranks taking turns)
#   racecheck  the kernels that share memory between threads: AttnRes, KDA
#   synccheck  prepare and walks, FMHA native, o_norm_gate, conv
#   initcheck  (only when named) a cuBLAS GEMM's output read by our kernel
#              (test_gemm), then the superstep at the tiny model: `run smoke.yaml`
#
# Arguments pick tools (memcheck racecheck synccheck initcheck) and suites
# (substrings of the names printed, e.g. test_kda or verify); none: all suites
# and every tool but initcheck. A device command runs at most 10 minutes: run
# a tool or two at a time (e.g. `scripts/dev/sanitize.sh racecheck synccheck`); each check stops after
# PB_SANITIZE_TIMEOUT seconds (default 900). Builds what it runs first
# (PB_BUILD, default build/), unless PB_PREBUILT=1 (gpu-steps.sh's `sanitize`
# step over a carried build: the executables are there, the objects are not). Logs: ${OUT:-$PB_BUILD}/sanitize/<tool>.<suite>.log.
# Exit 0 when every check is clean, 1 when any finds an error or fails, 3
# when there is no GPU (or a suite skipped for want of one).
#
# Known limits of the tools, written down rather than silenced:
#   - racecheck does not model the async proxy: wgmma's reads of shared memory
#     and cp.async.bulk copies completing on an mbarrier are invisible to it,
#     so it would report hazards against them that cannot happen (or miss
#     real ones). The wgmma KDA walk (kda_walk_wgmma_kernel) is left out of
#     racecheck for that reason; the head and halves walks, which compute the
#     same recurrence with cp.async and mma.sync, are checked, and the wgmma
#     walk is still under memcheck and synccheck.
#   - racecheck and synccheck check only our kernels in the FMHA suite
#     (fmha_native_kernel, lse_merge/o_finalize): the suite also runs the cuDNN
#     engine, whose kernels are not ours to fix.
#   - memcheck reports a failed CUDA call as an error: test_out_of_memory,
#     whose allocations fail on purpose, is left out.
#   - initcheck does not see cuBLAS's stores: under it, test_gemm's "fresh
#     f32 output" case reports all 81920 of our kernel's reads of a GEMM
#     output as uninitialized (and 327680 reads by cuBLASLt's own
#     splitKreduce_kernel), while the values read equal the float64
#     reference. The superstep's findings (land_baseline_kernel reading the
#     KDA projections) are that. So initcheck runs only when named, and a
#     finding is read against this. A turn's read of turn-local memory it did
#     not write is caught by `verify`'s poisoned arena instead (NaN after
#     every turn, every output bit equal).
#   - Under the tools every kernel runs 10-100x slower; the fabric's doorbell
#     waits have deadlines of minutes (wait_timeout_s), far above that.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
cd "$PB_ROOT" || exit 1

sanitizer=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
out=${OUT:-$PB_BUILD}/sanitize
limit=${PB_SANITIZE_TIMEOUT:-900}
mkdir -p "$out"

tools=() suites=()
for arg in "$@"; do
  case $arg in
    memcheck | racecheck | synccheck | initcheck) tools+=("$arg") ;;
    -h | --help) awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; exit 0 ;;
    *) suites+=("$arg") ;;
  esac
done
((${#tools[@]})) || tools=(memcheck racecheck synccheck)  # initcheck when named: see its limit above

if [[ ! -x $sanitizer ]]; then
  echo "sanitize.sh: no compute-sanitizer (looked for $sanitizer; set COMPUTE_SANITIZER)" >&2
  exit 1
fi
if ! nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
  echo "sanitize.sh: no GPU visible (nvidia-smi -L): nothing to check" >&2
  exit 3
fi

# The GPU doctest suites, from CTest (label gpu, not mpi): every kernel family and the blocks' suite.
build() { [[ ${PB_PREBUILT:-0} == 1 ]] || pb_build_logged "$out/build.log" "$@"; }
build prefill-bench test_mla_cp test_kda_cp || exit 1
mapfile -t gpu_suites < <(cd "$PB_BUILD" && ctest -N -L gpu -LE mpi | grep -oE "gpu\.test_[a-z_0-9]+" |
                          sed 's/^gpu\.//' | grep -vx test_out_of_memory)
build "${gpu_suites[@]}" || exit 1

wanted() {  # wanted <tool> <suite>
  local tool=$1 suite=$2 t s
  for t in "${tools[@]}"; do
    [[ $t == "$tool" ]] || continue
    ((${#suites[@]})) || return 0
    for s in "${suites[@]}"; do [[ $suite == *"$s"* ]] && return 0; done
  done
  return 1
}

failed=0 skipped=0 ran=0
# check <tool> <suite> <ranks> <command...>: the command under the tool (each of
# <ranks> MPI ranks under its own sanitizer when ranks > 0), one line of verdict.
check() {
  local tool=$1 suite=$2 ranks=$3
  shift 3
  wanted "$tool" "$suite" || return 0
  local log=$out/$tool.$suite.log start code errors summaries verdict
  local run=("$sanitizer" --tool "$tool" --error-exitcode 86 --print-limit 100)
  case $tool in
    racecheck) run+=(--racecheck-report all) ;;
  esac
  while [[ ${1:-} == --kernel-name* ]]; do run+=("$1" "$2"); shift 2; done
  start=$SECONDS
  if ((ranks > 0)); then
    timeout "$limit" mpirun --oversubscribe -np "$ranks" "${run[@]}" "$@" >"$log" 2>&1
  else
    timeout "$limit" "${run[@]}" "$@" >"$log" 2>&1
  fi
  code=$?
  # memcheck, synccheck, initcheck: "ERROR SUMMARY: N errors"; racecheck: "RACECHECK SUMMARY: N hazards displayed".
  local summary="(ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard)"
  summaries=$(grep -v "not printed" "$log" | grep -cE "$summary")
  errors=$(grep -v "not printed" "$log" | grep -oE "$summary" | grep -oE "[0-9]+" | awk '{s += $1} END {print s + 0}')
  if ((code == 124)); then
    verdict="TIMED OUT after $limit s (log $log)"
    failed=$((failed + 1))
  elif ((code == 77 || code == 3)) && grep -qE "SKIPPED: no CUDA device|no CUDA device is visible" "$log"; then
    verdict="skipped: no CUDA device"
    skipped=$((skipped + 1))
  elif ((errors > 0)); then
    verdict="ERRORS: $errors (log $log)"
    failed=$((failed + 1))
  elif ((code != 0)); then
    verdict="FAILED: exit $code under the tool (log $log)"
    failed=$((failed + 1))
  elif ((summaries < (ranks > 0 ? ranks : 1))); then
    verdict="FAILED: $summaries of $((ranks > 0 ? ranks : 1)) error summaries printed (log $log)"
    failed=$((failed + 1))
  else
    verdict="clean (0 errors)"
  fi
  ran=$((ran + 1))
  printf '%-10s %-34s %-s, %d s\n' "$tool" "$suite" "$verdict" $((SECONDS - start))
}

B=$PB_BUILD
S=$PB_ROOT/scenarios
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+=" (dirty or no git)"
echo "sanitize.sh: $("$sanitizer" --version | grep -oE "Version [0-9.]+" | head -1), $(nvidia-smi -L | head -1), commit $commit"

# memcheck: every kernel family and block.
for suite in "${gpu_suites[@]}"; do
  check memcheck "$suite" 0 "$B/$suite"
done
check memcheck test_mla_cp.np2 2 "$B/test_mla_cp"
check memcheck test_kda_cp.np2 2 "$B/test_kda_cp"
check memcheck verify.smoke 0 "$B/prefill-bench" verify "$S/smoke.yaml"
check memcheck verify.smoke-cp2.serialized 2 "$B/prefill-bench" verify "$S/smoke-cp2.yaml" --set serialize_ranks=true

# racecheck and synccheck: the kernels that share memory between threads.
for tool in racecheck synccheck; do
  walks=()
  [[ $tool == racecheck ]] && walks=(--kernel-name-exclude kns=kda_walk_wgmma)
  check "$tool" test_attnres 0 "$B/test_attnres" "--test-case=*edges*,*grid-stride*,*zero candidates*,*hidden 1024*"
  check "$tool" test_kda 0 "${walks[@]}" "$B/test_kda"
  check "$tool" test_fmha.native 0 --kernel-name regex='fmha_native|lse_merge|o_finalize' "$B/test_fmha"
  check "$tool" test_elementwise.o_norm_gate 0 "$B/test_elementwise" "--test-case=o_norm_gate*"
  check "$tool" test_conv_silu_chunk 0 "$B/test_conv_silu_chunk"
done

# initcheck: first our kernel reading a fresh output that cuBLAS wrote whole (the suite checks
# its values), which tells whether the tool sees cuBLAS's stores; then the superstep at the
# tiny model, every block, reading nothing it did not write.
check initcheck test_gemm.fresh_output 0 "$B/test_gemm" "--test-case=*fresh f32 output*"
check initcheck run.smoke 0 "$B/prefill-bench" run "$S/smoke.yaml" --set warmup=0 --set reps=1 \
  --set ceiling_sustained_s=0 -o "$out/initcheck-run-smoke.h5" --overwrite

if ((ran == 0)); then
  echo "sanitize.sh: nothing matched: tools ${tools[*]}, suites ${suites[*]:-all}" >&2
  exit 1
fi
if ((failed)); then
  echo "sanitize.sh: $failed of $ran checks found errors or failed"
  exit 1
fi
if ((skipped)); then
  echo "sanitize.sh: $skipped of $ran checks skipped (no CUDA device)"
  exit 3
fi
echo "sanitize.sh: $ran checks clean"
