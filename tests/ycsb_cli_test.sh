#!/usr/bin/env bash
# dmidx-ycsb from the command line: --help and --workload list document
# everything; bad input exits 2 with a message naming it; small runs of
# every registered index through YCSB's workloads, a thread sweep, a cache
# sweep, a ladder, a YCSB property file and a trace round trip exit 0 with
# the output they promise; the plotting script turns their JSON into PNGs.
#
#   ycsb_cli_test.sh DMIDX_YCSB PLOT_SCRIPT [quick]
#
# quick (the sanitizer builds): the same checks on a tenth of the records and
# operations; the bench's own logic is single-threaded code the release build
# runs at full size, and a sanitizer's slowdown buys nothing more there.
set -uo pipefail

ycsb=$1
plot=$2
mode=${3:-full}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_exit_within SECONDS CODE PATTERN -- ARGS...: runs dmidx-ycsb for
# at most SECONDS (a hang fails the check instead of the whole test), checks
# its exit status and that stdout+stderr match the extended regex PATTERN.
expect_exit_within() {
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
    fail "dmidx-ycsb $* exited $status, expected $code; output:"$'\n'"$(tail -n 20 <<<"$out")"
    return
  fi
  if ! grep -Eq -- "$pattern" <<<"$out"; then
    fail "dmidx-ycsb $*: output does not match '$pattern':"$'\n'"$(tail -n 20 <<<"$out")"
  fi
}

# expect_exit CODE PATTERN -- ARGS...: the same, within 300 s.
expect_exit() {
  expect_exit_within 300 "$@"
}

is_png() {
  [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ]
}

small=(--records 20000 --operations 20000 --quiet)
sherman_records=5000
if [ "$mode" = quick ]; then
  small=(--records 2000 --operations 2000 --quiet)
  sherman_records=1000
fi

# --help documents every flag, property, workload and index option.
help=$("$ycsb" --help) || fail "--help exited non-zero"
for word in -P -p --workload --index --records --operations --duration --warmup --target-rate \
    --key-type --key-bytes --load --compute-nodes --threads --coroutines --cache-bytes --pin \
    --ladder --backend --memory-nodes --pool-bytes --json --trace-out --trace-in \
    --memcached --cluster recordcount operationcount readproportion updateproportion \
    insertproportion scanproportion readmodifywriteproportion requestdistribution \
    maxscanlength scanlengthdistribution zipfianconstant insertorder fieldcount fieldlength \
    write-intensive range-write --btree.combine_commands --btree.on_chip_locks \
    --btree.local_lock_table --btree.entry_level_write_back --btree.cache_bytes \
    --btree.read_delegation --radix.in_place_leaves --radix.rear_embedded_lock \
    --radix.read_delegation --radix.write_combining --radix.homogeneous_nodes \
    --radix.cache_bytes --timeline-interval --kill-compute-node --recovery-fraction \
    --recovery-window --write-bytes-multiple --chunk-bytes churn; do
  grep -qF -- "$word" <<<"$help" || fail "--help does not mention $word"
done
expect_exit 0 '^  write-only' -- --workload list

# Bad input: exit 2, naming what is wrong.
expect_exit 2 'bogus' -- --bogus
expect_exit 2 "unknown workload 'nope'.*write-intensive" -- --workload nope
expect_exit 2 "unknown index 'nope'" -- --index nope
expect_exit 2 'threads' -- --threads 0
expect_exit 2 'fill-factor' -- --fill-factor 1.5
expect_exit 2 'not a size' -- --cache-bytes 12Q
expect_exit 2 'no-such-file' -- -P "$work/no-such-file"
expect_exit 2 'recordcount' -- -p recordcount=abc
expect_exit 2 'combine_commands' -- --index btree --workload c "${small[@]}" \
  --btree.combine_commands=maybe
expect_exit 2 'pool-bytes=' -- --index btree --workload c --records 50000000 --pool-bytes 16M
expect_exit 2 'key' -- --key-type string --key-bytes 8

