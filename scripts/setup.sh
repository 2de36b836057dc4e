#!/usr/bin/env bash
# Installs what the build needs and is missing, from the distribution's
# packages (apt, when root), and the optional cuDNN frontend and CUTLASS/CuTe
# headers from PyPI into .deps/. Safe to run again: installs nothing when all is there.
# The CUDA toolkit (nvcc, cuBLAS, NCCL) must already be installed.
set -euo pipefail

missing=()
need() {  # need <package> <file or command that proves it is there>
  local pkg=$1 probe=$2
  if [[ $probe == /* ]]; then [[ -e $probe ]] && return 0; else command -v "$probe" >/dev/null && return 0; fi
  missing+=("$pkg")
}
need cmake cmake
need g++ g++
need make make
need openmpi-bin mpirun
need libopenmpi-dev mpicc
have_hdf5() { [[ -e /usr/include/hdf5/serial/hdf5.h || -e /usr/include/hdf5.h ]]; }
have_hdf5 || missing+=(libhdf5-dev)
need libyaml-cpp-dev /usr/include/yaml-cpp/yaml.h
need libfmt-dev /usr/include/fmt/core.h
need libcli11-dev /usr/include/CLI/CLI.hpp
need doctest-dev /usr/include/doctest/doctest.h
need nlohmann-json3-dev /usr/include/nlohmann/json.hpp
python_with_h5py() {
  for py in python3 /usr/bin/python3; do
    "$py" -c 'import h5py, matplotlib' 2>/dev/null && return 0
  done
  return 1
}
python_with_h5py || missing+=(python3-h5py python3-matplotlib)

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "setup: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "setup: missing packages: ${missing[*]} (install them, or run this script as root)" >&2
    exit 1
  fi
fi

if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "setup: the CUDA toolkit (nvcc) is not installed; install CUDA 12.4+ with cuBLAS and NCCL" >&2
  exit 1
fi

# cuDNN frontend headers (docs/design.md §7): unpacked from the PyPI wheel into the
# git-ignored .deps/, never committed. Optional: without them (or without cuDNN 9)
# CMake builds the project with the cuDNN FMHA engine OFF. Machines without
# network get the folder carried along with the working tree instead.
PB_CUDNN_FE_VERSION=1.32.0
fe_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.deps/cudnn-frontend
if [[ ! -e $fe_dir/include/cudnn_frontend.h ]]; then
  fe_tmp=$(mktemp -d)
  if python3 -m pip download --quiet --retries 1 --timeout 20 --no-deps --only-binary=:all: \
       "nvidia-cudnn-frontend==$PB_CUDNN_FE_VERSION" -d "$fe_tmp" >"$fe_tmp/pip.log" 2>&1 \
     && fe_whl=$(ls "$fe_tmp"/nvidia_cudnn_frontend-*.whl 2>/dev/null | head -n1) && [[ -n $fe_whl ]] \
     && python3 - "$fe_whl" "$fe_dir.partial" <<'PY'
import sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith("include/")]
    if not any(n == "include/cudnn_frontend.h" for n in names):
        sys.exit("no include/cudnn_frontend.h in " + whl)
    z.extractall(dest, names)
PY
  then
    rm -rf "$fe_dir" && mv "$fe_dir.partial" "$fe_dir"
    echo "setup: cuDNN frontend $PB_CUDNN_FE_VERSION headers in $fe_dir/include"
  else
    rm -rf "$fe_dir.partial"
    echo "setup: note: could not fetch nvidia-cudnn-frontend==$PB_CUDNN_FE_VERSION (no network?);" \
         "building without the cuDNN FMHA engine (carry .deps/ from a machine that has it)" >&2
    tail -n 3 "$fe_tmp/pip.log" >&2 || true
  fi
  rm -rf "$fe_tmp"
fi

# CUTLASS / CuTe headers (docs/design.md §7) for the cutlass MoE expert GEMM engine
# (kernels/moe/moe_gemm_cutlass.cu): the nvidia-cutlass wheel keeps the source tree
# under cutlass_library/source/; only include/cutlass and include/cute (~27 MB)
# are unpacked, into .deps/cutlass/include. Optional, like the frontend: without
# them CMake builds with the cutlass engine OFF (cmake/cutlass.cmake).
PB_CUTLASS_VERSION=4.2.0.0
cl_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.deps/cutlass
if [[ ! -e $cl_dir/include/cutlass/cutlass.h || ! -e $cl_dir/include/cute/tensor.hpp ]]; then
  cl_tmp=$(mktemp -d)
  if python3 -m pip download --quiet --retries 1 --timeout 20 --no-deps --only-binary=:all: \
       "nvidia-cutlass==$PB_CUTLASS_VERSION" -d "$cl_tmp" >"$cl_tmp/pip.log" 2>&1 \
     && cl_whl=$(ls "$cl_tmp"/nvidia_cutlass-*.whl 2>/dev/null | head -n1) && [[ -n $cl_whl ]] \
     && python3 - "$cl_whl" "$cl_dir.partial" <<'PY'
import os, sys, zipfile
whl, dest = sys.argv[1], sys.argv[2]
root = "cutlass_library/source/include/"
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist()
             if n.startswith(root + "cutlass/") or n.startswith(root + "cute/")]
    for probe in ("cutlass/cutlass.h", "cute/tensor.hpp"):
        if root + probe not in names:
            sys.exit("no " + root + probe + " in " + whl)
    for n in names:
        if n.endswith("/"):
            continue
        out = os.path.join(dest, "include", n[len(root):])
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(n) as src, open(out, "wb") as dst:
            dst.write(src.read())
PY
  then
    rm -rf "$cl_dir" && mv "$cl_dir.partial" "$cl_dir"
    echo "setup: CUTLASS $PB_CUTLASS_VERSION headers in $cl_dir/include ($(du -sh "$cl_dir" | cut -f1))"
  else
    rm -rf "$cl_dir.partial"
    echo "setup: note: could not fetch nvidia-cutlass==$PB_CUTLASS_VERSION (no network?);" \
         "building without the cutlass MoE GEMM engine (carry .deps/ from a machine that has it)" >&2
    tail -n 3 "$cl_tmp/pip.log" >&2 || true
  fi
  rm -rf "$cl_tmp"
fi
