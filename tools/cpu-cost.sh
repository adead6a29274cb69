#!/usr/bin/env bash
# Client CPU per index operation, in instructions, counted by callgrind:
# exact and repeatable for one build, seed and toolchain, whatever else the
# machine is doing (wall-clock time on a shared machine is not).
#
#   tools/cpu-cost.sh [--operations N] [--keys N] [--only INDEX] [--out FILE]
#
# Builds dmidx-cpu-cost and dmidx-ycsb (Release) in $DMIDX_BUILD_ROOT/cpu-cost
# (default <repo>/build/cpu-cost), then runs under callgrind, for each
# registered index (dmidx-cpu-cost --list-indexes: the index registry's
# rows) with every technique on and with its baseline: lookup, update,
# insert without a split, delete and a 100-key scan, on a warm, uncontended
# index (one blocking context, 8-byte keys, 1 KiB B+tree nodes, 20k keys).
# It prints instructions per operation: the client's own, and apart from it
# the local fabric's (queuing and applying ops, copying words: what a NIC
# does on a real fabric). Also the bench's own work per operation
# (dmidx-ycsb --index null) and one coroutine switch. docs/cpu-cost.md
# explains the split and the targets.
#
#   --operations N  operations measured per row (default 2000)
#   --keys N        keys loaded (default 20000)
#   --only INDEX    that index's rows only (the bench and switch rows too)
#   --out FILE      also write the table to FILE (Markdown)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DMIDX_BUILD_ROOT:-$root/build}/cpu-cost
operations=2000
keys=20000
only=
out=

# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
while [ $# -gt 0 ]; do
  case "$1" in
    --operations) [ $# -ge 2 ] || die "--operations needs a value"; operations=$2; shift 2 ;;
    --keys) [ $# -ge 2 ] || die "--keys needs a value"; keys=$2; shift 2 ;;
    --only) [ $# -ge 2 ] || die "--only needs a value"; only=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die "--out needs a value"; out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ $operations =~ ^[0-9]+$ && $operations -ge 2 ]] || die "--operations must be an integer >= 2"
[[ $keys =~ ^[0-9]+$ && $keys -ge 1000 ]] || die "--keys must be an integer >= 1000"
for tool in valgrind callgrind_annotate cmake ninja; do
  command -v "$tool" >/dev/null ||
    die "$tool not found (Debian: apt-get install valgrind cmake ninja-build; or run tools/install-deps.sh)"
done

echo "building dmidx-cpu-cost and dmidx-ycsb (Release) in $build" >&2
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDMIDX_BUILD_TESTS=OFF \
  -DDMIDX_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" --target dmidx-cpu-cost dmidx-ycsb >/dev/null
cost_tool=$build/dmidx-cpu-cost
ycsb=$build/bench/dmidx-ycsb
mapfile -t indexes < <("$cost_tool" --list-indexes)
[ ${#indexes[@]} -gt 0 ] || die "dmidx-cpu-cost --list-indexes listed no index"
if [ -n "$only" ]; then
  [[ " ${indexes[*]} " == *" $only "* ]] || die "--only takes one of ${indexes[*]}, not '$only'"
  indexes=("$only")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# measure NAME COUNT TOGGLE -- COMMAND...: runs COMMAND under callgrind,
# collecting only inside functions matching TOGGLE; sets `total` (all
# instructions collected) and `fabric` (those inside the local fabric's
# LocalConnection::Enqueue and ::Apply), both divided by COUNT.
measure() {
  local name=$1 count=$2 toggle=$3
  shift 4
  local file=$work/$name.callgrind
  if ! valgrind --tool=callgrind --collect-atstart=no --toggle-collect="$toggle" \
      --callgrind-out-file="$file" "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "cpu-cost.sh: $name failed:" >&2
    tail -n 20 "$work/$name.out" "$work/$name.err" >&2
    exit 1
  fi
  callgrind_annotate --inclusive=yes --threshold=100 "$file" >"$work/$name.annotate"
  read -r total fabric < <(awk -v count="$count" '
    function number(s) { gsub(",", "", s); return s + 0 }
    /PROGRAM TOTALS/ { total = number($1) }
    # Each function once: Enqueue<...>( and Apply( (and its clones), not
    # helpers called inside them (ApplyLocked, were it out of line) nor
    # .cold parts, whose cost the function that jumps there already holds.
    /LocalConnection::(Enqueue<.*>|Apply)\(/ && !/clone \.cold/ { fabric += number($1) }
    END { printf "%.0f %.0f\n", total / count, fabric / count }' "$work/$name.annotate")
  if [ "$total" -eq 0 ]; then
    echo "cpu-cost.sh: $name: callgrind collected nothing (was '$toggle' inlined?)" >&2
    exit 1
  fi
}

rows=()
add_row() { rows+=("$(printf '| %-7s | %-8s | %-17s | %8s | %8s | %11s |' "$@")"); }

for index in "${indexes[@]}"; do
  for techniques in all baseline; do
    for op in lookup update insert delete scan; do
      name=$index-$techniques-$op
      echo "measuring $index ($techniques) $op" >&2
      measure "$name" "$operations" '*MeasuredOperations*' -- "$cost_tool" --index="$index" \
        --techniques="$techniques" --op="$op" --operations="$operations" --keys="$keys"
      if [ "$fabric" -eq 0 ]; then
        echo "cpu-cost.sh: $name: no instructions in the local fabric's" \
          "LocalConnection::Enqueue/Apply (inlined?), so the split would be wrong" >&2
        exit 1
      fi
      label=$op
      [ "$op" = scan ] && label="scan 100"
      [ "$op" = insert ] && label="insert (no split)"
      round_trips=$(sed -n 's/.*per operation: \([0-9.]*\) round trips.*/\1/p' "$work/$name.out")
      add_row "$index" "$techniques" "$label" "$((total - fabric))" "$fabric" "$round_trips"
    done
  done
done

# The bench's own work per operation: dmidx-ycsb's run loop on the null
# index (which does nothing), one thread and one coroutine.
echo "measuring the bench's per-operation work" >&2
measure bench "$operations" '*PointRun::RunContext*' -- "$ycsb" --index null --workload c \
  --records 1000 --operations "$operations" --threads 1 --coroutines 1 --quiet
add_row bench - "per op (null)" "$((total - fabric))" 0 -
echo "measuring a coroutine switch" >&2
measure switch "$operations" '*MeasuredSwitches*' -- "$cost_tool" --op=switch \
  --operations="$operations"
add_row runtime - "coro switch" "$((total - fabric))" 0 -

{
  echo "dmidx $(git -C "$root" describe --always --dirty 2>/dev/null || echo '(no git)')," \
    "$(head -n 1 < <(c++ --version)), $(valgrind --version), $operations operations per row," \
    "$keys keys"
  echo
  echo "| index   | options  | operation         |   client |   fabric | round trips |"
  echo "|---------|----------|-------------------|---------:|---------:|------------:|"
  printf '%s\n' "${rows[@]}"
} | tee "${out:-/dev/null}"