# Every registered index through YCSB's core workloads, two thread counts;
# the summary, the comparison of indexes and one JSON line per point.
expect_exit 0 'btree \| workload f.*' -- "${small[@]}" --threads 1,2 --json "$work/ycsb.json"
points=$(wc -l <"$work/ycsb.json")
# 3 indexes x 7 workloads x 2 thread counts.
[ "$points" -eq 42 ] || fail "ycsb.json holds $points points, expected 42"

# A cache sweep and the Sherman ladder.
expect_exit 0 'cache 1M' -- "${small[@]}" --index btree --workload c --cache-bytes 16K,1M \
  --json "$work/cache.json"
expect_exit 0 'FG\+.*\+combine.*\+on-chip.*\+hierarchical.*\+2-level ver' -- "${small[@]}" \
  --index btree --ladder --json "$work/ladder.json"
# Sherman's five workloads on the radix tree too.
expect_exit 0 'radix range-write 1x2x4' -- --index radix --workload sherman \
  --records "$sherman_records" --operations "$sherman_records" --quiet
# SMART's ladder for the radix tree, and a radix option that is not one.
expect_exit 0 'ART.*\+in-place.*\+rear lock.*\+read deleg.*\+write comb' -- "${small[@]}" \
  --index radix --ladder
expect_exit 2 'in_place_leaves' -- --index radix --workload c "${small[@]}" \
  --radix.in_place_leaves=maybe

# The failure experiment on the local fabric: compute node 1 of 2 killed
# 0.1 s into a 0.25 s run; the report gives the kill and the recovery.
expect_exit 0 'recovery: ([0-9.]+ ms after the kill|not recovered)' -- --index btree --workload c \
  --records 2000 --compute-nodes 2 --threads 1 --coroutines 2 --duration 0.25 \
  --kill-compute-node 1@0.1 --quiet --json "$work/kill.json"

# The figures.
if "$plot" -o "$work/figures" "$work/ycsb.json" "$work/cache.json" "$work/ladder.json" \
    "$work/kill.json" >"$work/plot.out" 2>&1; then
  for figure in throughput-latency cache ladder workloads timeline; do
    is_png "$work/figures/$figure.png" || fail "the plotting script did not write $figure.png"
  done
else
  fail "the plotting script failed: $(cat "$work/plot.out")"
fi

# A YCSB property file, as YCSB ships it, with a property we do not know.
cat >"$work/workloada" <<'EOF'
# Yahoo! Cloud System Benchmark
# Workload A: Update heavy workload
#   Application example: Session store recording recent actions
#
#   Read/update ratio: 50/50
#   Default data size: 1 KB records (10 fields, 100 bytes each, plus key)
#   Request distribution: zipfian

recordcount=1000
operationcount=1000
workload=site.ycsb.workloads.CoreWorkload

readallfields=true

readproportion=0.5
updateproportion=0.5
scanproportion=0
insertproportion=0

requestdistribution=zipfian
EOF
expect_exit 0 'update .*' -- -P "$work/workloada" -p recordcount=5000 -p operationcount=4000 \
  -p frobnicate=1 --index btree --quiet
expect_exit 0 "note: .*frobnicate" -- -P "$work/workloada" -p frobnicate=1 --index null --quiet
# A mix from a property file is named after the file (YCSB's "workloada",
# "mix.properties" as "mix"), in the tables and in the JSON.
expect_exit 0 '== null \| workload workloada \|' -- -P "$work/workloada" --index null --quiet \
  -p recordcount=1000 -p operationcount=1000 --json "$work/named.json"
grep -q '"name":"workloada"' "$work/named.json" || fail "the JSON does not name the workload workloada"
# Deletes (deleteproportion, dmidx's extension) run, are counted and traced,
# and replay, on every index.
printf 'readproportion=0.5\nupdateproportion=0\ndeleteproportion=0.5\nrequestdistribution=zipfian\n' \
  >"$work/deletes.properties"
