#!/usr/bin/env bash
# tools/reproduce.sh at its tiny scale (seconds), so the reproduction cannot
# rot: it runs every experiment on the simulated cluster, the report has
# every section with numbers in it and the paper's beside them, the figures
# exist, and bad flags are refused.
#
#   reproduce_test.sh DMIDX_YCSB
set -uo pipefail

ycsb=$1
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
script=$root/tools/reproduce.sh
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$script" --help | grep -q -- "--scale" || fail "--help does not describe --scale"
for bad in "--scale huge" "--bogus"; do
  # shellcheck disable=SC2086
  out=$("$script" $bad --ycsb "$ycsb" --out "$work/bad" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "reproduce.sh $bad exited $status, expected 2: $out"
done
out=$("$script" --ycsb "$ycsb" --scale 2>&1)
[ $? -eq 2 ] && grep -q "needs a value" <<<"$out" || fail "a bare --scale was not refused: $out"
out=$("$script" --scale tiny --ycsb "$work/missing" --out "$work/bad" 2>&1)
[ $? -eq 2 ] || fail "a missing dmidx-ycsb was not refused: $out"

if ! out=$("$script" --scale tiny --ycsb "$ycsb" --out "$work/run" 2>&1); then
  fail "reproduce.sh --scale tiny failed: $out"
fi
report=$work/run/reproduction.md
[ -s "$report" ] || fail "no report at $report"
for heading in "Sherman Table 1" "Sherman Figures 5 and 6" "Sherman Table 3" \
    "Read retries per lookup" "SMART Table 2" "SMART Figure 14" "SMART Figure 18" \
    "as clients grow" "as the cache grows" "What the generator and the calibration move" "Gaps"; do
  grep -q "^## .*$heading" "$report" || fail "the report has no '$heading' section"
done
# Every experiment has its points: 5 ladder steps; one FG+ point without
# backoff; 5 steps x 2 workloads; 6 workloads x 2 indexes; 5 steps x 3
# workloads; 6 client counts x 2 indexes; 5 cache sizes x 2 indexes.
for expected in sherman-ladder-zipf:5 sherman-ladder-uniform:5 sherman-fg-blind-zipf:1 \
    sherman-fg-blind-uniform:1 sherman-range:10 \
    smart-ycsb-8:12 smart-ycsb-32:12 smart-ycsb-8-old-skew:12 smart-ycsb-8-uncalibrated:12 \
    smart-ladder:15 clients:12 cache:10; do
  file=$work/run/reproduction/${expected%%:*}.json
  points=$(grep -c . "$file" 2>/dev/null)
  [ "${points:-0}" -eq "${expected##*:}" ] ||
    fail "$file has ${points:-no} points, expected ${expected##*:}"
done
# The results answer what the sections ask: the skewed FG+ baseline is the
# slowest step; the radix tree beats the B+tree on YCSB C (SMART's
# Figure 14); a bigger cache does not lower the hit ratio (beyond a point
# of noise: which nodes a lookup caches varies a little with the size).
/usr/bin/python3 - "$work/run/reproduction" <<'PY' || fail "the results do not hang together"
import json, os, sys
def points(name):
    return [json.loads(l) for l in open(os.path.join(sys.argv[1], name + ".json")) if l.strip()]
def mops(p):
    return [ph for ph in p["phases"] if ph["phase"] == "run"][0]["mops"]
ladder = points("sherman-ladder-zipf")
assert min(ladder, key=mops) is ladder[0], "FG+ is not the slowest step under skew"
c = {p["index"]: mops(p) for p in points("smart-ycsb-8") if p["workload"]["name"] == "c"}
assert c["radix"] > c["btree"], f"YCSB C: radix {c['radix']} <= btree {c['btree']}"
for index in ("radix", "btree"):
    hit = []
    for p in points("cache"):
        if p["index"] != index:
            continue
        run = [ph for ph in p["phases"] if ph["phase"] == "run"][0]["index"]["lookup"]
        hit.append(run["cache_hits"] / max(1, run["cache_hits"] + run["cache_misses"]))
    assert all(b >= a - 0.01 for a, b in zip(hit, hit[1:])) and hit[-1] >= hit[0], \
        f"{index}: hit ratios {hit} fall as the cache grows"
PY
# Every ladder step and workload row has a throughput.
rows=$(grep -cE '^\| (FG\+|\+combine|\+on-chip|\+hierarchical|\+2-level ver) \| [0-9]+\.[0-9]+ \|' "$report")
[ "$rows" -eq 10 ] || fail "expected 10 Sherman ladder rows with numbers, found $rows"
for figure in sherman-ladder-zipf/ladder.png smart-ycsb-8/workloads.png smart-ladder/ladder.png; do
  [ -s "$work/run/reproduction/$figure" ] || fail "figure $figure missing"
  grep -q "($figure)\|/$figure)" "$report" || fail "the report does not show $figure"
done

# --report-only writes the same report again from the results alone.
cp "$report" "$work/first.md"
out=$("$script" --scale tiny --report-only --out "$work/run" 2>&1) ||
  fail "reproduce.sh --report-only failed: $out"
cmp -s "$report" "$work/first.md" || fail "--report-only wrote a different report"
out=$("$script" --report-only --out "$work/empty" 2>&1)
[ $? -eq 2 ] || fail "--report-only without results was not refused: $out"

if [ "$failures" -gt 0 ]; then
  echo "$failures failed" >&2
  exit 1
fi
echo "reproduce_test: all checks passed"
