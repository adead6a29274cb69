#!/usr/bin/env bash
# dmidx-cpu-cost (what tools/cpu-cost.sh runs under callgrind), natively:
# --help and bad flags; every registered index (--list-indexes), technique
# set and operation runs and costs the round trips the indexes document for
# warm, uncontended operations (so an insert row is one without a split, as
# its label says);
# the coroutine-switch row makes one switch per yield.
#
#   cpu_cost_test.sh DMIDX_CPU_COST
set -uo pipefail

tool=$1
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

help=$("$tool" --help) || fail "--help exited non-zero"
grep -q MeasuredOperations <<<"$help" || fail "--help does not name MeasuredOperations"

for bad in "--op=bogus" "--index=hash" "--operations=0" "--keys=2000 --operations=3000" \
    "--keys=2000 --scan-length=2000" "--techniques=some"; do
  # shellcheck disable=SC2086
  out=$("$tool" $bad 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "dmidx-cpu-cost $bad exited $status, expected 2: $out"
  grep -q -- "--" <<<"$out" || fail "dmidx-cpu-cost $bad: the message names no flag: $out"
done

# round_trips INDEX TECHNIQUES OP: the round trips per operation it reports.
round_trips() {
  local out
  if ! out=$("$tool" --index="$1" --techniques="$2" --op="$3" --keys=3000 --operations=300 2>&1); then
    fail "dmidx-cpu-cost --index=$1 --techniques=$2 --op=$3 failed: $out"
    return
  fi
  sed -n 's/.*per operation: \([0-9.]*\) round trips.*/\1/p' <<<"$out"
}

# The warm floors (docs/btree.md, docs/radix.md): with every technique on,
# a lookup is one round trip and a change two.
mapfile -t indexes < <("$tool" --list-indexes)
[[ " ${indexes[*]} " == *" btree "* && " ${indexes[*]} " == *" radix "* ]] ||
  fail "--list-indexes does not list btree and radix: ${indexes[*]}"
for index in "${indexes[@]}"; do
  for op in lookup update insert delete; do
    want=2.00
    [ "$op" = lookup ] && want=1.00
    got=$(round_trips "$index" all "$op")
    [ "$got" = "$want" ] || fail "$index $op: $got round trips per operation, expected $want"
  done
  for op in lookup update insert delete scan; do
    got=$(round_trips "$index" baseline "$op")
    [ -n "$got" ] || fail "$index baseline $op reported no round trips"
  done
  got=$(round_trips "$index" all scan)
  [ -n "$got" ] || fail "$index scan reported no round trips"
done

out=$("$tool" --op=switch --operations=400) || fail "--op=switch failed: $out"
# Each of the two coroutines is resumed once to start and once per yield.
grep -q "switch: 400 yields, 402 switches into coroutines" <<<"$out" ||
  fail "--op=switch: unexpected output: $out"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "cpu_cost_test: all checks passed"
