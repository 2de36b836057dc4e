#!/usr/bin/env bash
# Usage: scripts/dev/pack-build.sh [executable...]
# Builds here (every target) and packs the executables (all, or those named:
# `prefill-bench` alone is enough for run/lane/verify/plan/bench/regress steps,
# 3 MB of 14) into .pb-bin.tar.xz (git-ignored) with the .pb-source
# stamp they were built from. Carried to a lent GPU machine
# (`carry: [".pb-source", ".pb-bin.tar.xz"]`; .deps is not needed, and with it
# the tree passes the 64 MiB a call carries, tracked files included), it spares that
# machine the build: gpu-steps.sh configures and unpacks instead, when the
# pack's stamp equals the carried .pb-source (else it builds there as before).
# This machine and the GPU machines share the CUDA toolkit and most system
# libraries; those whose soname differs there (yaml-cpp 0.7 here) travel in the
# pack's carried-lib/, which gpu-steps.sh puts on LD_LIBRARY_PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../env.sh"
cd "$PB_ROOT"
bash "$here/stamp-source.sh"
pb_build >/dev/null
cp .pb-source "$PB_BUILD/pb-bin.source"
rm -rf "$PB_BUILD/carried-lib" && mkdir -p "$PB_BUILD/carried-lib"
for lib in libyaml-cpp libfmt; do
  path=$(ldd "$PB_BUILD/prefill-bench" | awk -v l="$lib" '$1 ~ "^"l"\\.so" {print $3}')
  [[ -n $path ]] && cp -L "$path" "$PB_BUILD/carried-lib/$(basename "$path")"
done
list_executables() {
  if (($#)); then printf '%s\n' "$@" pb-bin.source; else
    find . -maxdepth 1 -type f \( -executable -o -name pb-bin.source \) -printf '%P\n'; fi
}
(cd "$PB_BUILD" && { list_executables "$@"; echo carried-lib; } |
  XZ_OPT=-T2 tar -cJf "$PB_ROOT/.pb-bin.tar.xz" -T -)  # xz: half of gzip's size; a GPU machine may lack zstd
echo "packed $(du -h .pb-bin.tar.xz | cut -f1) of executables at $(head -1 .pb-source)"
