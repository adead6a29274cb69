# Sourced by the shell tools in tools/: what their command lines share.
# shellcheck shell=bash

# Prints the calling script's header comment (from its second line up to
# `set -euo pipefail`) without the comment marks: the script's --help.
usage() { sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

# die MESSAGE...: the message on stderr, after the script's name; exit 2
# (bad usage or a missing prerequisite).
die() {
  echo "$(basename "$0"): $*" >&2
  exit 2
}

# build_ycsb TOOL LOG: builds dmidx-ycsb (Release) in
# $DMIDX_BUILD_ROOT/release (default <repo>/build/release), the build's
# output in LOG, and prints the binary's path; dies naming LOG if it fails.
build_ycsb() {
  local tool=$1 log=$2 repo build
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  build=${DMIDX_BUILD_ROOT:-$repo/build}/release
  echo "$tool: building dmidx-ycsb in $build" >&2
  if ! { cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release &&
      cmake --build "$build" --target dmidx-ycsb; } >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "building dmidx-ycsb failed (the log: $log)"
  fi
  echo "$build/bench/dmidx-ycsb"
}
