#!/usr/bin/env bash
# dmidx-ycsb on the simulated fabric: the same command and seed give the
# same output twice (stdout, and the JSON without its wall-clock fields),
# with several compute nodes, threads and coroutines on both indexes; the
# presets run; the simulation speed is reported; the failure experiment
# (--kill-compute-node) keeps a timeline and repeats exactly; bad --sim and
# --preset use exits 2 naming the flag.
#
#   ycsb_sim_test.sh DMIDX_YCSB [quick]
#
# quick (the sanitizer builds): a third of the records and operations, and
# without the presets' runs, whose hundreds of contexts take minutes and
# gigabytes under a sanitizer; the release build runs them.
set -uo pipefail

ycsb=$1
mode=${2:-full}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

size=(--records 5000 --operations 12000)
[ "$mode" = quick ] && size=(--records 2000 --operations 4000)
args=(--fabric sim --index btree,radix --workload a,e "${size[@]}"
      --compute-nodes 3 --threads 2 --coroutines 3 --seed 7 --quiet)
for run in 1 2; do
  if ! timeout 300 "$ycsb" "${args[@]}" --json "$work/run$run.json" >"$work/run$run.out" \
      2>"$work/run$run.err"; then
    fail "sim run $run failed: $(tail -n 5 "$work/run$run.err")"
  fi
  # Wall time differs between runs by nature; everything else must not.
  python3 -c '
import json, sys
for line in open(sys.argv[1]):
    point = json.loads(line)
    for phase in point.get("phases", []):
        phase.pop("wall_seconds", None)
        phase.pop("cpu_seconds", None)
    print(json.dumps(point, sort_keys=True))' "$work/run$run.json" >"$work/run$run.cmp" ||
    fail "run $run: JSON unreadable"
done
cmp -s "$work/run1.out" "$work/run2.out" ||
  fail "stdout differs between two runs of one seed: $(diff "$work/run1.out" "$work/run2.out" | head -n 10)"
cmp -s "$work/run1.cmp" "$work/run2.cmp" || fail "JSON differs between two runs of one seed"
[ -s "$work/run1.cmp" ] || fail "no JSON written"
grep -q "NIC utilisation" "$work/run1.out" || fail "no NIC utilisation line"
grep -Eq "simulation speed: run phase, [0-9]+ ops simulated" "$work/run1.err" ||
  fail "no simulation speed on stderr"
python3 -c '
import json, sys
point = json.loads(open(sys.argv[1]).readline())
run = [p for p in point["phases"] if p["phase"] == "run"][0]
assert run["seconds"] > 0 and run["nics"], run.keys()' "$work/run1.json" ||
  fail "JSON lacks virtual seconds or NIC loads"

# Another seed gives another run.
timeout 300 "$ycsb" "${args[@]/--seed/--seed}" --seed 8 >"$work/run3.out" 2>/dev/null ||
  fail "seed 8 failed"
cmp -s "$work/run1.out" "$work/run3.out" && fail "seeds 7 and 8 gave identical output"

# The presets, scaled down.
presets=(sherman smart)
[ "$mode" = quick ] && presets=()
for preset in "${presets[@]}"; do
  out=$(timeout 300 "$ycsb" --preset "$preset" --workload c --records 5000 --operations 8000 \
    --quiet 2>&1) || fail "--preset $preset failed: $(tail -n 5 <<<"$out")"
  case $preset in
    sherman) grep -q "8 CN x 22 thr x 4 coro" <<<"$out" || fail "sherman preset shape: $out" ;;
    smart) grep -q "16 CN x 4 thr x 8 coro" <<<"$out" || fail "smart preset shape: $out" ;;
  esac
done

# The failure experiment: compute node 1 of 3 killed 105 ms into a 300 ms
# run (virtual time) of a uniform update mix over many keys, with 20 ms
# leases: a survivor that waits on a lock the dead node held recovers it
# and goes on. Checked on the JSON: the timeline's windows, the killed
# node's operations ending with the kill, the survivors going on with no
# failed operation, the fields the plot and readers rely on; and two runs
# giving one timeline.
kill_size=(--records 20000 --duration 0.3 --kill-compute-node 1@0.105)
[ "$mode" = quick ] && kill_size=(--records 5000 --duration 0.15 --kill-compute-node 1@0.055)
kill_args=(--fabric sim --index btree,radix --workload a -p requestdistribution=uniform
           "${kill_size[@]}" --compute-nodes 3 --threads 2 --coroutines 2
           --timeline-interval 0.01 --lease-period 0.002 --lease-timeout 0.02
           --btree.lock_timeout_ms=200 --radix.lock_timeout_ms=200 --seed 3 --quiet)
for run in 1 2; do
  timeout 300 "$ycsb" "${kill_args[@]}" --json "$work/kill$run.json" >"$work/kill$run.out" \
    2>"$work/kill$run.err" || fail "failure experiment run $run failed: $(tail -n 5 "$work/kill$run.err")"
done
grep -Eq "kill: compute node 1 at (105|55)\.[0-9]+ ms" "$work/kill1.out" ||
  fail "no kill line in the report: $(grep -E 'kill|recovery' "$work/kill1.out")"
grep -Eq "recovery: ([0-9.]+ ms after the kill|not recovered within the phase)" "$work/kill1.out" ||
  fail "no recovery line in the report"
python3 - "$work/kill1.json" "$work/kill2.json" <<'PY' || fail "failure experiment JSON checks"
import json, math, sys

def runs(path):
    out = []
    for line in open(path):
        point = json.loads(line)
        out.append((point, [p for p in point["phases"] if p["phase"] == "run"][0]))
    return out

