#!/usr/bin/env bash
# Review regressions of dmidx-ycsb's command line (branch review-ycsb): each
# check fails on 64ab9de. Every run is bounded by `timeout`, so a check
# whose bug is a hang fails instead of hanging.
#
#   ycsb_cli_review_test.sh DMIDX_YCSB
set -uo pipefail

ycsb=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_exit SECONDS CODE PATTERN -- ARGS...: runs dmidx-ycsb for at most
# SECONDS, checks its exit status and that stdout+stderr match PATTERN.
expect_exit() {
  local seconds=$1 code=$2 pattern=$3
  shift 4
  local out status
  out=$(timeout "$seconds" "$ycsb" "$@" 2>&1)
  status=$?
  if [ "$status" -eq 124 ]; then
    fail "dmidx-ycsb $* still running after ${seconds} s (expected exit $code)"
    return
  fi
  if [ "$status" -ne "$code" ]; then
    fail "dmidx-ycsb $* exited $status, expected $code:"$'\n'"$(tail -n 5 <<<"$out")"
    return
  fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "dmidx-ycsb $*: output does not match '$pattern':"$'\n'"$(tail -n 5 <<<"$out")"
  fi
}

small=(--index null --workload c --records 1000 --operations 1000 --quiet)

# No run phase at all: --operations 0 without --duration ran forever.
expect_exit 20 2 'operations' -- --index null --workload c --records 1000 --operations 0 --quiet
# Negative counts wrapped to 2^64 - N (--warmup -1 ran forever).
expect_exit 20 2 'warmup' -- "${small[@]}" --warmup -1
expect_exit 20 2 'records' -- "${small[@]}" --records -5
# Non-finite times and rates were silently ignored (and converted with UB).
expect_exit 20 2 'duration' -- "${small[@]}" --duration nan
expect_exit 20 2 'duration' -- "${small[@]}" --duration 1e30
expect_exit 20 2 'target-rate' -- "${small[@]}" --target-rate inf
# An empty workload list silently ran a "custom" 95/5 mix of 1M operations.
expect_exit 20 2 'workload' -- --index null --records 1000 --quiet --workload=
# Flags override properties (README): validating the properties before the
# flags are applied rejected this.
expect_exit 60 0 'run:' -- --index null --workload c -p recordcount=0 --records 500 \
  --operations 500 --quiet
# README, Traces: "-p recordcount=0 --load none for a trace that brings its own".
printf 'insert 1\ninsert 2\nread 1\n' >"$work/own.txt"
expect_exit 60 0 'run: 3 ops' -- --index btree -p recordcount=0 --load none \
  --trace-in "$work/own.txt" --threads 1 --coroutines 1 --quiet
# An unwritable --trace-out is found before the run, not after it.
expect_exit 20 2 'trace' -- --index null --workload c --records 1000 --duration 40 --quiet \
  --trace-out "$work/no-such-dir/trace.txt"

# --help says what works.
help=$("$ycsb" --help)
if grep -q -- '-P=FILE' <<<"$help"; then
  printf 'recordcount=1000\noperationcount=1000\nreadproportion=1\n' >"$work/c.properties"
  expect_exit 60 0 'run:' -- -P="$work/c.properties" --index null --quiet
fi
if grep -q '32 for strings' <<<"$help"; then
  expect_exit 60 0 'run:' -- "${small[@]}" --key-type string --key-bytes 32
fi
# "--seed: a run repeats op for op": two runs of a workload with inserts,
# default shape (2 threads x 4 coroutines), must issue the same operations.
for i in 1 2; do
  timeout 120 "$ycsb" --index btree --workload d --records 2000 --operations 5000 --quiet \
    --trace-out "$work/d$i.txt" >/dev/null 2>&1 || fail "workload d run $i failed"
  sort "$work/d$i.txt" >"$work/d$i.sorted"
done
if grep -q 'generator: a run repeats op for op' <<<"$help" && ! cmp -s "$work/d1.sorted" "$work/d2.sorted"; then
  fail "--help promises op-for-op repeats, but two --seed 1 runs of workload d issued" \
    "$(diff "$work/d1.sorted" "$work/d2.sorted" | grep -c '^[<>]') different operations"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all dmidx-ycsb review checks passed"
