#!/usr/bin/env bash
# lane_checks.sh <prefill-bench> <scenario> <out dir> <mpirun and its options...>: `lane` on 2
# serialized ranks of a tiny model, three ways:
#   1. it runs, checks its launch list against plan's, writes its file with its
#      doorbells and projects the layer's gang (the FMHA check loosened: a tiny
#      model's FMHA is launch-bound): exit 0;
#   2. its FMHA check on a constructed case, every FMHA launch slowed by 2 ms
#      (debug.delay_family): exit 1, saying NO;
#   3. the file of 1 read as a gang: `compare --links` projects it.
# Without a CUDA device the first prints "no CUDA device is visible" and this
# script stops there (CTest: skipped).
set -uo pipefail
exe=$1 scenario=$2 out=$3
shift 3
mpirun=("$@")
expect="bash $(dirname "$0")/expect.sh"
mkdir -p "$out"
lane=("${mpirun[@]}" -np 2 "$exe" lane "$scenario" --set serialize_ranks=true)
text=$("${lane[@]}" --fmha-tolerance 100 -o "$out/lane-smoke-cp2.h5" --overwrite 2>&1)
code=$?
printf '%s\n' "$text"
if [[ $text == *"no CUDA device is visible"* ]]; then exit 0; fi
((code == 0)) || { echo "lane_checks.sh: lane exited $code, expected 0" >&2; exit 1; }
for want in "projected gang, variant all" "within 10000% of pairs x pair time: yes" "wrote .*lane-smoke-cp2.h5"; do
  [[ $text =~ $want ]] || { echo "lane_checks.sh: lane's output lacks: $want" >&2; exit 1; }
done
$expect 1 "within 10% of pairs x pair time: NO \(exit 1\)" "${lane[@]}" --set debug.delay_family=fmha \
  --set debug.delay_us=2000 -o "$out/lane-slow-fmha.h5" --overwrite || exit 1
$expect 0 "fabric span bytes: link"$'\n'".*ib400" "$exe" compare "$out/lane-smoke-cp2.h5" --links || exit 1
echo "lane_checks.sh: all three as expected"
