#!/usr/bin/env bash
# Multi-process cluster test over real RDMA (run inside tools/softroce-vm.sh,
# or on any machine with RDMA devices): memcached, two dmidx-memnode daemons
# and two dmidx-cluster-check clients on different devices, bootstrapped
# through memcached, must agree on exact FAA/CAS/lock-protected totals. Then
# the failure paths: memcached down, a node that never arrives at a barrier,
# a client that dies mid-run. Every wait is bounded; nothing may hang.
#
# Usage: verbs_cluster_test.sh DMIDX_MEMNODE DMIDX_CLUSTER_CHECK
# Exit: 0 pass, 1 fail, 77 skipped (no RDMA device here).
set -uo pipefail

memnode=$1
check=$2
mapfile -t devices < <(ls /sys/class/infiniband 2>/dev/null)
if [ ${#devices[@]} -eq 0 ]; then
  echo "SKIP: no RDMA device on this machine; run it under tools/softroce-vm.sh"
  exit 77
fi
mn_device=${devices[0]}
cn_devices=("${devices[0]}" "${devices[1]:-${devices[0]}}")
ulimit -l unlimited 2>/dev/null || true

work=$(mktemp -d)
pids=()
failures=0
passes=0
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "PASS: $*"; passes=$((passes + 1)); }

# A memcached on a port the kernel picks, loopback only.
MEMCACHED_PORT_FILENAME=$work/port memcached -l 127.0.0.1 -p -1 -U 0 -u root -m 64 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
port=$(sed -n 's/^TCP INET: //p' "$work/port" | head -1)
[ -n "$port" ] || { echo "FAIL: memcached did not start"; exit 1; }
server=127.0.0.1:$port

# start_memnodes CLUSTER: two daemons, the first starts the run; waits for
# both ready lines.
start_memnodes() {
  local cluster=$1 i
  for i in 0 1; do
    local flags=(--memcached="$server" --cluster="$cluster" --pool-bytes=32M --chunk-bytes=1M
                 --lock-bytes=64K --huge-pages=off --device="$mn_device")
    [ "$i" -eq 0 ] && flags+=(--new-run)
    "$memnode" "${flags[@]}" > "$work/$cluster-mn$i.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 300); do grep -q ready "$work/$cluster-mn$i.log" && break; sleep 0.1; done
    if ! grep -q ready "$work/$cluster-mn$i.log"; then
      cat "$work/$cluster-mn$i.log"
      return 1
    fi
  done
  cat "$work/$cluster"-mn*.log
}

# run_client CLUSTER INDEX [flags...]: one dmidx-cluster-check in the
# background; its pid in $client_pid (no subshell, so `wait` can reap it).
run_client() {
  local cluster=$1 index=$2
  shift 2
  "$check" --memcached="$server" --cluster="$cluster" --memory-nodes=2 \
    --device="${cn_devices[$index]}" "$@" > "$work/$cluster-cn$index.log" 2>&1 &
  client_pid=$!
}

# run_two_clients CLUSTER "FLAGS0" "FLAGS1": clients 0 and 1 at once (each
# flag string is split into words), waits for both, shows their logs; their
# exit codes in $ra and $rb.
run_two_clients() {
  local cluster=$1 a b
  # shellcheck disable=SC2086
  run_client "$cluster" 0 $2
  a=$client_pid
  # shellcheck disable=SC2086
  run_client "$cluster" 1 $3
  b=$client_pid
  wait "$a"; ra=$?
  wait "$b"; rb=$?
  cat "$work/$cluster-cn0.log" "$work/$cluster-cn1.log"
}

# 1. Two clients on two devices, exact totals.
if start_memnodes main; then
  client_flags="--clients=2 --threads=2 --ops=50 --timeout=120"
  run_two_clients main "$client_flags" "$client_flags"
  if [ $ra -eq 0 ] && [ $rb -eq 0 ] && grep -q "expected=[0-9]* EXACT" "$work/main-cn0.log" &&
     grep -q "expected=[0-9]* EXACT" "$work/main-cn1.log" &&
     grep -q "btree EXACT" "$work/main-cn0.log" && grep -q "btree EXACT" "$work/main-cn1.log"; then
    pass "two clients, two memory nodes: exact totals, every B+tree key found"
  else
    fail "two-client cluster check (exit $ra, $rb)"
  fi
else
  fail "memory nodes did not start"
fi

# 2. memcached unreachable: a clear error and a non-zero exit, quickly.
"$check" --memcached=127.0.0.1:1 --cluster=down --timeout=5 > "$work/down.log" 2>&1
rc=$?
cat "$work/down.log"
if [ $rc -ne 0 ] && grep -q "memcached at 127.0.0.1:1 unreachable" "$work/down.log"; then
  pass "memcached down is reported"
else
  fail "memcached down (exit $rc)"
fi
"$memnode" --memcached=127.0.0.1:1 --cluster=down --pool-bytes=4M --chunk-bytes=1M \
  --huge-pages=off > "$work/down-mn.log" 2>&1
rc=$?
cat "$work/down-mn.log"
if [ $rc -ne 0 ] && grep -q "unreachable" "$work/down-mn.log"; then
  pass "dmidx-memnode reports memcached down"
else
  fail "dmidx-memnode with memcached down (exit $rc)"
fi

# 3. A node that never arrives: three clients expected, two start.
if start_memnodes absent; then
  client_flags="--clients=3 --threads=1 --ops=5 --timeout=8"
  run_two_clients absent "$client_flags" "$client_flags"
  if [ $ra -ne 0 ] && [ $rb -ne 0 ] &&
     grep -q "2 of 3 nodes arrived at barrier 'check-start'" "$work/absent-cn0.log"; then
    pass "a missing node is named at the barrier"
  else
    fail "missing node (exit $ra, $rb)"
  fi
else
  fail "memory nodes for the missing-node case did not start"
fi

# 4. A client dies right after the start barrier: the survivor reports it at
# the next barrier instead of hanging.
if start_memnodes dies; then
  client_flags="--clients=2 --threads=1 --ops=20 --timeout=10"
  run_two_clients dies "$client_flags" "$client_flags --die-after-start"
  if [ $ra -ne 0 ] && [ $rb -eq 9 ] &&
     grep -q "1 of 2 nodes arrived at barrier 'check-done'" "$work/dies-cn0.log"; then
    pass "a dead client is reported by the survivor"
  else
    fail "dying client (exit $ra, $rb)"
  fi
else
  fail "memory nodes for the dying-client case did not start"
fi

# 5. The daemons shut down cleanly on SIGTERM.
clean=0
for pid in "${pids[@]:1}"; do
  kill -TERM "$pid" 2>/dev/null && { wait "$pid" || clean=1; }
done
if [ $clean -eq 0 ] && grep -q "stopping on Terminated" "$work/main-mn0.log"; then
  pass "memory nodes stop cleanly on SIGTERM"
else
  fail "memory node shutdown"
fi

echo "$passes passed, $failures failed"
[ $failures -eq 0 ]
