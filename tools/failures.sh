#!/usr/bin/env bash
# The compute-node failure experiment (issue 26): on the simulated cluster,
# 3 compute nodes run YCSB workload A (zipfian) on each index, and compute
# node 1 is killed at one of several instants of the run phase; the
# survivors run the phase out. For each kill the report gives the
# survivors' failed operations (the claim: none), their lowest throughput
# over a window, and their recovery time (dmidx-ycsb --kill-compute-node:
# back to 90% of their throughput before the kill, and staying there).
# Writes docs/failures.md, the JSON of every run and the timeline figure
# of the first kill in docs/failures/.
#
#   tools/failures.sh [--out DIR] [--ycsb PATH] [--kills N]
#
#   --out    where the results and the report go (default: docs/)
#   --ycsb   a built dmidx-ycsb (default: built, Release, in
#            $DMIDX_BUILD_ROOT/release)
#   --kills  how many kill instants, 1 ms apart from 101 ms (default 8)
#
# Leases: period 2 ms, timeout 20 ms (dmidx-ycsb --lease-period,
# --lease-timeout), so that a recovery shows within a short run; the
# defaults (100 ms, 1 s) shift it by their difference.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/docs
ycsb=
kills=8
# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    --ycsb) [ $# -ge 2 ] || die "--ycsb needs a value"; ycsb=$2; shift 2 ;;
    --kills) [ $# -ge 2 ] || die "--kills needs a value"; kills=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[[ "$kills" =~ ^[1-9][0-9]*$ ]] && [ "$kills" -le 50 ] || die "--kills must be 1 to 50, not '$kills'"
mkdir -p "$out/failures"
[ -n "$ycsb" ] || ycsb=$(build_ycsb failures.sh "$out/failures/build.log")
[ -x "$ycsb" ] || die "no dmidx-ycsb at $ycsb"

args=(--fabric sim --index btree,radix --workload a --records 20000 --duration 0.3
      --compute-nodes 3 --threads 2 --coroutines 2 --timeline-interval 0.01
      --lease-period 0.002 --lease-timeout 0.02 --seed 3 --quiet)
rm -f "$out"/failures/kill-*.json
for ((i = 0; i < kills; ++i)); do
  at=$(printf '0.%03d' $((101 + i)))
  echo "failures.sh: kill compute node 1 at ${at} s" >&2
  "$ycsb" "${args[@]}" --kill-compute-node "1@$at" --json "$out/failures/kill-$at.json" \
    >"$out/failures/kill-$at.txt"
done
first=$(printf '0.%03d' 101)
"$root/tools/dmidx-ycsb-plot" -o "$out/failures" "$out/failures/kill-$first.json" >/dev/null
rm -f "$out/failures/workloads.png"

python3 - "$out" "$first" "${args[*]}" <<'PY'
import glob, json, os, sys

out, first, args = sys.argv[1], sys.argv[2], sys.argv[3]
rows = []
for path in sorted(glob.glob(os.path.join(out, "failures", "kill-*.json"))):
    with open(path) as f:
        points = [json.loads(line) for line in f if line.strip()]
    for point in points:
        for phase in point["phases"]:
            if "kill" in phase:
                rows.append((point["index"], phase["kill"]))
lines = [
    "# Compute-node failures: what the survivors see",
    "",
    "Made by `tools/failures.sh`, on the simulated cluster (virtual time: a",
    "run repeats exactly). Three compute nodes (2 threads x 2 coroutines",
    "each) run YCSB workload A (zipfian) on 20,000 keys for 0.3 s;",
    "compute node 1 is killed at the time in the first column, and the",
    "other two run the phase out. Leases: period 2 ms, timeout 20 ms.",
    "",
    "A survivor that finds a lock word the dead node held waits a lease",
    "period, then reads the dead node's lease each period; once it stood",
    "still for the timeout, the survivor declares it dead, fences it,",
    "recovers it and frees the word (docs/design.md, \"Compute-node",
    "failures\"). Recovery time: from the kill until the survivors'",
    "throughput over 50 ms is back to 90% of their mean before the kill,",
    "and stays there (`dmidx-ycsb --kill-compute-node`); 0 when it never",
    "fell that far (the dead node held no lock the survivors wanted).",
    "",
    "| index | kill at (ms) | survivors' ops | survivors failed | lowest window | recovery (ms) |",
    "|---|---:|---:|---:|---:|---:|",
]
def ms(ns):
    return f"{ns / 1e6:.1f}"
for index, kill in rows:
    recovery = kill["recovery"]
    survivors = kill["survivors"]
    lines.append(
        f"| {index} | {ms(kill['killed_at_ns'])} | {survivors['operations']} "
        f"| {sum(survivors['failed'].values())} "
        f"| {100 * recovery['lowest_fraction']:.0f}% "
        f"| {ms(recovery['time_ns']) if recovery['recovered'] else 'not recovered'} |")
lines += [
    "",
    f"The first kill's timeline ([failures/timeline.png](failures/timeline.png)):",
    "",
    "![throughput over time around the kill](failures/timeline.png)",
    "",
    "Command of each run: `dmidx-ycsb " + args + " --kill-compute-node 1@T`.",
    "",
    "Not yet covered: a write-back the dead node left torn (landed in part)",
    "is not repaired until redo records land, so a kill inside a WRITE can",
    "leave that object damaged; none of these runs did.",
    "",
]
with open(os.path.join(out, "failures.md"), "w") as f:
    f.write("\n".join(lines))
PY
echo "failures.sh: wrote $out/failures.md" >&2