expect_exit 0 '== summary' -- -P "$work/deletes.properties" --index all "${small[@]}" \
  --json "$work/deletes.json"
for index in btree radix; do
  grep "\"index\":\"$index\"" "$work/deletes.json" | grep -q '"delete":{' ||
    fail "$index's JSON counts no deletes"
done
expect_exit 0 'delete +[0-9]+' -- -P "$work/deletes.properties" --index radix --records 2000 \
  --operations 2000 --threads 1 --coroutines 1 --quiet --trace-out "$work/deletes.txt"
grep -q '^delete ' "$work/deletes.txt" || fail "the trace holds no delete"
expect_exit 0 'delete +[0-9]+' -- --index btree --records 2000 --quiet --trace-in "$work/deletes.txt"

# A trace written by one run replays in another.
expect_exit 0 'run: 3000 ops' -- --index btree --workload e --records 5000 --operations 3000 \
  --threads 1 --coroutines 1 --quiet --trace-out "$work/trace.txt"
[ "$(wc -l <"$work/trace.txt")" -eq 3000 ] || fail "the trace has $(wc -l <"$work/trace.txt") lines"
expect_exit 0 'run: 3000 ops' -- --index btree --records 5000 --quiet --trace-in "$work/trace.txt"
expect_exit 2 'trace' -- --index btree --trace-in "$work/no-trace.txt"

# Regressions a review found (each failed once): hangs on zero or negative
# counts, bad times, flags over properties, the trace recipe, help claims.
tiny=(--index null --workload c --records 1000 --operations 1000 --quiet)

# No run phase at all: --operations 0 without --duration ran forever.
expect_exit_within 20 2 'operations' -- --index null --workload c --records 1000 --operations 0 --quiet
# Negative counts wrapped to 2^64 - N (--warmup -1 ran forever).
expect_exit_within 20 2 'warmup' -- "${tiny[@]}" --warmup -1
expect_exit_within 20 2 'records' -- "${tiny[@]}" --records -5
# Non-finite times and rates were silently ignored (and converted with UB).
expect_exit_within 20 2 'duration' -- "${tiny[@]}" --duration nan
expect_exit_within 20 2 'duration' -- "${tiny[@]}" --duration 1e30
expect_exit_within 20 2 'target-rate' -- "${tiny[@]}" --target-rate inf
# The churn (--write-bytes-multiple): bad values and flags it does not go
# with are refused before anything runs; a small churn runs to its bytes,
# quiesces and reports the memory, in the text and in the JSON.
expect_exit_within 20 2 'write-bytes-multiple' -- "${tiny[@]}" --write-bytes-multiple -1
expect_exit_within 20 2 'write-bytes-multiple' -- "${tiny[@]}" --write-bytes-multiple nan
expect_exit_within 20 2 'write-bytes-multiple' -- "${tiny[@]}" --write-bytes-multiple x
expect_exit_within 20 2 'duration' -- "${tiny[@]}" --write-bytes-multiple 1 --duration 1
expect_exit_within 20 2 'timeline' -- "${tiny[@]}" --write-bytes-multiple 1 \
  --timeline-interval 0
expect_exit_within 20 2 'chunk-bytes' -- "${tiny[@]}" --chunk-bytes 1000
expect_exit_within 300 0 'remote memory \(quiesced\): .* live keys' -- --index radix \
  --workload churn --records 2000 --memory-nodes 1 --pool-bytes 16M --chunk-bytes 64K \
  --write-bytes-multiple 2 --lease-period 0.002 --lease-timeout 0.02 --quiet \
  --json "$work/churn.json"
