#!/usr/bin/env bash
# The main job: set-up, build, then `prefill-bench run` under mpirun with the
# scenario's rank count (one rank per GPU; ranks share GPUs when there are
# fewer). Options go in any position.
#   scripts/bench.sh scenarios/cp1-16k.yaml [prefill-bench run options: --set k=v, --cuts a,b, -o f.h5, --overwrite]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: scripts/bench.sh <scenario.yaml> [prefill-bench run options]"
source "$here/args.sh"
pb_script_args "$usage" "" 1 1 "$@"
scenario=${PB_WORDS[0]}
source "$here/env.sh"
if [[ ${PB_PREBUILT:-0} != 1 ]]; then  # PB_PREBUILT=1: the build in $PB_BUILD as it is
  bash "$here/setup.sh"
  pb_build prefill-bench
fi
bin=$PB_BUILD/prefill-bench
ranks=$("$bin" ranks "$scenario" "${PB_SET_ARGS[@]}")
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
extra=()
((gpus >= ranks)) || extra+=(--oversubscribe)
exec mpirun -np "$ranks" "${extra[@]}" "$bin" run "$scenario" "${PB_RUN_ARGS[@]}"
