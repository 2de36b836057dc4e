#!/usr/bin/env bash
# The SASS of the kernels in an object file or executable whose (mangled) names match a regex,
# with each kernel's instruction count per barrier-separated segment (static counts: a loop's
# body counts once) and its instruction mix; --full prints the SASS too. For machines without
# the CUDA toolkit's cuobjdump: it and nvdisasm come from PyPI's nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm wheels (version pinned below), unpacked into .deps/cuda-tools on first use.
# Usage: scripts/dev/sass.sh <object or executable> <kernel regex> [--full]
#   e.g. scripts/dev/sass.sh build/CMakeFiles/pb_kernels.dir/kernels/kda/kda_prepare.cu.o kda_prepare_kernel
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
file=${1:?object or executable}
regex=${2:?kernel regex}
full=${3:-}
PB_CUOBJDUMP_VERSION=${PB_CUOBJDUMP_VERSION:-13.5.37}
tools=$here/../../.deps/cuda-tools
cuobjdump=$(command -v cuobjdump || true)
[[ -z $cuobjdump && -x /usr/local/cuda/bin/cuobjdump ]] && cuobjdump=/usr/local/cuda/bin/cuobjdump
if [[ -z $cuobjdump ]]; then  # cuobjdump -sass runs nvdisasm: both wheels
  cuobjdump=$(find "$tools" -name cuobjdump -type f 2>/dev/null | head -1 || true)
  if [[ -z $cuobjdump || ! -x $(dirname "$cuobjdump")/nvdisasm ]]; then
    tmp=$(mktemp -d)
    for wheel in nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm; do
      python3 -m pip download --quiet --retries 1 --timeout 20 --no-deps --only-binary=:all: \
        "$wheel==$PB_CUOBJDUMP_VERSION" -d "$tmp" >"$tmp/pip.log" 2>&1 ||
        { echo "sass.sh: no cuobjdump, and pip could not fetch $wheel==$PB_CUOBJDUMP_VERSION" >&2; exit 1; }
    done
    mkdir -p "$tools"
    for whl in "$tmp"/*.whl; do python3 -m zipfile -e "$whl" "$tools"; done
    rm -rf "$tmp"
    cuobjdump=$(find "$tools" -name cuobjdump -type f | head -1)
    chmod +x "$(dirname "$cuobjdump")"/*
  fi
  export PATH=$(dirname "$cuobjdump"):$PATH
fi
"$cuobjdump" -sass "$file" | python3 -c '
import re, sys
regex, full = re.compile(sys.argv[1]), sys.argv[2] == "--full"
kernels, name = {}, None
for line in sys.stdin:
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        name = m.group(1) if regex.search(m.group(1)) else None
        if name: kernels[name] = []
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
    if name and m: kernels[name].append(m.group(2))
if not kernels: sys.exit("sass.sh: no kernel matches " + sys.argv[1])
for name, code in kernels.items():
    segments, mix = [0], {}
    for ins in code:
        if full: print("   ", ins)
        words = ins.split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        mix[op] = mix.get(op, 0) + 1
        segments[-1] += 1
        if op == "BAR" and ".SYNC" in words[1 if words[0].startswith("@") else 0]: segments.append(0)
    print(f"{name}: {len(code)} instructions; per barrier-separated segment: {segments}")
    print("  mix:", ", ".join(f"{op} {n}" for op, n in sorted(mix.items(), key=lambda x: -x[1])[:16]))
' "$regex" "$full"
