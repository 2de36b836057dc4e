#!/usr/bin/env bash
# Installs what the build needs and is missing, from the distribution's
# packages (apt, when root). Safe to run again: installs nothing when all is there.
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
