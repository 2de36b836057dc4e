#!/usr/bin/env bash
# kill_rank.sh <describe_results> <signal> <rank> <deadline s> <results file> <mpirun command...>
#
# A rank lost mid-run, on purpose. Starts the MPI command (one that rewrites
# <results file> after every rep, as `prefill-bench run` does), waits for the
# first rep's file, sends <signal> (KILL or INT) to the process of MPI rank
# <rank>, and passes (exit 0) when:
#   - the job ends within <deadline> seconds of the signal;
#   - its output names the rank: for KILL, the MPI launcher's report of the lost
#     process ("process rank <rank> ... exited on signal 9", Open MPI; "RANK <rank>"
#     and "KILLED", MPICH); for INT, the command's own "interrupted (SIGINT on rank <rank>)";
#   - the results file reads back (describe_results), marked incomplete, every
#     variant with the same number of reps, at least one (for INT: the number
#     the message gives).
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

# The first rep's file, then a moment so that the signal lands mid-run.
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
sleep 0.5
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
  grep -qE "interrupted \(SIGINT on rank $rank\) after [0-9]+ rep" "$log" ||
    fail "the output does not say that rank $rank was interrupted"
fi

summary=$("$describe" "$results" 2>&1) || fail "the results file does not read back: $summary"
echo "$summary"
[[ $summary =~ complete\ no,\ reps\ (.*)$ ]] || fail "the results file is not marked incomplete"
counts=$(tr ',' '\n' <<<"${BASH_REMATCH[1]}" | awk '{print $NF}' | sort -u)
[[ $counts =~ ^[1-9][0-9]*$ ]] || fail "the variants hold different or no reps: ${BASH_REMATCH[1]}"
if [[ $signal == INT ]]; then
  said=$(grep -oE "after [0-9]+ rep" "$log" | grep -oE "[0-9]+")
  ((said == counts)) || fail "the message says $said rep(s), the file holds $counts"
fi
echo "kill_rank.sh: passed: the job stopped in $took s naming rank $rank; $results holds $counts finished rep(s), marked incomplete"
