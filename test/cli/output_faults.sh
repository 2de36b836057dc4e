#!/usr/bin/env bash
# output_faults.sh <results file> <command...>
#
# Writing a command's results file (`plan`, `run`: the command line without
# its output) when the output cannot be written, on purpose:
#   1. the command writes <results file> (the earlier file);
#   2. the disk is full: <results file>.tmp, where the writer goes first, is a
#      link to /dev/full (every write fails with ENOSPC, as root too): exit 2,
#      a named error with the cause, the earlier file byte for byte as it was,
#      and no <results file>.tmp left;
#   3. the output folder is a regular file: exit 2, the error alone, before the
#      command's work (for `run`, before it looks for a device).
# Exit 77 (CTest: skipped) when step 1 finds no GPU ("no CUDA device is visible").
set -uo pipefail
results=$1
shift
out=$(mktemp)
earlier=$(mktemp)
trap 'rm -f "$out" "$earlier"; rm -rf "$results.folder"' EXIT

fail() {
  echo "--- output:"
  cat "$out"
  echo "output_faults.sh: $*" >&2
  exit 1
}

# 1. The earlier file.
rm -f "$results" "$results.tmp"
"$@" -o "$results" --overwrite >"$out" 2>&1
code=$?
if ((code != 0)); then
  grep -q "no CUDA device is visible" "$out" && { cat "$out"; echo "output_faults.sh: SKIPPED (no GPU)"; exit 77; }
  fail "writing the earlier file failed (exit $code)"
fi
cp "$results" "$earlier"
echo "output_faults.sh: the earlier file $results"

# 2. A full disk under <results file>.tmp.
ln -s /dev/full "$results.tmp"
"$@" -o "$results" --overwrite >"$out" 2>&1
code=$?
rm -f "$results.tmp"  # the link, should it have been left
((code == 2)) || fail "disk full: exit $code, expected 2"
tr '\n' ' ' <"$out" | grep -qE "error: writing results file '[^']*$(basename "$results").tmp'.*No space left on device" ||
  fail "disk full: no error naming the file and the cause"
cmp -s "$results" "$earlier" || fail "disk full: the earlier file changed"
[[ -c /dev/full ]] || fail "/dev/full is no longer the device"
echo "output_faults.sh: disk full: exit 2, named; the earlier file as it was"
grep -A1 -E "error: " "$out"

# 3. The output folder is a regular file.
echo "a regular file, not a folder" >"$results.folder"
"$@" -o "$results.folder/out.h5" --overwrite >"$out" 2>&1
code=$?
((code == 2)) || fail "folder is a file: exit $code, expected 2"
grep -qE "^\[rank 0 on [^]]+\] error: results file '[^']*/out.h5': its folder cannot take a new file: Not a directory$" \
  "$out" || fail "folder is a file: no error naming the file and the cause"
(($(wc -l <"$out") == 1)) || fail "folder is a file: the command printed more than the error (it started its work)"
echo "output_faults.sh: folder is a file: exit 2, named before the work"
cat "$out"
echo "output_faults.sh: passed"
