#!/usr/bin/env bash
# Reproduces the Sherman and SMART papers' experiments on the simulated
# cluster (dmidx-ycsb --fabric sim with the papers' cluster shapes) and
# writes the report that sets each result beside the paper's:
# docs/reproduction.md, its figures in docs/reproduction/.
#
#   tools/reproduce.sh [--scale tiny|small|full] [--seeds N] [--jobs J]
#                      [--out DIR] [--ycsb PATH] [--baseline DIR]
#
#   --scale   how many records and operations each point runs (the cluster
#             shapes, and the client counts each paper's figure used, stay):
#               tiny   5k records, 20k operations: seconds in all (CI's smoke run)
#               small  200k records, 400k operations (default; about 25 minutes)
#               full   2M records, 4M operations (the better part of an hour)
#   --seeds   run the points one seed cannot settle with seeds 1 to N (default
#             1): Sherman's two ladders, SMART's Figure 14 (with 32-byte keys
#             without YCSB E, whose radix scans take minutes a seed) and
#             SMART's ladder. With SMART's 512 clients one seed moves a point
#             by 1-1.5%; the report adds their means and spread over the
#             seeds (its other tables stay seed 1's). 8 seeds add about
#             20 minutes of CPU at the small scale.
#   --jobs    how many dmidx-ycsb run at once (default: the cores, nproc). The
#             simulated cluster runs in virtual time, so its results do not
#             depend on what else runs.
#   --baseline DIR
#             the --out folder of an earlier run with --seeds (another
#             build's, say): the report's seeds section puts its means beside
#             these and the change in percent
#   --out     where the JSON results, the report and its figures go. Default:
#             docs/ (the report as docs/reproduction.md) for small and full;
#             a temporary folder, printed at the end, for tiny and for the
#             variants below.
#   --ycsb    a built dmidx-ycsb to use instead of building one (Release, in
#             $DMIDX_BUILD_ROOT/release, as tools/bench.sh does)
#   --report-only
#             write the report again from the results already in DIR, without
#             running anything (after a change to the report)
#   --old-skew
#             draw every zipfian key with dmidx.zipfian=exact, the zipfian
#             dmidx-ycsb drew before it drew YCSB's own (SMART's traces came
#             from YCSB; Sherman's mixes use exact either way); latest,
#             uniform and hotspot stay YCSB's
#   --uncalibrated
#             run on the simulated fabric's model as it was before its
#             calibration (--sim model=uncalibrated; docs/sim.md)
#
# Besides the papers' experiments, SMART's Figure 14 with 8-byte keys runs
# twice more, once with each of the two changes above, so that the report
# shows how much the generator alone, and the calibration alone, move each
# ratio.
#
# Each experiment's points go to DIR/reproduction/<experiment>.json (one
# JSON object per point, dmidx-ycsb --json); tools/dmidx-reproduce-report
# turns them into the report, and tools/dmidx-ycsb-plot into the figures.
# The numbers are the model's (docs/sim.md), not a measured cluster's.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
scale=small
out=
ycsb=
report_only=
old_skew=
uncalibrated=
seeds=1
jobs=$(nproc 2>/dev/null || echo 1)
baseline=

# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --scale) [ $# -ge 2 ] || die "--scale needs a value"; scale=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    --ycsb) [ $# -ge 2 ] || die "--ycsb needs a value"; ycsb=$2; shift 2 ;;
    --seeds) [ $# -ge 2 ] || die "--seeds needs a value"; seeds=$2; shift 2 ;;
    --jobs) [ $# -ge 2 ] || die "--jobs needs a value"; jobs=$2; shift 2 ;;
    --baseline) [ $# -ge 2 ] || die "--baseline needs a value"; baseline=$2; shift 2 ;;
    --report-only) report_only=1; shift ;;
    --old-skew) old_skew=1; shift ;;
    --uncalibrated) uncalibrated=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
case "$scale" in
  tiny) records=5000; operations=20000 ;;
  small) records=200000; operations=400000 ;;
  full) records=2000000; operations=4000000 ;;
  *) die "--scale takes tiny, small or full, not '$scale'" ;;
esac
[[ "$seeds" =~ ^[1-9][0-9]*$ ]] || die "--seeds takes a count of seeds (1 or more), not '$seeds'"
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || die "--jobs takes a count (1 or more), not '$jobs'"
report_args=()
if [ -n "$baseline" ]; then
  [ -d "$baseline/reproduction" ] ||
    die "--baseline: $baseline/reproduction is not a folder (give the --out of an earlier run)"
  report_args+=(--baseline "$baseline/reproduction")
fi
if [ -z "$out" ]; then
  # A variant's report never replaces the one in docs/.
  if [ "$scale" = tiny ] || [ -n "$old_skew$uncalibrated" ]; then
    out=$(mktemp -d)
  else
    out=$root/docs
  fi
fi
mkdir -p "$out/reproduction" || die "cannot make $out/reproduction"
[ -x /usr/bin/python3 ] || die "/usr/bin/python3 not found (Debian: apt-get install python3 python3-matplotlib)"

if [ -n "$report_only" ]; then
  [ -s "$out/reproduction/sherman-ladder-zipf.json" ] ||
    die "--report-only: no results in $out/reproduction (run without it first)"
  "$root/tools/dmidx-reproduce-report" --scale "$scale" --results "$out/reproduction" \
    --figures "$out/reproduction" --out "$out/reproduction.md" ${report_args[@]+"${report_args[@]}"}
  echo "reproduce.sh: wrote $out/reproduction.md" >&2
  exit 0
