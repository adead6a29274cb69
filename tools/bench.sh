#!/usr/bin/env bash
# The README's bench command: installs the Debian packages dmidx needs (as
# root; tools/install-deps.sh), builds dmidx-ycsb (Release, in
# build/release), and runs it with the arguments given. With none it runs
# every registered index through YCSB's core workloads on an in-process
# cluster and prints the results.
#
#   tools/bench.sh                                # the default run
#   tools/bench.sh --workload sherman --ladder    # any dmidx-ycsb flags
#   tools/bench.sh --help
#
# Environment: DMIDX_BUILD_ROOT (default <repo>/build), DMIDX_JOBS (default
# nproc) as in tools/test.sh.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${DMIDX_BUILD_ROOT:-$root/build}/release
jobs=${DMIDX_JOBS:-$(nproc)}

"$root/tools/install-deps.sh" >&2
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "bench.sh: building dmidx-ycsb in $build" >&2
cmake --build "$build" --parallel "$jobs" --target dmidx-ycsb >/dev/null
exec "$build/bench/dmidx-ycsb" "$@"
