#!/usr/bin/env bash
# Writes .pb-source (git-ignored): this tree's HEAD sha and whether tracked
# files differ from it. A lent GPU machine receives the working tree without its
# history; carry .pb-source with it (`carry: [".deps", ".pb-source"]`) so that
# results record the code they ran (cmake/git_version.cmake reads it).
set -euo pipefail
cd "$(dirname "$0")/../.."
sha=$(git rev-parse HEAD)
dirty=false
[[ -n $(git status --porcelain --untracked-files=no) ]] && dirty=true
printf '%s\n%s\n' "$sha" "$dirty" >.pb-source
echo "stamped $sha (dirty: $dirty)"
