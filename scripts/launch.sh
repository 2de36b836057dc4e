#!/usr/bin/env bash
# `prefill-bench run` with one rank per GPU over the hosts of an Open MPI
# hostfile (one line per host: "<host> slots=<GPUs on that host>"). Ranks fill
# the hosts in file order; on each host local rank i drives GPU i.
#
#   scripts/launch.sh [--dry-run] hosts.txt scenarios/cp8-128k.yaml [run options]
#
# The NCCL environment goes to every rank: NCCL_NVLS_ENABLE=0 always, and
# NCCL_SOCKET_IFNAME / NCCL_IB_HCA / NCCL_DEBUG when set here (the interface and
# HCAs of the hosts' fabric). --dry-run prints the mpirun command instead.
#
# Today the CP fabric is CUDA IPC, which maps peers within one host: on one
# host with several GPUs this runs; across hosts the run stops at start with a
# message that cross-node CP needs the NCCL fabric (issue 10, not built yet).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dry=0
if [[ ${1:-} == --dry-run ]]; then
  dry=1
  shift
fi
hostfile=${1:?usage: scripts/launch.sh [--dry-run] <hostfile> <scenario.yaml> [prefill-bench run options]}
scenario=${2:?usage: scripts/launch.sh [--dry-run] <hostfile> <scenario.yaml> [prefill-bench run options]}
shift 2
[[ -r $hostfile ]] || { echo "launch.sh: cannot read hostfile '$hostfile'" >&2; exit 2; }

source "$here/env.sh"
bin=$PB_BUILD/prefill-bench
[[ -x $bin ]] || { echo "launch.sh: $bin is not built (scripts/bench.sh or pb_build builds it)" >&2; exit 2; }
ranks=$("$bin" ranks "$scenario" "$@")

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
if ((hosts > 1)); then
  echo "launch.sh: note: $hosts hosts; the IPC fabric spans one host, cross-node CP needs the NCCL fabric (issue 10)" >&2
fi

cmd=(mpirun --hostfile "$hostfile" -np "$ranks" --map-by slot --bind-to none -x NCCL_NVLS_ENABLE=0)
for v in NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_DEBUG; do
  [[ -n ${!v:-} ]] && cmd+=(-x "$v")
done
cmd+=("$bin" run "$scenario" "$@")
if ((dry)); then
  echo "${cmd[*]}"
else
  exec "${cmd[@]}"
fi
