#!/usr/bin/env bash
# Issue 27's churn experiment at bench size: each index runs inserts,
# updates and deletes over a fixed key set (dmidx-ycsb --workload churn)
# until it has written --multiple times its memory node's pool, then
# quiesces (every retired object reclaimed) and reports the pool's bytes
# in use, the live keys and the bytes per live key, against what a key
# cost after the load. Writes docs/churn.md and each run's text and JSON
# in docs/churn/.
#
#   tools/churn.sh [--out DIR] [--ycsb PATH] [--records N] [--btree-pool SIZE]
#                  [--radix-pool SIZE] [--multiple N] [--only INDEX]
#
#   --out         where the results and the report go (default: docs/)
#   --ycsb        a built dmidx-ycsb (default: built, Release, in
#                 $DMIDX_BUILD_ROOT/release)
#   --records     the fixed key set (default 100000)
#   --btree-pool  the B+tree's memory node's pool (default 64M)
#   --radix-pool  the radix tree's (default 256M: the bench's pool check
#                 sizes a radix tree generously, 251M for 100,000 keys)
#   --multiple    pools' worth of bytes each index writes (default 10)
#   --only        run this index again and keep the other's last results
#   --report-only run nothing: write docs/churn.md from the last results
#
# What follows the marker "Written by hand from here on" in the report is
# kept as it is.
#
# The local fabric, one memory node with 256 KiB chunks, one compute node
# of 2 threads x 4 coroutines, 5 ms leases, draining on (the report
# says why both).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$root/docs
ycsb=
records=100000
btree_pool=64M
radix_pool=256M
multiple=10
indexes=(btree radix)
# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    --ycsb) [ $# -ge 2 ] || die "--ycsb needs a value"; ycsb=$2; shift 2 ;;
    --records) [ $# -ge 2 ] || die "--records needs a value"; records=$2; shift 2 ;;
    --btree-pool) [ $# -ge 2 ] || die "--btree-pool needs a value"; btree_pool=$2; shift 2 ;;
    --radix-pool) [ $# -ge 2 ] || die "--radix-pool needs a value"; radix_pool=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || die "--only needs a value"; indexes=("$2"); shift 2 ;;
    --report-only) indexes=(); shift ;;
    --multiple) [ $# -ge 2 ] || die "--multiple needs a value"; multiple=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
mkdir -p "$out/churn"
if [ ${#indexes[@]} -gt 0 ]; then
  [ -n "$ycsb" ] || ycsb=$(build_ycsb churn.sh "$out/churn/build.log")
  [ -x "$ycsb" ] || die "no dmidx-ycsb at $ycsb"
fi

args=(--fabric local --workload churn --records "$records" --write-bytes-multiple "$multiple"
      --memory-nodes 1 --chunk-bytes 256K --compute-nodes 1 --threads 2 --coroutines 4
      --seed 27 --lease-period 0.005 --max-draining-chunks 16)
# The fresh load: the same cluster, one operation after the load.
fresh_args=(--fabric local --workload churn --operations 1 --memory-nodes 1 --chunk-bytes 256K
            --compute-nodes 1 --threads 2 --coroutines 4 --seed 27)
for index in ${indexes[@]+"${indexes[@]}"}; do
  case "$index" in
    btree) pool=$btree_pool ;;
    radix) pool=$radix_pool ;;
    *) die "--only: btree or radix, not '$index'" ;;
  esac
  echo "churn.sh: $index" >&2
  rm -f "$out/churn/$index.json"
  "$ycsb" "${args[@]}" --index "$index" --pool-bytes "$pool" --json "$out/churn/$index.json" \
    >"$out/churn/$index.txt"
  # A fresh index of as many keys as the churn left live, loaded the same
  # way: what those keys cost an index that never churned.
  live=$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["memory"]["live_keys"])' \
    "$out/churn/$index.json")
  echo "churn.sh: $index, fresh with $live keys" >&2
  rm -f "$out/churn/$index-fresh.json"
  "$ycsb" "${fresh_args[@]}" --records "$live" --index "$index" --pool-bytes "$pool" \
    --json "$out/churn/$index-fresh.json" >"$out/churn/$index-fresh.txt"
done

python3 - "$out" "${args[*]}" "${fresh_args[*]}" <<'PY'
import json, os, sys

out, args, fresh_args = sys.argv[1], sys.argv[2], sys.argv[3]
def mib(n):
    return f"{n / (1 << 20):.1f}"
rows = []
for index in ("btree", "radix"):
    with open(os.path.join(out, "churn", index + ".json")) as f:
        point = json.loads(f.readline())
    run = next(p for p in point["phases"] if p["phase"] == "run")
    memory = point["memory"]
    r = memory["reclamation"]
    per_loaded = memory["bytes_in_use_after_load"] / memory["loaded_keys"]
    budget = memory["live_keys"] * per_loaded
    with open(os.path.join(out, "churn", index + "-fresh.json")) as f:
        fresh = json.loads(f.readline())["memory"]
    rows.append(
        f"| {index} | {mib(memory['pool_bytes'])} | {memory['loaded_keys']} "
        f"| {run['fabric']['bytes_written'] / memory['pool_bytes']:.1f} | {run['operations']} "
        f"| {mib(r['retired_bytes'])} | {mib(r['reclaimed_bytes'])} "
        f"| {r['shared_objects_pushed']} / {r['shared_objects_popped']} / {r['shared_objects_lost']} "
        f"| {r['epoch_advances']} / {r['held_back']} "
        f"| {mib(memory['bytes_in_use_after_load'])} | {per_loaded:.1f} "
        f"| {memory['live_keys']} | {mib(memory['bytes_in_use'])} "
        f"| {memory['bytes_per_live_key']:.1f} "
        f"| {memory['bytes_in_use'] / memory['bytes_in_use_after_load']:.2f} "
        f"| {memory['bytes_in_use'] / budget:.2f} "
        f"| {mib(fresh['bytes_in_use_after_load'])} "
        f"| {memory['bytes_in_use'] / fresh['bytes_in_use_after_load']:.2f} "
        f"| {'yes' if memory['quiesced'] else 'no'} |")
