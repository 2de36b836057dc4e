# Sourced by the scripts: CUDA on PATH, Open MPI allowed to run as root
# (CI and the GPU machines run as root), NVLink multicast off.
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export NCCL_NVLS_ENABLE=0
PB_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PB_BUILD=${PB_BUILD:-$PB_ROOT/build}
# ccache, when installed, serves unchanged objects across build folders and worktrees.
pb_launcher_args() {
  command -v ccache >/dev/null || return 0
  echo "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
}
pb_build() {  # pb_build [targets...]
  local log
  log=$(cmake -S "$PB_ROOT" -B "$PB_BUILD" -DCMAKE_BUILD_TYPE=Release $(pb_launcher_args) ${PB_CMAKE_ARGS:-} 2>&1) || {
    echo "$log"
    return 1
  }
  grep -E "cuDNN FMHA engine|cutlass MoE GEMM engine" <<<"$log" || true
  if (($#)); then
    cmake --build "$PB_BUILD" -j"$(nproc)" --target "$@"
  else
    cmake --build "$PB_BUILD" -j"$(nproc)"
  fi
}
# pb_build_logged <log> [targets...]: pb_build with its output in <log>; on failure prints the
# log's errors and "<calling script>: build failed", and returns 1 (the device scripts' build step).
pb_build_logged() {
  local log=$1
  shift
  pb_build "$@" >"$log" 2>&1 && return 0
  grep -E "error" -A3 "$log" | head -40
  echo "$(basename "$0" .sh): build failed"
  return 1
}
