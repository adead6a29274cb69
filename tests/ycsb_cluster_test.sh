#!/usr/bin/env bash
# dmidx-ycsb as a cluster over real RDMA (run inside tools/softroce-vm.sh, or
# on any machine with RDMA devices): memcached, two dmidx-memnode daemons and
# two dmidx-ycsb compute-node processes running the same command, one per
# device. Node 0 must print the cluster's merged tables and write the JSON;
# the other node prints its share. Then the failure paths: a declared compute
# node that never starts, and one killed mid-run (the survivor finishes with
# no failed operation and finds every acknowledged write). Counts are small: under
# emulation an RDMA operation takes ~100 us. Every wait is bounded; nothing
# may hang.
#
# Usage: ycsb_cluster_test.sh DMIDX_MEMNODE DMIDX_YCSB
# Exit: 0 pass, 1 fail, 77 skipped (no RDMA device here).
set -uo pipefail

memnode=$1
ycsb=$2
mapfile -t devices < <(ls /sys/class/infiniband 2>/dev/null)
if [ ${#devices[@]} -eq 0 ]; then
  echo "SKIP: no RDMA device on this machine; run it under tools/softroce-vm.sh"
  exit 77
fi
mn_device=${devices[0]}
cn_devices=("${devices[0]}" "${devices[1]:-${devices[0]}}")
ulimit -l unlimited 2>/dev/null || true

# The cluster run: YCSB A and E on the B+tree and on the radix tree, 2000
# records and 2000 operations over the cluster (each node runs half).
records=2000
operations=2000
run_seconds=300  # bound on one compute-node process of the cluster run

work=$(mktemp -d)
pids=()
failures=0
passes=0
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $* [at $SECONDS s]"; failures=$((failures + 1)); }
pass() { echo "PASS: $* [at $SECONDS s]"; passes=$((passes + 1)); }

# wait_bounded PID SECONDS: the exit status of PID, or 124 after killing it
# when it is still running after SECONDS (a hang).
wait_bounded() {
  local pid=$1 limit=$2 ticks=0
  while kill -0 "$pid" 2>/dev/null; do
    if [ $ticks -ge $((limit * 10)) ]; then
      echo "HANG: pid $pid still running after $limit s; killed"
      kill -9 "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.1
    ticks=$((ticks + 1))
  done
  wait "$pid"
}

# A memcached on a port the kernel picks, loopback only.
MEMCACHED_PORT_FILENAME=$work/port memcached -l 127.0.0.1 -p -1 -U 0 -u root -m 64 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(sed -n 's/^TCP INET: //p' "$work/port" | head -1)
[ -n "$port" ] || { echo "FAIL: memcached did not start"; exit 1; }
server=127.0.0.1:$port

# start_memnodes CLUSTER: two daemons, the first starts the run; waits for
# both ready lines. Their pids in $memnode_pids.
start_memnodes() {
  local cluster=$1 i
  memnode_pids=()
  for i in 0 1; do
    local flags=(--memcached="$server" --cluster="$cluster" --pool-bytes=32M --chunk-bytes=1M
                 --lock-bytes=64K --huge-pages=off --device="$mn_device")
    [ "$i" -eq 0 ] && flags+=(--new-run)
    "$memnode" "${flags[@]}" > "$work/$cluster-mn$i.log" 2>&1 &
    pids+=($!)
    memnode_pids+=($!)
    for _ in $(seq 300); do grep -q ready "$work/$cluster-mn$i.log" && break; sleep 0.1; done
    echo "memory node $i of cluster $cluster ready at $SECONDS s"
    if ! grep -q ready "$work/$cluster-mn$i.log"; then
      cat "$work/$cluster-mn$i.log"
      return 1
    fi
  done
}

# stop_memnodes CLUSTER: SIGTERM to both daemons; true if both were still
# running and stopped cleanly within 30 s.
stop_memnodes() {
  local cluster=$1 pid clean=0
  for pid in "${memnode_pids[@]}"; do
    if kill -TERM "$pid" 2>/dev/null; then
      wait_bounded "$pid" 30 || clean=1
    else
      echo "memory node pid $pid of cluster $cluster was no longer running"
      clean=1
    fi
  done
  [ $clean -eq 0 ]
}

# start_cn CLUSTER INDEX [flags...]: one dmidx-ycsb compute-node process in
# the background (stdout and stderr to $work/CLUSTER-cnINDEX.{out,err}); its
# pid in $cn_pid.
start_cn() {
  local cluster=$1 index=$2
  shift 2
  "$ycsb" --backend=verbs --memcached="$server" --cluster="$cluster" --memory-nodes=2 \
    --device="${cn_devices[$index]}" "$@" \
    > "$work/$cluster-cn$index.out" 2> "$work/$cluster-cn$index.err" &
  cn_pid=$!
  pids+=("$cn_pid")
}

# node_of CLUSTER INDEX: the compute-node id the bootstrap gave process
# INDEX (from its "compute node K of N" line), or "?".
node_of() {
  local id
  id=$(sed -n 's/^compute node \([0-9]*\) of .*/\1/p' "$work/$1-cn$2.err" | head -1)
  echo "${id:-?}"
}

show() {
  local f
  for f in "$@"; do
    echo "--- $(basename "$f")"
    cat "$f"
  done
}

# 1. The cluster run: two compute nodes, the same command on each.
if start_memnodes ycsb; then
  flags=(--compute-nodes=2 --index=btree,radix --workload="a,e" --records="$records"
         --operations="$operations" --threads=1 --coroutines=2 --timeout=120
         --json="$work/cluster.json" --quiet)
  start=$SECONDS
  start_cn ycsb 0 "${flags[@]}"
  a=$cn_pid
  start_cn ycsb 1 "${flags[@]}"
  b=$cn_pid
  wait_bounded "$a" $run_seconds; ra=$?
  wait_bounded "$b" $run_seconds; rb=$?
  echo "cluster run: exits $ra, $rb after $((SECONDS - start)) s"
  show "$work"/ycsb-cn0.out "$work"/ycsb-cn0.err "$work"/ycsb-cn1.out "$work"/ycsb-cn1.err
  # Which process is node 0 is the bootstrap's choice.
  n0=$(node_of ycsb 0)
  n1=$(node_of ycsb 1)
  if [ "$n0" = 0 ] && [ "$n1" = 1 ]; then
    lead=0 other=1
  elif [ "$n0" = 1 ] && [ "$n1" = 0 ]; then
    lead=1 other=0
  else
    lead="" other=""
  fi
  if [ $ra -ne 0 ] || [ $rb -ne 0 ] || [ -z "$lead" ]; then
    fail "cluster run (exit $ra, $rb; compute nodes '$n0', '$n1')"
  else
    pass "two compute-node processes, ids 0 and 1, both exit 0"
    out0=$work/ycsb-cn$lead.out
    out1=$work/ycsb-cn$other.out
    # Node 0: the merged tables (the cluster's total, both workloads on
    # both indexes) and the summary; never the share line.
    if [ "$(grep -c "^run: $operations ops" "$out0")" -eq 4 ] &&
       [ "$(grep -c "^load: bulk load of $records keys" "$out0")" -eq 4 ] &&
       grep -q "^== summary ==" "$out0" &&
       grep -q "btree a 2x1x2" "$out0" && grep -q "btree e 2x1x2" "$out0" &&
       grep -q "radix a 2x1x2" "$out0" && grep -q "radix e 2x1x2" "$out0" &&
       ! grep -q "share; node 0 prints" "$out0"; then
      pass "node 0 prints the cluster's tables ($operations run ops per point) and the summary"
    else
      fail "node 0's output lacks the merged tables or the summary"
    fi
    # Node 1: its share of each point, said so, and about half the ops.
    share_ops=$(sed -n 's/^run: \([0-9]*\) ops.*/\1/p' "$out1" | tr '\n' ' ')
    half=$((operations / 2))
    if [ "$(grep -c "(compute node 1's share; node 0 prints the cluster's)" "$out1")" -eq 4 ] &&
       [ "$share_ops" = "$half $half $half $half " ]; then
      pass "node 1 prints its share ($share_ops) and says so"
    else
      fail "node 1's output is not marked as its share (run ops: $share_ops)"
    fi
    # Node 0's JSON: one line per point, the cluster's totals, every loaded
    # key found.
    if [ -s "$work/cluster.json" ] &&
       python3 - "$work/cluster.json" "$records" "$operations" <<'PY'; then
import json, sys
path, records, operations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lines = [l for l in open(path) if l.strip()]
assert len(lines) == 4, f"{len(lines)} lines, expected 4"
points = [("btree", "a"), ("btree", "e"), ("radix", "a"), ("radix", "e")]
for line, (index, workload) in zip(lines, points):
    point = json.loads(line)
    assert point["index"] == index, point["index"]
    assert point["workload"]["name"] == workload, point["workload"]["name"]
    assert point["cluster"]["backend"] == "verbs", point["cluster"]
    assert point["cluster"]["compute_nodes"] == 2, point["cluster"]
    assert point["run"]["merged"] and point["run"]["node"] == 0, point["run"]
    phases = {p["phase"]: p for p in point["phases"]}
    assert phases["load"]["operations"] == records, phases["load"]["operations"]
    run = phases["run"]
    assert run["operations"] == operations, run["operations"]
    assert sum(o["operations"] for o in run["ops"].values()) == operations, run["ops"]
    for p in point["phases"]:
        for name, o in p["ops"].items():
            assert o["missing_loaded"] == 0, (workload, p["phase"], name, o["missing_loaded"])
    assert len(run["memory_node_ops"]) == 2 and min(run["memory_node_ops"]) > 0, \
        run["memory_node_ops"]
print(f"cluster.json: {len(lines)} points, {operations} run ops each, no missing loaded key")
PY
      pass "node 0's JSON: compute_nodes 2, $operations run ops per point, no missing_loaded"
    else
      fail "node 0's JSON ($work/cluster.json)"
    fi
  fi
  stop_memnodes ycsb || fail "memory nodes of the cluster run did not stop cleanly"
else
  fail "memory nodes did not start"
fi

# 2. A declared compute node that never starts: the one that did names the
# barrier and the missing node, and exits within its timeout.
if start_memnodes absent; then
  start=$SECONDS
  start_cn absent 0 --compute-nodes=2 --index=btree --workload=c --records=100 \
    --operations=100 --threads=1 --coroutines=1 --timeout=10 --quiet
  wait_bounded "$cn_pid" 60; rc=$?
  took=$((SECONDS - start))
  show "$work"/absent-cn0.out "$work"/absent-cn0.err
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 40 ] &&
     grep -q "1 of 2 nodes arrived at barrier 'ycsb.start'.*1 compute node never registered" \
       "$work/absent-cn0.err" && ! grep -q "not arrived: memory" "$work/absent-cn0.err"; then
    pass "a missing compute node is named at the barrier (exit $rc after $took s)"
  else
    fail "missing compute node (exit $rc after $took s)"
  fi
  stop_memnodes absent || fail "memory nodes of the missing-node case did not stop cleanly"
else
  fail "memory nodes for the missing-node case did not start"
fi

# 3. A compute node killed mid-run (README, "What survives what"), on each
# index: two processes run a hot-key YCSB A (zipfian over 100 records, so
# the keys are contended) with --expect-deaths and --ack-log; one is killed
# with SIGKILL 2 s into the 6 s run phase. The survivor must run the phase
# out with no failed operation (a lock the dead node held is freed once its
# lease stood still for --lease-timeout, and what it left half-done is
# recovered), judge the peer dead through its lease at the phase's end and
# name it, and then find every write either process acknowledged: each key
# reads its last acknowledged write, one concurrent with it, or the dead
# node's pending one (a missing key or an older value fails it).
for index in btree radix; do
  cluster=dies-$index
  if ! start_memnodes "$cluster"; then
    fail "memory nodes for the killed-node case ($index) did not start"
    continue
  fi
  flags=(--compute-nodes=2 --index="$index" --workload=a --records=100 --duration=6
         --threads=1 --coroutines=2 --timeout=20 --lease-period=0.1 --lease-timeout=1
         --expect-deaths --ack-log="$work/$cluster.acks")
  start_cn "$cluster" 0 "${flags[@]}"
  a=$cn_pid
  start_cn "$cluster" 1 "${flags[@]}"
  b=$cn_pid
  # Past the start barrier: the point's progress line.
  for _ in $(seq 600); do grep -q '^\[1/1\]' "$work/$cluster-cn1.err" && break; sleep 0.1; done
  sleep 2
  kill -9 "$b" 2>/dev/null
  killed_at=$SECONDS
  wait_bounded "$b" 10; rb=$?  # 137: killed, not finished before
  wait_bounded "$a" 60; ra=$?
  took=$((SECONDS - killed_at))
  survivor=$(node_of "$cluster" 0)
  victim=$(node_of "$cluster" 1)
  show "$work/$cluster-cn0.out" "$work/$cluster-cn0.err" "$work/$cluster-cn1.err"
  out=$work/$cluster-cn0.out
  if [ $rb -eq 137 ] && [ $ra -eq 0 ] && [ $took -le 45 ] &&
     grep -q "^compute node $survivor: [1-9][0-9]* run operations, 0 failed$" "$out" &&
     grep -q "compute node $victim died during the run phase" "$work/$cluster-cn0.err" &&
     grep -q "^ack-log check: [1-9][0-9]* keys with an acknowledged write" "$out" &&
     [ -s "$work/$cluster.acks.$victim" ]; then
    pass "$index: a compute node killed mid-run (exit $rb): the survivor ran the phase out with 0 failed ops, named the dead node, and found every acknowledged write (exit $ra, $took s after the kill)"
  else
    fail "$index: killed compute node (victim exit $rb, survivor exit $ra after $took s)"
  fi
  # The daemons outlive a compute node that vanished.
  stop_memnodes "$cluster" || fail "$index: memory nodes did not survive a killed compute node"
done

echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
