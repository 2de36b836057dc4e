#!/usr/bin/env bash
# The main job: set-up, build, then `prefill-bench run` under mpirun with the
# scenario's rank count (one rank per GPU; ranks share GPUs when there are
# fewer). Usage: scripts/bench.sh scenarios/cp1-16k.yaml [prefill-bench run options]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
scenario=${1:?usage: scripts/bench.sh scenarios/<name>.yaml [--set key=value ...]}
shift
bash "$here/setup.sh"
source "$here/env.sh"
pb_build prefill-bench
bin=$PB_BUILD/prefill-bench
ranks=$("$bin" ranks "$scenario" "$@")
gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)
extra=()
((gpus >= ranks)) || extra+=(--oversubscribe)
exec mpirun -np "$ranks" "${extra[@]}" "$bin" run "$scenario" "$@"