first, second = runs(sys.argv[1]), runs(sys.argv[2])
assert len(first) == 2, "one point per index"
for (point, run), (_, again) in zip(first, second):
    name = point["index"]
    interval = run["timeline_interval_ns"]
    assert interval == 10_000_000, (name, interval)
    assert point["run"]["kill"]["compute_node"] == 1, point["run"]
    timeline, kill = run["timeline"], run["kill"]
    # One window per interval up to the one holding the phase's end.
    span = round(run["seconds"] * 1e9)
    assert len(timeline) == span // interval + 1, (name, len(timeline), span)
    assert len(timeline) >= point["run"]["duration_ms"] * 1_000_000 // interval + 1, name
    assert [w["start_ns"] for w in timeline] == [i * interval for i in range(len(timeline))]
    # Every operation is in the timeline, as succeeded or failed.
    failed = sum(sum(w["failed"].values()) for w in timeline)
    assert sum(w["ops"] for w in timeline) + failed == run["operations"], name
    assert failed == sum(run["failed"].values()), name
    at, killed_at = kill["at_ns"], kill["killed_at_ns"]
    assert at <= killed_at < at + interval, (name, at, killed_at)
    # The killed node's operations stop with the kill: nothing of it ends
    # in a window starting after it.
    killed = kill["killed"]["timeline"]
    for w in killed:
        if w["start_ns"] > killed_at:
            assert w["ops"] == 0 and not w["failed"], (name, w)
    assert sum(w["ops"] for w in killed if w["start_ns"] < at) > 0, name
    # The survivors go on after it.
    after = sum(all_w["ops"] - k["ops"] for all_w, k in zip(timeline, killed)
                if all_w["start_ns"] > killed_at)
    assert after > 0, (name, "no survivor operation after the kill")
    assert kill["survivors"]["operations"] + kill["killed"]["operations"] == run["operations"]
    recovery = kill["recovery"]
    for field in ("fraction", "span_ns", "measurable", "baseline_ops_per_second", "recovered",
                  "time_ns", "lowest_fraction"):
        assert field in recovery, (name, field)
    assert recovery["measurable"] and recovery["baseline_ops_per_second"] > 0, (name, recovery)
    assert recovery["fraction"] == 0.9 and recovery["span_ns"] == 50_000_000, recovery
    # Recovery: the survivors judge the dead node's lease, recover it and
    # go on; none of their operations fails.
    assert kill["survivors"]["failed"] == {}, (name, kill["survivors"])
    assert recovery["recovered"], (name, recovery)
    # Virtual time: the second run's timeline is the first's.
    assert again["timeline"] == timeline and again["kill"] == kill, (name, "runs differ")
PY
cmp -s "$work/kill1.out" "$work/kill2.out" || fail "the failure experiment's report differs between runs"

# Bad input.
for bad in "--sim bogus=1" "--sim round_trip_ns=x" "--sim pcie_ns" "--preset sherman --fabric local" \
           "--fabric local --sim nic_mops=10" "--sim model=2025" "--sim mtu=1e10"; do
  # shellcheck disable=SC2086
  out=$(timeout 60 "$ycsb" $bad --records 1000 --operations 1000 --quiet 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "dmidx-ycsb $bad exited $status, expected 2: $out"
  grep -Eq -- "--sim|--preset|round_trip" <<<"$out" || fail "dmidx-ycsb $bad: message names no flag: $out"
done

# --sim repeats: every setting counts, not only the first.
small=(--fabric sim --index btree --workload e --records 1000 --operations 2000 --quiet)
timeout 60 "$ycsb" "${small[@]}" --sim round_trip_ns=3000 >"$work/one.out" 2>/dev/null ||
  fail "--sim round_trip_ns=3000 failed"
timeout 60 "$ycsb" "${small[@]}" --sim round_trip_ns=3000 --sim pcie_ns=500 >"$work/two.out" \
  2>/dev/null || fail "--sim given twice failed"
cmp -s "$work/one.out" "$work/two.out" && fail "the second --sim setting was ignored"

# The uncalibrated model, whichever side of the other settings it is
# given, is changed by them, and runs differently from the calibrated one.
timeout 60 "$ycsb" "${small[@]}" --sim model=uncalibrated --sim mtu=1024 >"$work/old1.out" \
  2>/dev/null || fail "--sim model=uncalibrated failed"
timeout 60 "$ycsb" "${small[@]}" --sim mtu=1024 --sim model=uncalibrated >"$work/old2.out" \
  2>/dev/null || fail "--sim model=uncalibrated after mtu failed"
timeout 60 "$ycsb" "${small[@]}" >"$work/new.out" 2>/dev/null || fail "the calibrated model failed"
cmp -s "$work/old1.out" "$work/old2.out" || fail "--sim model=uncalibrated depends on its place"
# The last model= wins.
timeout 60 "$ycsb" "${small[@]}" --sim model=uncalibrated --sim model=calibrated >"$work/last.out" \
  2>/dev/null || fail "--sim model=uncalibrated --sim model=calibrated failed"
cmp -s "$work/last.out" "$work/new.out" || fail "--sim model=calibrated after uncalibrated lost"
cmp -s "$work/old1.out" "$work/new.out" && fail "the uncalibrated model ran as the calibrated one"

# A model the fabric refuses (a round trip shorter than its parts) fails
# the run with a message naming the option.
out=$(timeout 60 "$ycsb" --fabric sim --sim round_trip_ns=10 --records 1000 --operations 1000 \
  --quiet 2>&1) && fail "a 10 ns round trip was accepted"
grep -q "SimOptions::round_trip" <<<"$out" || fail "bad round trip: message names no option: $out"

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "ycsb_sim_test: all checks passed"
