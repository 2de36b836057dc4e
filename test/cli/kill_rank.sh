#!/usr/bin/env bash
# kill_rank.sh <describe_results> <signal> <rank> <deadline s> <results file> <mpirun command...>
#
# A rank lost mid-run, on purpose. Starts the MPI command (one that rewrites
# <results file> after every variant, as `prefill-bench run` does), waits for
# the first file, sends <signal> (KILL or INT) to the process of MPI rank
# <rank>, and passes (exit 0) when:
#   - the job ends within <deadline> seconds of the signal;
#   - its output names the rank: for KILL, the MPI launcher's report of the lost
#     process ("process rank <rank> ... exited on signal 9", Open MPI; "RANK <rank>"
#     and "KILLED", MPICH); for INT, the command's own "interrupted (SIGINT on rank <rank>)";
#   - the results file reads back (describe_results), marked incomplete, with
#     every variant and rep that finished: reps in variant order never rise and
#     differ by at most one, the first variant holds at least one (for INT:
#     the variants up to the one the message names hold one rep more than the
#     message's 0-based rep, the others that rep);
#   - with <want> set (KILL_RANK_WANT, e.g. "baseline 1*, v1 0, v2 0"), the
#     file's reps are exactly that (* marks a variant complete).
# Exit 77 (CTest: skipped) when the command stops before its first rep because
# it finds no GPU ("no CUDA device is visible").
set -uo pipefail
describe=$1 signal=$2 rank=$3 deadline=$4 results=$5
shift 5
log=$(mktemp)
trap 'rm -f "$log"' EXIT

fail() {
  echo "--- output of the job:"
  cat "$log"
  echo "kill_rank.sh: $*" >&2
  exit 1
}

# The children of pid $1, from /proc (field 4 of stat, after the command name's ')').
children() {
  local stat rest ppid
  for stat in /proc/[0-9]*/stat; do
    { rest=$(<"$stat"); } 2>/dev/null || continue
    rest=${rest##*) }
    read -r _ ppid _ <<<"$rest"
    [[ $ppid == "$1" ]] && basename "$(dirname "$stat")"
  done
}

# The pid of MPI rank <rank> among the descendants of pid $1 (the launcher's
# children, or theirs under a daemon), from the rank variable in its environment.
rank_pid() {
  local pid child
  for child in $(children "$1"); do
    if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null |
      grep -qxE "(OMPI_COMM_WORLD_RANK|PMI_RANK|PMIX_RANK)=$rank"; then
      echo "$child"
      return 0
    fi
    pid=$(rank_pid "$child") && { echo "$pid"; return 0; }
  done
  return 1
}

rm -f "$results" "$results.tmp"
"$@" >"$log" 2>&1 &
job=$!

# The first file, then a moment (KILL_RANK_DELAY s, default 0.5) so that the signal lands mid-run.
for ((i = 0; i < 600; ++i)); do
  [[ -e $results ]] && break
  if ! kill -0 "$job" 2>/dev/null; then
    wait "$job"
    code=$?
    grep -q "no CUDA device is visible" "$log" && { cat "$log"; echo "kill_rank.sh: SKIPPED (no GPU)"; exit 77; }
    fail "the job ended (exit $code) before it wrote its first rep"
  fi
  sleep 0.2
done
[[ -e $results ]] || { kill -KILL "$job"; fail "no results file after 120 s"; }
sleep "${KILL_RANK_DELAY:-0.5}"
target=$(rank_pid "$job") || { kill -KILL "$job"; fail "no process of MPI rank $rank under the launcher (pid $job)"; }
kill -"$signal" "$target" || fail "could not send SIG$signal to rank $rank (pid $target)"
sent_ms=$(($(date +%s%N) / 1000000))

while kill -0 "$job" 2>/dev/null; do
  if (($(date +%s%N) / 1000000 - sent_ms > deadline * 1000)); then
    kill -KILL "$job"
    fail "the job did not stop within $deadline s of SIG$signal on rank $rank"
  fi
  sleep 0.1
done
wait "$job"
code=$?
took_ms=$(($(date +%s%N) / 1000000 - sent_ms))
took=$((took_ms / 1000)).$(printf '%03d' $((took_ms % 1000)))
cat "$log"
echo "kill_rank.sh: SIG$signal on rank $rank (pid $target): the job ended with exit $code after $took s"
((code != 0)) || fail "the job exited 0 after losing rank $rank"

if [[ $signal == KILL ]]; then
  grep -qE "process rank $rank .*(signal 9|Killed)|RANK $rank .*KILLED" "$log" ||
    fail "the output does not name the lost rank $rank"
else
  grep -qE "interrupted \(SIGINT on rank $rank\) at (rep|warm-up) " "$log" ||
    fail "the output does not say that rank $rank was interrupted"
fi

summary=$("$describe" "$results" 2>&1) || fail "the results file does not read back: $summary"
echo "$summary"
[[ $summary =~ complete\ no,\ reps\ (.*)$ ]] || fail "the results file is not marked incomplete"
held=${BASH_REMATCH[1]}
if [[ -n ${KILL_RANK_WANT:-} ]]; then
  [[ $held == "$KILL_RANK_WANT" ]] || fail "the file holds '$held', want '$KILL_RANK_WANT'"
fi
mapfile -t names < <(tr ',' '\n' <<<"$held" | awk '{print $1}')
mapfile -t counts < <(tr ',' '\n' <<<"$held" | awk '{gsub(/\*/, "", $NF); print $NF}')
((counts[0] >= 1)) || fail "the first variant holds no rep: $held"
for ((i = 1; i < ${#counts[@]}; ++i)); do
  ((counts[i] <= counts[i - 1] && counts[i] >= counts[0] - 1)) ||
    fail "reps in variant order must never rise and differ by at most one: $held"
done
if [[ $signal == INT ]]; then
  at=$(grep -oE "SIGINT on rank $rank\) at rep [0-9]+ \([^)]*\), variant '[^']+'" "$log") ||
    fail "the message names no rep and variant"
  said_rep=$(sed -E 's/.* at rep ([0-9]+) .*/\1/' <<<"$at")
  said_variant=$(sed -E "s/.*variant '([^']+)'.*/\1/" <<<"$at")
  past=0
  for ((i = 0; i < ${#names[@]}; ++i)); do
    want=$((past ? said_rep : said_rep + 1))
    ((counts[i] == want)) || fail "variant ${names[i]} holds ${counts[i]} rep(s); the message (rep $said_rep, variant $said_variant) means $want"
    [[ ${names[i]} == "$said_variant" ]] && past=1
  done
fi
echo "kill_rank.sh: passed: the job stopped in $took s naming rank $rank; $results holds $held, marked incomplete"