fi
[ -n "$ycsb" ] || ycsb=$(build_ycsb reproduce.sh "$out/reproduction/build.log")
[ -x "$ycsb" ] || die "$ycsb is not an executable dmidx-ycsb"

results=$out/reproduction
# What every experiment runs on: the generator and the model (see --help).
variant=()
[ -z "$old_skew" ] || variant+=(-p dmidx.zipfian=exact)
[ -z "$uncalibrated" ] || variant+=(--sim model=uncalibrated)
# run NAME ARGS...: one experiment, its points into $results/NAME.json, in
# the background once $jobs others run (finish waits for them all).
pids=()
names=()
run() {
  local name=$1
  shift
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true # its status is taken by finish
  done
  echo "reproduce.sh: $name" >&2
  rm -f "$results/$name.json"
  (
    if ! "$ycsb" --records "$records" --operations "$operations" --quiet \
        --json "$results/$name.json" "$@" ${variant[@]+"${variant[@]}"} >"$results/$name.txt" 2>&1; then
      echo "reproduce.sh: $name failed: dmidx-ycsb $*" >&2
      tail -n 20 "$results/$name.txt" >&2
      exit 1
    fi
  ) &
  pids+=($!)
  names+=("$name")
}
# seeded NAME ARGS...: seeds 2 to --seeds of an experiment whose seed 1 is
# NAME.json, into NAME.seed-K.json.
seeded() {
  local name=$1 seed
  shift
  rm -f "$results/$name".seed-*.json "$results/$name".seed-*.txt
  for ((seed = 2; seed <= seeds; ++seed)); do
    run "$name.seed-$seed" "$@" --seed "$seed"
  done
}
finish() {
  local i failed=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "reproduce.sh: ${names[$i]} failed" >&2; failed=1; }
  done
  [ "$failed" = 0 ] || exit 1
}

# SMART Figure 14 with 32-byte keys goes first: its radix YCSB E (100-key
# scans over 32-byte keys) takes the longest of any point, minutes.
fig14=(--preset smart --index radix,btree)
run smart-ycsb-32 "${fig14[@]}" --workload load,a,b,c,d,e --key-bytes 32
# Sherman Table 1 and Figure 5: the technique ladder, write-intensive,
# skewed (zipf 0.99) and uniform, with Sherman's 176 client threads (one
# coroutine each: the paper adds coroutines only in its scaling test).
sherman_ladder=(--preset sherman --coroutines 1 --ladder --workload write-intensive)
run sherman-ladder-zipf "${sherman_ladder[@]}"
seeded sherman-ladder-zipf "${sherman_ladder[@]}"
run sherman-ladder-uniform "${sherman_ladder[@]}" -p requestdistribution=uniform
seeded sherman-ladder-uniform "${sherman_ladder[@]}" -p requestdistribution=uniform
# The paper's FG retries its lock CAS blindly; our FG+ backs off (1 to 64
# us). FG+ with no backoff, skewed and uniform, shows what that costs.
fg_plus=(--btree.combine_commands=false --btree.on_chip_locks=false
  --btree.local_lock_table=false --btree.entry_level_write_back=false)
run sherman-fg-blind-zipf --preset sherman --coroutines 1 --workload write-intensive \
  "${fg_plus[@]}" --retry-backoff-min 0
run sherman-fg-blind-uniform --preset sherman --coroutines 1 --workload write-intensive \
  "${fg_plus[@]}" --retry-backoff-min 0 -p requestdistribution=uniform
# Sherman's range queries: FG+ and Sherman on range-only and range-write.
run sherman-range --preset sherman --coroutines 1 --ladder --workload range-only,range-write
# SMART Figure 14 (and Table 2's amplification, from the same points):
# YCSB load and A-E, the radix tree and the B+tree, 8-byte keys (32-byte
# keys above).
run smart-ycsb-8 "${fig14[@]}" --workload load,a,b,c,d,e
seeded smart-ycsb-8 "${fig14[@]}" --workload load,a,b,c,d,e
seeded smart-ycsb-32 "${fig14[@]}" --workload load,a,b,c,d --key-bytes 32
# The same as smart-ycsb-8 with the generator before issue 24 (a zipfian
# over the keys, twice as hot at the top as YCSB's at these record counts),
# and on the model before its calibration: what each alone moves.
run smart-ycsb-8-old-skew --preset smart --index radix,btree --workload load,a,b,c,d,e \
  -p dmidx.zipfian=exact
run smart-ycsb-8-uncalibrated --preset smart --index radix,btree --workload load,a,b,c,d,e \
  --sim model=uncalibrated
# SMART Figure 18: the radix tree's technique ladder, YCSB A, B and C, with
# the figure's 24 clients a compute node.
smart_ladder=(--preset smart --threads 3 --coroutines 8 --ladder --workload a,b,c)
run smart-ladder "${smart_ladder[@]}"
seeded smart-ladder "${smart_ladder[@]}"
# Throughput as clients grow; and as the cache grows (32-byte keys, as
# SMART's Figure 20; sizes around what the internal nodes take at these
# record counts).
run clients --preset smart --index radix,btree --workload c --threads 1,2,4 --coroutines 1,8
run cache --preset smart --index radix,btree --workload c --key-bytes 32 \
  --cache-bytes 16K,64K,256K,1M,4M

finish

report=$out/reproduction.md
"$root/tools/dmidx-reproduce-report" --scale "$scale" --results "$results" \
  --figures "$results" --out "$report" ${report_args[@]+"${report_args[@]}"}
echo "reproduce.sh: wrote $report" >&2
