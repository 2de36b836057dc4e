#!/usr/bin/env bash
# Writes .pb-source (git-ignored): this tree's HEAD sha, whether tracked files
# differ from it, and a hash of that difference. A lent GPU machine receives the
# working tree without its history; carry .pb-source with it
# (`carry: [".deps", ".pb-source"]`) so that results record the code they ran
# (cmake/git_version.cmake reads lines 1-2; pack-build.sh matches all three).
set -euo pipefail
cd "$(dirname "$0")/../.."
sha=$(git rev-parse HEAD)
dirty=false
[[ -n $(git status --porcelain --untracked-files=no) ]] && dirty=true
diff_hash=$(git diff HEAD | sha1sum | cut -d' ' -f1)
printf '%s\n%s\n%s\n' "$sha" "$dirty" "$diff_hash" >.pb-source
echo "stamped $sha (dirty: $dirty)"
