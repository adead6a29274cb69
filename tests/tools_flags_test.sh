#!/usr/bin/env bash
# Every tool's bad flags, on any machine (no RDMA needed): each exits 2 with
# exactly one line on stderr, "TOOL: <what is wrong, naming the flag> (run
# with --help)", in the words of lib/common/values.h, and nothing on stdout.
# Each tool that joins a cluster is pointed at a memcached nobody listens on
# (127.0.0.1:1) and, for dmidx-ycsb, at the RDMA cluster: a flag checked
# only after the tool reached for memcached, a device or a system limit
# would fail with that error (exit 1) instead of its own. A control run per
# tool shows that flags that are fine do get that far.
#
#   tools_flags_test.sh DMIDX_YCSB DMIDX_MEMNODE DMIDX_CLUSTER_CHECK [DMIDX_CPU_COST]
set -uo pipefail

ycsb=$1
memnode=$2
cluster_check=$3
cpu_cost=${4:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
checks=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# refused TOOL MESSAGE ARGS...: TOOL ARGS exits 2, prints nothing on stdout
# and exactly "NAME: MESSAGE (run with --help)" on stderr.
refused() {
  local tool=$1 message=$2
  shift 2
  local name status
  name=$(basename "$tool")
  timeout 60 "$tool" "$@" >"$work/out" 2>"$work/err"
  status=$?
  checks=$((checks + 1))
  local expected="$name: $message (run with --help)"
  if [ "$status" -ne 2 ] || [ "$(cat "$work/err")" != "$expected" ] || [ -s "$work/out" ]; then
    fail "$name $*: exit $status, stderr:"$'\n'"  $(cat "$work/err")"$'\n'"expected exit 2 and:" \
      $'\n'"  $expected"$'\n'"stdout: $(head -c 300 "$work/out")"
  fi
}

# reaches TOOL PATTERN ARGS...: TOOL ARGS gets past its flags to the cluster
# and fails there: exit 1, stderr matching the extended regex PATTERN.
reaches() {
  local tool=$1 pattern=$2
  shift 2
  local status
  timeout 60 "$tool" "$@" >"$work/out" 2>"$work/err"
  status=$?
  checks=$((checks + 1))
  if [ "$status" -ne 1 ] || ! grep -Eq -- "$pattern" "$work/err"; then
    fail "$(basename "$tool") $*: exit $status, expected 1 and '$pattern':"$'\n'"$(cat "$work/err")"
  fi
}

unreachable=--memcached=127.0.0.1:1

# dmidx-ycsb over RDMA, which opens its device and memcached first of all.
verbs=(--backend=verbs "$unreachable" --quiet)
reaches "$ycsb" 'opening the cluster' "${verbs[@]}" --index null --workload c --records 100 \
  --operations 100
# The defects a new user found (issue 24): CLI11's 300-digit bound on a
# negative count, a pool calculation for keys no index takes.
refused "$ycsb" "--records: must be >= 0, not -5" "${verbs[@]}" --records -5
refused "$ycsb" "--key-bytes: must be <= 128 (the key-size limit of index radix), not 300" \
  "${verbs[@]}" --key-bytes 300
refused "$ycsb" "--key-bytes: must be <= 128 (the key-size limit of index radix), not 300" \
  --quiet --key-bytes 300
refused "$ycsb" "--key-bytes: must be <= 256 (the key-size limit of index btree), not 300" \
  "${verbs[@]}" --index btree --key-bytes 300
refused "$ycsb" "--key-bytes: must be <= 128 (the key-size limit of index radix), not 200" \
  "${verbs[@]}" --index btree,radix --key-bytes 200
# Keys the B+tree takes, but not in four to a node of the default size.
refused "$ycsb" \
  "--btree.node_bytes: a node of 1024 bytes holds fewer than 4 keys of 200 bytes; use larger nodes" \
  "${verbs[@]}" --index btree --key-bytes 200
refused "$ycsb" "--key-bytes: must be >= 1, not 0" "${verbs[@]}" --key-bytes 0
refused "$ycsb" "--key-bytes: string keys of 8 bytes are too small; the minimum is 41 bytes" \
  "${verbs[@]}" --key-type string --key-bytes 8
# Counts: a non-number, an overflow, a negative, zero where it means nothing.
refused "$ycsb" "--records: 'abc' is not an integer" "${verbs[@]}" --records abc
refused "$ycsb" "--records: '1.5' is not an integer" "${verbs[@]}" --records 1.5
refused "$ycsb" \
  "--records: must be <= 18446744073709551615, not 99999999999999999999999" \
  "${verbs[@]}" --records 99999999999999999999999
refused "$ycsb" "--operations: must be >= 0, not -1" "${verbs[@]}" --operations -1
refused "$ycsb" "--warmup: must be >= 0, not -1" "${verbs[@]}" --warmup -1
refused "$ycsb" "--seed: must be >= 0, not -1" "${verbs[@]}" --seed -1
refused "$ycsb" "--threads: must be >= 1, not 0" "${verbs[@]}" --threads 0
refused "$ycsb" "--threads: 'x' is not an integer" "${verbs[@]}" --threads 1,x
refused "$ycsb" "--threads: must be <= 4294967295, not 99999999999" "${verbs[@]}" \
  --threads 99999999999
refused "$ycsb" "--coroutines: must be >= 1, not -2" "${verbs[@]}" --coroutines -2
refused "$ycsb" "--compute-nodes: must be >= 1, not 0" "${verbs[@]}" --compute-nodes 0
refused "$ycsb" "--memory-nodes: must be >= 1, not 0" "${verbs[@]}" --memory-nodes 0
refused "$ycsb" "--memory-nodes: must be <= 65535, not 99999" "${verbs[@]}" --memory-nodes 99999
# Sizes.
refused "$ycsb" \
  "--pool-bytes: must be >= 8264K (the header, a catalog of 1024 entries, one chunk of 8M and a page of seal words), not 0" \
  "${verbs[@]}" --pool-bytes 0
refused "$ycsb" "--pool-bytes: must be <= 128T, not 99999999999999999999999" "${verbs[@]}" \
  --pool-bytes 99999999999999999999999
refused "$ycsb" "--pool-bytes: must be <= 256G (the pool limit of index radix), not 300G" \
  --quiet --pool-bytes 300G
refused "$ycsb" "--cache-bytes: '12Q' is not a size, e.g. 4096, 64K or 1G" "${verbs[@]}" \
  --cache-bytes 1M,12Q
refused "$ycsb" "--cache-bytes: must be >= 0, not -1" "${verbs[@]}" --cache-bytes -1
# Real numbers.
refused "$ycsb" "--duration: 'nan' is not a number" "${verbs[@]}" --duration nan
refused "$ycsb" "--duration: must be <= 1000000000, not 1e30" "${verbs[@]}" --duration 1e30
refused "$ycsb" "--duration: must be 0 (not given) or >= 0.001 (it counts milliseconds), not 0.0001" \
  "${verbs[@]}" --duration 0.0001
refused "$ycsb" "--target-rate: 'inf' is not a finite number" "${verbs[@]}" --target-rate inf
refused "$ycsb" "--target-rate: must be >= 0, not -1" "${verbs[@]}" --target-rate -1
refused "$ycsb" "--timeout: must be >= 0.001, not 0" "${verbs[@]}" --timeout 0
refused "$ycsb" "--fill-factor: must be > 0, not 0" "${verbs[@]}" --fill-factor 0
refused "$ycsb" "--fill-factor: must be <= 1, not 1.5" "${verbs[@]}" --fill-factor 1.5
refused "$ycsb" "--retry-backoff-min: must be <= 1000000000, not 1e10" "${verbs[@]}" \
  --retry-backoff-min 1e10
refused "$ycsb" "--retry-backoff-min: must be <= --retry-backoff-max=2, not 5" "${verbs[@]}" \
  --retry-backoff-min 5 --retry-backoff-max 2
# Index options, the simulated fabric's model, the device.
refused "$ycsb" "--btree.node_bytes: must be >= 256, not 0" "${verbs[@]}" --btree.node_bytes=0
refused "$ycsb" "--btree.node_bytes: must be a multiple of 64, not 1000" "${verbs[@]}" \
  --btree.node_bytes=1000
refused "$ycsb" "--btree.rdwc_table_entries: must be <= 1048576, not 99999999" "${verbs[@]}" \
  --btree.rdwc_table_entries=99999999
refused "$ycsb" "--radix.lock_timeout_ms: must be >= 1, not 0" "${verbs[@]}" \
  --radix.lock_timeout_ms=0
refused "$ycsb" "--btree.combine_commands: 'maybe' is not on or off (nor true/false, yes/no, 1/0)" \
  "${verbs[@]}" --btree.combine_commands=maybe
refused "$ycsb" "--sim round_trip_ns: must be >= 0, not -1" --fabric sim --quiet \
  --sim round_trip_ns=-1
# What the simulated fabric would refuse at its first point, refused up front.
refused "$ycsb" "--sim: sim fabric: SimOptions::nic_messages_per_second must be positive" \
  --fabric sim --quiet --sim nic_mops=0
refused "$ycsb" "--sim: sim fabric: SimOptions::atomic_bucket_shift must be below 64" \
  --fabric sim --quiet --sim atomic_bucket_shift=64
refused "$ycsb" "--sim mtu: must be a whole number, not 1.5" --fabric sim --quiet --sim mtu=1.5
out=$("$ycsb" --fabric sim --quiet --sim round_trip_ns=0 2>&1 >/dev/null)
[ $? -eq 2 ] && grep -q "^dmidx-ycsb: --sim: sim fabric: SimOptions::round_trip (0 ns) is shorter" \
  <<<"$out" || fail "a round trip shorter than its parts was not refused up front: $out"
checks=$((checks + 1))
# A flag refused after --json and --trace-out were checked leaves no file.
refused "$ycsb" "--pool-bytes: must be >= 8264K (the header, a catalog of 1024 entries, one chunk of 8M and a page of seal words), not 0" \
  --index btree --workload c --quiet --pool-bytes 0 --json "$work/left.json" \
  --trace-out "$work/left.trace"
refused "$ycsb" "--btree.node_bytes: must be >= 256, not 0" --index btree --workload c --quiet \
  --btree.node_bytes=0 --json "$work/left.json" --trace-out "$work/left.trace"
[ ! -e "$work/left.json" ] && [ ! -e "$work/left.trace" ] ||
  fail "a refused run left $(ls "$work"/left.* 2>/dev/null) behind"
checks=$((checks + 1))
# Counts so large that the key range would wrap.
refused "$ycsb" "record_count (property recordcount) is 18446744073709551600; at most 2^48 (281474976710656)" \
  --index btree --workload c --records 18446744073709551600 --operations 1 --quiet
# The failure experiment (--kill-compute-node ID@SECONDS): in-process
# backends only, an id of the run, a time inside a timed run phase with a
# timeline window before it.
kill=(--fabric sim --quiet --compute-nodes 3 --duration 1)
refused "$ycsb" "--kill-compute-node: only with --backend local or sim; on a verbs cluster, kill the compute node's process (kill -9) and give every process --expect-deaths" \
  "${verbs[@]}" --compute-nodes 3 --duration 1 --kill-compute-node 1@0.5
# A verbs run that expects deaths, and the acknowledged-write log: one
# point each, a log that can be written, deaths expected on verbs only.
refused "$ycsb" "--expect-deaths: only with --backend verbs (on local or sim, --kill-compute-node runs the failure experiment)" \
  --fabric local --quiet --index btree --workload a --operations 10 --expect-deaths
refused "$ycsb" "--expect-deaths runs one point, not 2: give one index, one workload and one value of each list" \
  "${verbs[@]}" --compute-nodes 2 --index btree,radix --workload a --duration 1 --expect-deaths
refused "$ycsb" "--ack-log runs one point, not 2: give one index, one workload and one value of each list" \
  --fabric local --quiet --index btree --workload a,c --operations 10 --ack-log "$work/acks"
refused "$ycsb" "--ack-log: cannot write $work/no-such-dir/acks" \
  --fabric local --quiet --index btree --workload a --operations 10 --ack-log "$work/no-such-dir/acks"
refused "$ycsb" "--kill-compute-node: '1' is not ID@SECONDS, e.g. 1@0.5" "${kill[@]}" \
  --kill-compute-node 1
refused "$ycsb" "--kill-compute-node ID: 'x' is not an integer" "${kill[@]}" \
  --kill-compute-node x@0.5
refused "$ycsb" "--kill-compute-node ID: must be >= 0, not -1" "${kill[@]}" \
  --kill-compute-node -1@0.5
refused "$ycsb" "--kill-compute-node: compute node 3 is not in the run: --compute-nodes=3 has ids 0 to 2" \
  "${kill[@]}" --kill-compute-node 3@0.5
refused "$ycsb" "--kill-compute-node: compute node 2 is not in the run: --compute-nodes=2 has ids 0 to 1" \
  --fabric local --quiet --compute-nodes 4,2 --duration 1 --kill-compute-node 2@0.5
refused "$ycsb" "--kill-compute-node: needs 2 or more compute nodes (the survivors), not --compute-nodes=1" \
  --fabric sim --quiet --duration 1 --kill-compute-node 0@0.5
refused "$ycsb" "--kill-compute-node SECONDS: must be > 0, not 0" "${kill[@]}" \
  --kill-compute-node 1@0
refused "$ycsb" "--kill-compute-node SECONDS: 'soon' is not a number" "${kill[@]}" \
  --kill-compute-node 1@soon
refused "$ycsb" "--kill-compute-node: the time must be inside the run phase, below --duration=1, not 2" \
  "${kill[@]}" --kill-compute-node 1@2
refused "$ycsb" "--kill-compute-node: the time must be inside the run phase, below --duration=1, not 1" \
  "${kill[@]}" --kill-compute-node 1@1
refused "$ycsb" "--kill-compute-node: needs --duration (the kill falls inside the run phase)" \
  --fabric sim --quiet --compute-nodes 3 --kill-compute-node 1@0.5
refused "$ycsb" "--kill-compute-node: the time must be >= --timeline-interval=0.01 (a window before the kill to compare with), not 0.005" \
  "${kill[@]}" --kill-compute-node 1@0.005
refused "$ycsb" "--kill-compute-node: needs a timeline (--timeline-interval above 0) to measure the recovery on" \
  "${kill[@]}" --kill-compute-node 1@0.5 --timeline-interval 0
refused "$ycsb" "--timeline-interval: must be 0 (no timeline) or >= 0.000001 (a microsecond), not 1e-09" \
  "${verbs[@]}" --timeline-interval 1e-9
refused "$ycsb" "--timeline-interval: must be >= 0, not -1" "${verbs[@]}" --timeline-interval -1
refused "$ycsb" "--lease-timeout: must be at least 2 x --lease-period=0.1 (one late renewal must not get a compute node judged dead), not 0.15" \
  "${verbs[@]}" --lease-timeout 0.15
refused "$ycsb" "--lease-period: must be > 0, not 0" "${verbs[@]}" --lease-period 0
refused "$ycsb" "--compact-bundles-per-pass: must be <= 65536, not 65537" "${verbs[@]}" \
  --compact-bundles-per-pass 65537
refused "$ycsb" "--cache-window-epochs: must be <= 65536, not 70000" "${verbs[@]}" \
  --cache-window-epochs 70000
refused "$ycsb" "--max-draining-chunks: must be <= 124, not 125" "${verbs[@]}" \
  --max-draining-chunks 125
refused "$ycsb" "--exhausted-wait: must be >= 0, not -1" "${verbs[@]}" --exhausted-wait -1
refused "$ycsb" "--recovery-fraction: must be <= 1, not 1.5" "${kill[@]}" \
  --kill-compute-node 1@0.5 --recovery-fraction 1.5
refused "$ycsb" "--recovery-fraction: must be > 0, not 0" "${kill[@]}" \
  --kill-compute-node 1@0.5 --recovery-fraction 0
refused "$ycsb" "--recovery-window: must be > 0, not 0" "${kill[@]}" \
  --kill-compute-node 1@0.5 --recovery-window 0
refused "$ycsb" "--port: must be >= 1, not 0" "${verbs[@]}" --port 0
refused "$ycsb" "--gid-index: must be <= 255, not 300" "${verbs[@]}" --gid-index 300
refused "$ycsb" "--json: cannot write $work/no-such-dir/points.json" "${verbs[@]}" \
  --json "$work/no-such-dir/points.json"

# dmidx-memnode: its memlock limit, memcached and device come after its flags.
memory=(--pool-bytes=4M --chunk-bytes=1M --huge-pages=off)
reaches "$memnode" 'memcached at 127.0.0.1:1 unreachable' "$unreachable" "${memory[@]}"
refused "$memnode" \
  "--pool-bytes: must be >= 8264K (the header, a catalog of 1024 entries, one chunk of 8M and a page of seal words), not 0" \
  "$unreachable" --pool-bytes=0
refused "$memnode" \
  "--pool-bytes: must be >= 1096K (the header, a catalog of 1024 entries, one chunk of 1M and a page of seal words), not 1M" \
  "$unreachable" --pool-bytes=1M --chunk-bytes=1M
refused "$memnode" "--pool-bytes: must be <= 128T, not 99999999999999999999999" "$unreachable" \
  --pool-bytes=99999999999999999999999
refused "$memnode" "--pool-bytes: must be >= 0, not -1" "$unreachable" --pool-bytes=-1
refused "$memnode" "--lock-bytes: must be >= 8, not 0" "$unreachable" "${memory[@]}" --lock-bytes=0
refused "$memnode" "--lock-bytes: must be a multiple of 8, not 12" "$unreachable" "${memory[@]}" \
  --lock-bytes=12
refused "$memnode" "--chunk-bytes: must be a multiple of 4K, not 5000" "$unreachable" \
  --chunk-bytes=5000
refused "$memnode" "--catalog-entries: must be >= 1, not 0" "$unreachable" "${memory[@]}" \
  --catalog-entries=0
refused "$memnode" "--catalog-entries: must be <= 4294967295, not 99999999999" "$unreachable" \
  "${memory[@]}" --catalog-entries=99999999999
refused "$memnode" "--port: 'x' is not an integer" "$unreachable" "${memory[@]}" --port=x
refused "$memnode" "--huge-pages: 'maybe' is not on or off (nor true/false, yes/no, 1/0)" \
  "$unreachable" --huge-pages=maybe

# dmidx-cluster-check over RDMA (its default backend).
reaches "$cluster_check" 'memcached|RDMA device' "$unreachable" --ops=10
refused "$cluster_check" "--clients: must be >= 1, not 0" "$unreachable" --clients=0
refused "$cluster_check" "--threads: must be <= 255, not 256" "$unreachable" --threads=256
refused "$cluster_check" "--ops: must be <= 100000000, not 99999999999999999999999" \
  "$unreachable" --ops=99999999999999999999999
refused "$cluster_check" "--ops: '1e3' is not an integer" "$unreachable" --ops=1e3
refused "$cluster_check" "--timeout: must be >= 1, not -5" "$unreachable" --timeout=-5
refused "$cluster_check" "--memory-nodes: must be >= 1, not 0" "$unreachable" --memory-nodes=0
refused "$cluster_check" "--clients: must be 1 with --backend=local (one client in this process), not 2" \
  --backend=local --clients=2

# dmidx-cpu-cost (in the builds with benchmarks): refused before it builds
# its in-process cluster.
if [ -n "$cpu_cost" ]; then
  refused "$cpu_cost" "--keys: must be >= 1000, not -1" --keys=-1
  refused "$cpu_cost" "--operations: must be >= 2, not 1" --operations=1
  refused "$cpu_cost" "--scan-length: must be >= 1, not 0" --scan-length=0
  refused "$cpu_cost" "--seed: 'x' is not an integer" --seed=x
  refused "$cpu_cost" "--operations: must be <= --keys=2000, not 3000" --keys=2000 --operations=3000
  refused "$cpu_cost" "--scan-length: must be < --keys=2000, not 2000" --keys=2000 --scan-length=2000
fi

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
