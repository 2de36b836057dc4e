#!/usr/bin/env bash
# `prefill-bench run` with one rank per GPU over the hosts of an Open MPI
# hostfile (one line per host: "<host> slots=<GPUs on that host>"). Ranks fill
# the hosts in file order; on each host local rank i drives GPU i.
#
#   scripts/launch.sh hosts.txt scenarios/cp8-128k.yaml [--dry-run] [--emulate-hosts N] [run options]
#
# Options go in any position. The NCCL environment goes to every rank:
# NCCL_NVLS_ENABLE=0 always, and NCCL_SOCKET_IFNAME / NCCL_IB_HCA / NCCL_DEBUG
# when set here (the interface and HCAs of the hosts' fabric). --dry-run
# prints it and the mpirun command instead.
#
# The CP lane's fabric (scenario key fabric, default auto) maps the ranks of a
# host over CUDA IPC and crosses hosts over NCCL. --emulate-hosts N (scenario
# key emulate_hosts) splits the ranks of one machine into N emulated hosts that
# talk over NCCL's network transport: cross-node CP on one GPU (ranks sharing
# it; add serialize_ranks=true with --set to time each rank alone).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: scripts/launch.sh <hostfile> <scenario.yaml> [--dry-run] [--emulate-hosts N] [prefill-bench run options]"
source "$here/args.sh"
pb_script_args "$usage" "--dry-run --emulate-hosts=" 2 2 "$@"
hostfile=${PB_WORDS[0]}
scenario=${PB_WORDS[1]}
emulate=()
[[ -n ${PB_FLAGS[--emulate-hosts]:-} ]] && emulate=(--set "emulate_hosts=${PB_FLAGS[--emulate-hosts]}")
sets=("${emulate[@]}" "${PB_SET_ARGS[@]}")
runs=("${emulate[@]}" "${PB_RUN_ARGS[@]}")
[[ -r $hostfile ]] || { echo "launch.sh: cannot read hostfile '$hostfile'" >&2; exit 2; }

source "$here/env.sh"
bin=$PB_BUILD/prefill-bench
[[ -x $bin ]] || { echo "launch.sh: $bin is not built (scripts/bench.sh or pb_build builds it)" >&2; exit 2; }
ranks=$("$bin" ranks "$scenario" "${sets[@]}")

hosts=0
slots=0
while read -r host rest; do
  [[ -z $host || $host == \#* ]] && continue
  n=$(sed -n 's/.*slots=\([0-9][0-9]*\).*/\1/p' <<<"$rest")
  [[ -n $n ]] || { echo "launch.sh: $hostfile: host '$host' has no slots=<GPUs>" >&2; exit 2; }
  hosts=$((hosts + 1))
  slots=$((slots + n))
done <"$hostfile"
if ((slots < ranks)); then
  echo "launch.sh: $hostfile has $slots slots (GPUs) for the scenario's $ranks ranks (cp)" >&2
  exit 2
fi
cmd=(mpirun --hostfile "$hostfile" -np "$ranks" --map-by slot --bind-to none -x NCCL_NVLS_ENABLE=0)
env_text="NCCL_NVLS_ENABLE=0"
for v in NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_DEBUG; do
  [[ -n ${!v:-} ]] && cmd+=(-x "$v") && env_text+=" $v=${!v}"
done
if ((hosts > 1)); then
  # Concurrent ranks over NCCL: no lazy kernel loading mid-run (harness/fabric/fabric.h).
  export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-EAGER}
  cmd+=(-x CUDA_MODULE_LOADING)
  env_text+=" CUDA_MODULE_LOADING=$CUDA_MODULE_LOADING"
fi
cmd+=("$bin" run "$scenario" "${runs[@]}")
if [[ -n ${PB_FLAGS[--dry-run]:-} ]]; then
  echo "NCCL environment: $env_text"
  echo "${cmd[*]}"
else
  exec "${cmd[@]}"
fi
