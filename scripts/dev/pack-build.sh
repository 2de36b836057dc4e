#!/usr/bin/env bash
# Builds here (every target) and packs the executables into .pb-bin.tar.gz
# (git-ignored) with the .pb-source stamp they were built from. Carried to a lent
# GPU machine (`carry: [".pb-source", ".pb-bin.tar.gz"]`; .deps is not needed,
# and with it the tree passes the 64 MiB a call carries), it spares that
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
(cd "$PB_BUILD" && { find . -maxdepth 1 -type f \( -executable -o -name pb-bin.source \) -printf '%P\n'; echo carried-lib; } |
  tar -czf "$PB_ROOT/.pb-bin.tar.gz" -T -)  # gzip: a GPU machine may lack zstd
echo "packed $(du -h .pb-bin.tar.gz | cut -f1) of executables at $(head -1 .pb-source)"
