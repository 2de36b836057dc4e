#!/usr/bin/env bash
# Device helper: A/B of this tree (B) against a base (A) in one call, so both sides run on the
# same card as found. <patch> is the diff from the base to this tree (e.g.
# git diff main -- kernels harness > ab.patch); a copy of the tree with it reversed is A.
# Both prefill-bench builds run at once; then the command runs A, B, A, B, each run's lines
# matching <regex> printed under its label.
# Usage: scripts/gpu-ab.sh <patch> <regex> -- <prefill-bench args...>
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
patch_file=$(realpath "${1:?patch}")
regex=${2:?regex}
shift 3
base=/tmp/pb-ab-base
rm -rf "$base" && mkdir -p "$base"
(cd "$root" && tar --exclude=./build --exclude=./gpu-out -cf - .) | (cd "$base" && tar -xf -)
(cd "$base" && patch -R -p1 -s <"$patch_file") || { echo "gpu-ab: the patch does not reverse cleanly"; exit 1; }
(PB_BUILD="$base/build" bash -c "source '$base/scripts/env.sh' && pb_build prefill-bench" >/tmp/ab-build-A.log 2>&1; echo $? >/tmp/ab-A.rc) &
(source "$here/env.sh" && pb_build prefill-bench >/tmp/ab-build-B.log 2>&1; echo $? >/tmp/ab-B.rc)
wait
for s in A B; do
  if [[ $(cat /tmp/ab-$s.rc) != 0 ]]; then
    grep -E "error" -A3 /tmp/ab-build-$s.log | head -30
    echo "gpu-ab: build $s failed"
    exit 1
  fi
done
source "$here/env.sh"
for round in 1 2; do
  for s in A B; do
    bin=$([[ $s == A ]] && echo "$base/build/prefill-bench" || echo "$PB_BUILD/prefill-bench")
    echo "== $s (round $round)"
    timeout 200 "$bin" "$@" 2>&1 | grep -E "$regex"
  done
done