if ! python3 -c '
import json, sys
point = json.loads(open(sys.argv[1]).readline())
memory = point["memory"]
assert memory["quiesced"] is True, memory
assert 0 < memory["live_keys"] <= 2000, memory
assert memory["bytes_in_use"] == sum(p["bytes_in_use"] for p in memory["pools"]), memory
assert point["run"]["write_bytes_multiple"] == 2, point["run"]
run = [p for p in point["phases"] if p["phase"] == "run"][0]
assert run["fabric"]["bytes_written"] >= 2 * memory["pool_bytes"], run["fabric"]
r = run["reclamation"]
assert r["retired_objects"] > 0 and r["reclaimed_objects"] == r["retired_objects"], r
# Compaction at its defaults: passes in the run phase (a worker taking a
# chunk with few left, the lease keeper giving back what it reclaimed).
assert r["compaction_passes"] > 0, r
' "$work/churn.json"; then
  fail "the churn's JSON lacks its memory report"
fi
# The reclamation flags reach the cluster: no compaction at all.
expect_exit_within 300 0 'remote memory \(quiesced\)' -- --index radix \
  --workload churn --records 2000 --memory-nodes 1 --pool-bytes 16M --chunk-bytes 64K \
  --write-bytes-multiple 2 --lease-period 0.002 --lease-timeout 0.02 --quiet \
  --compact-bundles-per-pass 0 --json "$work/churn-off.json"
if ! python3 -c '
import json, sys
point = json.loads(open(sys.argv[1]).readline())
run = [p for p in point["phases"] if p["phase"] == "run"][0]
r = run["reclamation"]
assert r["compaction_passes"] == 0 and r["chunks_returned"] == 0, r
assert r["reclaimed_objects"] == r["retired_objects"] > 0, r
' "$work/churn-off.json"; then
  fail "--compact-bundles-per-pass 0 still compacted"
fi
# The JSON records the settings that decide how fast memory comes back.
if ! python3 -c '
import json, sys
cluster = json.loads(open(sys.argv[1]).readline())["cluster"]
assert cluster["lease"] == {"period_ns": 2000000, "timeout_ns": 20000000}, cluster
r = cluster["reclamation"]
assert r["compact_bundles_per_pass"] == 0 and r["max_draining_chunks"] == 0, r
assert r["cache_window_epochs"] == 4 and r["compact_below_free_chunks"] == 16, r
assert r["exhausted_wait_ns"] == 1000000000, r
' "$work/churn-off.json"; then
  fail "the JSON does not record the lease and reclamation settings given"
fi
# An empty workload list silently ran a "custom" 95/5 mix of 1M operations.
expect_exit_within 20 2 'workload' -- --index null --records 1000 --quiet --workload=
# Flags override properties (README): validating the properties before the
# flags are applied rejected this.
expect_exit_within 60 0 'run:' -- --index null --workload c -p recordcount=0 --records 500 \
  --operations 500 --quiet
# README, Traces: "-p recordcount=0 --load none for a trace that brings its own".
printf 'insert 1\ninsert 2\nread 1\n' >"$work/own.txt"
expect_exit_within 60 0 'run: 3 ops' -- --index btree -p recordcount=0 --load none \
  --trace-in "$work/own.txt" --threads 1 --coroutines 1 --quiet
# An unwritable --trace-out is found before the run, not after it.
expect_exit_within 20 2 'trace' -- --index null --workload c --records 1000 --duration 40 --quiet \
  --trace-out "$work/no-such-dir/trace.txt"

# --help says what works.
help=$("$ycsb" --help)
if grep -q -- '-P=FILE' <<<"$help"; then
  printf 'recordcount=1000\noperationcount=1000\nreadproportion=1\n' >"$work/c.properties"
  expect_exit_within 60 0 'run:' -- -P="$work/c.properties" --index null --quiet
fi
if grep -q '32 for strings' <<<"$help"; then
  expect_exit_within 60 0 'run:' -- "${tiny[@]}" --key-type string --key-bytes 32
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
echo "all dmidx-ycsb command-line checks passed"
