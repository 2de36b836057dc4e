#!/usr/bin/env bash
# Usage: scripts/dev/carry-room.sh out [MB] | back | show
# A device call carries the working tree and its carried paths, 64 MiB in all.
# `out` moves the tracked results files larger than MB (default 2.5) out of the
# working tree into a folder outside the repository, listed in .carry-room (git-
# ignored), so the packed executables (pack-build.sh, about 20 MB) fit beside
# the tree; `back` puts every one back; `show` prints what would travel.
# Nothing is deleted: run `back` before committing or testing here.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
cd "$PB_ROOT"
list=.carry-room
away=${PB_CARRY_ROOM:-/tmp/pb-carry-room}
tree_mb() { git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | awk '{printf "%.1f", $1 / 1e6}'; }
carried_mb() {
  local total=0
  for f in .pb-source .pb-bin.tar.xz; do [[ -f $f ]] && total=$((total + $(stat -c %s "$f"))); done
  awk -v b="$total" 'BEGIN {printf "%.1f", b / 1e6}'
}
case ${1:-show} in
  out)
    limit=$(awk -v mb="${2:-2.5}" 'BEGIN {printf "%d", mb * 1e6}')
    mkdir -p "$away"
    git ls-files 'results/*.h5' | while read -r f; do
      [[ -f $f ]] && (($(stat -c %s "$f") > limit)) || continue
      mkdir -p "$away/$(dirname "$f")"
      mv "$f" "$away/$f"
      echo "$f" >>"$list"
    done
    echo "moved $(sort -u "$list" 2>/dev/null | wc -l) file(s) to $away; tree now $(tree_mb) MB + carried $(carried_mb) MB"
    ;;
  back)
    [[ -f $list ]] || { echo "nothing moved out"; exit 0; }
    sort -u "$list" | while read -r f; do
      [[ -f $away/$f ]] && mv "$away/$f" "$f"
    done
    rm -f "$list"
    missing=$(git ls-files --deleted)
    [[ -z $missing ]] || { echo "still missing from the tree:"; echo "$missing"; exit 1; }
    echo "every file back; tree $(tree_mb) MB"
    ;;
  show)
    echo "tree $(tree_mb) MB + carried $(carried_mb) MB (a call carries at most 67.1 MB)"
    ;;
  *)
    echo "usage: scripts/dev/carry-room.sh out [MB] | back | show" >&2
    exit 2
    ;;
esac
