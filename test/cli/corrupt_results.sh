#!/usr/bin/env bash
# corrupt_results.sh <prefill-bench> <good results file> <scratch folder>
#
# `compare` given broken results files, on purpose. Each of an empty file, a
# text file, the good file truncated (at 512 bytes, at half, one byte short)
# and with its signature overwritten is refused with exit 2 and an error naming
# the file, alone, as the candidate and as the baseline of the gate. Then a
# sweep overwrites 16 bytes at every 2048th offset of the good file: whatever
# each copy holds, compare exits 0 (the damage hit raw numbers, which HDF5
# keeps without checksums) or 2 (a named error: the metadata's checksums, the
# reader's checks), never anything else (a crash); some copies are refused.
set -uo pipefail
pb=$1 good=$2 dir=$3
mkdir -p "$dir"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0

fail() {
  echo "--- output:"
  cat "$out"
  echo "corrupt_results.sh: $*" >&2
  failures=$((failures + 1))
}

# refused <file> <what>: compare alone and both sides of the gate exit 2 naming <file>.
refused() {
  local file=$1 what=$2 code
  for args in "$file" "--baseline $good $file" "--baseline $file $good"; do
    # shellcheck disable=SC2086  # the arguments split on purpose
    "$pb" compare $args >"$out" 2>&1
    code=$?
    if ((code != 2)); then
      fail "$what: compare $args exited $code, expected 2"
    elif ! grep -qE "^\[rank 0 on [^]]+\] error: reading results file '$file': " "$out"; then
      fail "$what: compare $args did not name the file in an error"
    fi
  done
  echo "corrupt_results.sh: $what: refused (exit 2): $(grep -oE "reading results file .*" "$out" | cut -c1-160)"
}

size=$(stat -c %s "$good")

: >"$dir/empty.h5"
refused "$dir/empty.h5" "an empty file"
echo "not a results file" >"$dir/text.h5"
refused "$dir/text.h5" "a text file"
for cut in 512 $((size / 2)) $((size - 1)); do
  head -c "$cut" "$good" >"$dir/truncated-$cut.h5"
  refused "$dir/truncated-$cut.h5" "truncated to $cut of $size bytes"
done
cp "$good" "$dir/no-signature.h5"
printf 'CORRUPT!' | dd of="$dir/no-signature.h5" bs=1 seek=0 conv=notrunc status=none
refused "$dir/no-signature.h5" "the signature overwritten"

# The sweep: 16 bytes of 0x5a at offsets 8, 2056, 4104, ...
damaged="$dir/damaged.h5"
declare -A outcomes=()
for ((offset = 8; offset < size; offset += 2048)); do
  cp "$good" "$damaged"
  printf 'ZZZZZZZZZZZZZZZZ' | dd of="$damaged" bs=1 seek="$offset" conv=notrunc status=none
  "$pb" compare "$damaged" >"$out" 2>&1
  code=$?
  outcomes[$code]=$((${outcomes[$code]:-0} + 1))
  case $code in
    0) ;;
    2) grep -qE "error: reading results file '$damaged': " "$out" || fail "16 bytes at $offset: exit 2 without naming the file" ;;
    *) fail "16 bytes at $offset: compare exited $code (a crash?), expected 0 or 2" ;;
  esac
done
summary=""
for code in "${!outcomes[@]}"; do summary+=" exit $code: ${outcomes[$code]}"; done
echo "corrupt_results.sh: 16 bytes overwritten at every 2048th offset of $size:$summary"
((${outcomes[2]:-0} > 0)) || fail "no damaged copy was refused: the sweep missed the metadata"

((failures == 0)) || exit 1
echo "corrupt_results.sh: passed"
