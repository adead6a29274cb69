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
for bad in "--scale huge" "--bogus" "--scale"; do
  # shellcheck disable=SC2086
  out=$("$script" $bad --ycsb "$ycsb" --out "$work/bad" 2>&1)
  status=$?
  [ "$status" -eq 2 ] || fail "reproduce.sh $bad exited $status, expected 2: $out"
done
out=$("$script" --scale tiny --ycsb "$work/missing" --out "$work/bad" 2>&1)
[ $? -eq 2 ] || fail "a missing dmidx-ycsb was not refused: $out"

if ! out=$("$script" --scale tiny --ycsb "$ycsb" --out "$work/run" 2>&1); then
  fail "reproduce.sh --scale tiny failed: $out"
fi
report=$work/run/reproduction.md
[ -s "$report" ] || fail "no report at $report"
for heading in "Sherman Table 1" "Sherman Figures 5 and 6" "Sherman Table 3" \
    "Read retries per lookup" "SMART Table 2" "SMART Figure 14" "SMART Figure 18" \
    "as clients grow" "as the cache grows" "Gaps"; do
  grep -q "^## .*$heading" "$report" || fail "the report has no '$heading' section"
done
# The papers' numbers stand beside ours: Table 1's 0.34 Mops, Figure 5's
# 23.6x, Figure 14's 6.1x for YCSB A.
for paper in "0.34" "23.60" "6.10"; do
  grep -q "| $paper |" "$report" || fail "the paper's $paper is not in the report"
done
# Every ladder step and workload row has a throughput.
rows=$(grep -cE '^\| (FG\+|\+combine|\+on-chip|\+hierarchical|\+2-level ver) \| [0-9]+\.[0-9]+ \|' "$report")
[ "$rows" -eq 10 ] || fail "expected 10 Sherman ladder rows with numbers, found $rows"
for figure in sherman-ladder-zipf/ladder.png smart-ycsb-8/workloads.png smart-ladder/ladder.png; do
  [ -s "$work/run/reproduction/$figure" ] || fail "figure $figure missing"
  grep -q "($figure)\|/$figure)" "$report" || fail "the report does not show $figure"
done

if [ "$failures" -gt 0 ]; then
  echo "$failures failed" >&2
  exit 1
fi
echo "reproduce_test: all checks passed"
