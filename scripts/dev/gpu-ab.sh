#!/usr/bin/env bash
# Device helper: A/B (or A/B/C ...) of this tree against bases in one call, so every side runs on
# the same card as found. Each <patch> is the diff from a base to this tree (e.g.
# git diff main -- kernels harness > ab.patch); a copy of the tree with it reversed is a base,
# labelled A, B, ... in the order given; this tree comes last. All prefill-bench builds run at
# once; with AB_TEST=<test target> the tree's build also makes that test and runs it first (a
# failing test stops the call). Then the command runs every side AB_ROUNDS times (default 2), in
# turn, each run's lines matching <regex> printed under its label.
# Usage: scripts/dev/gpu-ab.sh <patch>[,<patch>...] <regex> -- <prefill-bench args...>
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
IFS=, read -r -a patches <<<"${1:?patch}"
regex=${2:?regex}
shift 3
labels=(A B C D E F)
((${#patches[@]} < ${#labels[@]})) || { echo "gpu-ab: at most $((${#labels[@]} - 1)) patches"; exit 1; }
bins=()
for i in "${!patches[@]}"; do
  s=${labels[$i]} base=/tmp/pb-ab-${labels[$i]}
  patch_file=$(realpath "${patches[$i]}")
  rm -rf "$base" && mkdir -p "$base"
  (cd "$root" && tar --exclude=./build --exclude=./gpu-out -cf - .) | (cd "$base" && tar -xf -)
  (cd "$base" && patch -R -p1 -s <"$patch_file") || { echo "gpu-ab: patch $patch_file does not reverse cleanly"; exit 1; }
  (PB_BUILD="$base/build" bash -c "source '$base/scripts/env.sh' && pb_build prefill-bench" >/tmp/ab-build-$s.log 2>&1
   echo $? >/tmp/ab-$s.rc) &
  bins+=("$base/build/prefill-bench")
done
tree=${labels[${#patches[@]}]}
(source "$here/../env.sh" && pb_build prefill-bench ${AB_TEST:-} >/tmp/ab-build-$tree.log 2>&1; echo $? >/tmp/ab-$tree.rc)
wait
for s in "${labels[@]:0:${#patches[@]}+1}"; do
  if [[ $(cat /tmp/ab-$s.rc) != 0 ]]; then
    grep -E "error" -A3 /tmp/ab-build-$s.log | head -30
    echo "gpu-ab: build $s failed"
    exit 1
  fi
done
source "$here/../env.sh"
bins+=("$PB_BUILD/prefill-bench")
if [[ -n ${AB_TEST:-} ]]; then
  timeout 300 "$PB_BUILD/$AB_TEST" >/tmp/ab-test.log 2>&1
  trc=$?
  grep -E "ERROR|FAILED|\[doctest\] (test cases|assertions)" /tmp/ab-test.log | head -40
  echo "gpu-ab: $AB_TEST ($tree) exit $trc"
  ((trc == 0)) || exit $trc
fi
for ((round = 1; round <= ${AB_ROUNDS:-2}; ++round)); do
  for i in "${!bins[@]}"; do
    echo "== ${labels[$i]} (round $round)"
    timeout 200 "${bins[$i]}" "$@" 2>&1 | grep -E "$regex"
  done
done
