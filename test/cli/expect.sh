#!/usr/bin/env bash
# expect.sh <exit code> <regex> <command...>: runs the command, prints what it
# printed (stdout and stderr together), and passes (exit 0) when it exited with
# <exit code> and its whole output matches <regex> (a bash ERE, '.' matches
# newlines; anchor it with ^...$ to require that nothing else was printed).
set -uo pipefail
want_code=$1
want_text=$2
shift 2
text=$("$@" 2>&1)
code=$?
printf '%s\n' "$text"
if ((code != want_code)); then
  echo "expect.sh: exit code $code, expected $want_code" >&2
  exit 1
fi
if ! [[ $text =~ $want_text ]]; then
  echo "expect.sh: the output does not match: $want_text" >&2
  exit 1
fi
echo "expect.sh: exit code $code and output as expected"