lines = [
    "# Churn: remote memory reused across an index's life",
    "",
    "Made by `tools/churn.sh` (issue 27's churn experiment at bench size;",
    "`tests/index_churn_suite.cc` runs it at CI size). Each index is bulk-loaded",
    "with a fixed key set, then runs inserts (every one an upsert of a key of",
    "the set), updates and deletes, a third each, uniform over the set, until",
    "it has written ten times its memory node's pool (`bytes_written`); then",
    "the bench quiesces: every object the index retired is handed to the",
    "lease keeper and reclaimed before the memory report. On the `local`",
    "fabric, one memory node, one compute node (2 threads x 4 coroutines),",
    "256 KiB chunks, 5 ms leases, draining on (below).",
    "",
    "| index | pool (MiB) | keys | written (pools) | ops | retired (MiB) | reclaimed (MiB) "
    "| shared lists pushed / popped / lost (objects) | epoch advances / held back "
    "| in use after load (MiB) | B per loaded key | live keys at the end | in use at the end (MiB) "
    "| B per live key | end / after load | end / (live keys x B per loaded key) "
    "| fresh index of the live keys (MiB) | end / fresh | quiesced |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
] + rows + [
    "",
    "The pool is what the memory node counts: chunks handed out and not",
    "returned, whole (`Cluster::MemoryUsage`). \"retired\" above the pool's",
    "size means the churn would have exhausted the pool without reuse.",
    "",
    "Issue 27's bar: pool usage at the end within 2x of the live keys times",
    "what a key costs. What a key costs depends on how many keys an index",
    "holds (the radix tree's inner nodes, 2 KiB each whatever their type, are",
    "one per 2-byte prefix with two keys or more, so 100,000 random keys need",
    "more than twice the nodes of 50,000), so the column to read is \"end /",
    "fresh\": the pool at the end over what a fresh index of as many keys as",
    "the churn left live uses after the same bulk load (`tools/churn.sh` runs",
    "it). \"end / after load\" is the reuse: the pool's usage hardly moves",
    "after the load although the radix tree retired several pools' worth.",
    "",
    "The churn leaves about half the keys (deletes and upserts at equal rates",
    "over a uniform choice settle at half the set). A chunk goes back to the",
    "memory node only once every object carved from it is free",
    "(docs/design.md, \"Chunks back to the memory node\"), and a churn that",
    "reuses free objects wherever they lie leaves live ones in every chunk:",
    "without draining, the radix tree, which freed the nodes of the prefixes",
    "that lost their second key, ends with the pool its full size had (see",
    "\"Without draining\" below). These runs drain (`--max-draining-chunks",
    "16`, docs/design.md, \"Draining chunks\"): each lease period the lease",
    "keeper marks chunks its scan of the free lists found mostly free, keeps",
    "their free objects from reuse, and gives them back once their last",
    "objects are freed. Their leases are 5 ms (`--lease-period 0.005`): an",
    "object waits three to six lease periods between its retirement and its",
    "reuse, carried by new chunks meanwhile, and draining moves once a lease",
    "period, so the end depends on the operations a lease period: at some",
    "0.5 M operations a second (a quiet machine) the radix tree ends at about",
    "2.05x with 10 ms leases and up to 4x with 100 ms (\"Lease periods\"",
    "below).",
    "",
    "- The B+tree merges a leaf only below `merge_below_percent` (25) full:",
    "  half-emptied leaves stay, as in any B+tree; it retires only the nodes",
    "  merges unlink.",
    "- A chunk counts whole from the moment a worker takes it: each worker",
    "  thread of the run took a chunk of its own (2 x 256 KiB here).",
    "",
    "`tests/index_churn_suite.cc` holds both indexes within 2 of a fresh",
    "index at CI size, without draining, where the keys are dense (0 to",
    "19,999: the radix tree needs the same nodes whichever half of them is",
    "live).",
    "",
    "Command of each run (POOL from the table: the bench's pool check sizes a radix",
    "tree generously), its output in [churn/](churn/), then the fresh index's",
    "(LIVE: the live keys at the end):",
    "",
    "    dmidx-ycsb " + args + " --index INDEX --pool-bytes POOL --json churn/INDEX.json",
    "    dmidx-ycsb " + fresh_args + " --records LIVE --index INDEX --pool-bytes POOL --json churn/INDEX-fresh.json",
    "",
]
# What follows the marker in the report was written by hand (runs of
# other settings, history): kept as it is.
marker = "<!-- Written by hand from here on: tools/churn.sh keeps it. -->"
kept = ""
path = os.path.join(out, "churn.md")
if os.path.exists(path):
    old = open(path).read()
    if marker in old:
        kept = old[old.index(marker):]
with open(path, "w") as f:
    f.write("\n".join(lines))
    if kept:
        f.write("\n" + kept)
PY
echo "churn.sh: wrote $out/churn.md" >&2
