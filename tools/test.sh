#!/usr/bin/env bash
# dmidx's test command: installs the Debian packages it needs, builds, and runs
# the test suite. CI runs exactly this.
#
#   tools/test.sh              every stage below, in order
#   tools/test.sh release tsan only the named stages
#
# Stages:
#   release   Release build (warnings are errors), all tests through CTest
#   consumer  installs the release build to a staging prefix and builds and
#             runs tests/consumer against it with find_package(dmidx); then
#             builds the Debian package (cpack -G DEB), checks its fields and
#             that it holds what the install held, unpacks it into a scratch
#             root (dpkg -x, nothing installed system-wide), and builds and
#             runs tests/consumer against that root twice: with
#             find_package(dmidx), and with a plain g++ command line from
#             `pkg-config --cflags --libs dmidx`
#   layers    checks the release build's dependency records against the
#             layer table (tools/check-layers.sh), then builds the library
#             without verbs (-DDMIDX_WITH_VERBS=OFF: no rdma-core, no
#             libmemcached) and runs the fabric, memory-node and runtime
#             tests there
#   asan      RelWithDebInfo build under AddressSanitizer + UBSan, all tests,
#             then the race suites again with two instances of each at once
#   tsan      RelWithDebInfo build under ThreadSanitizer, the same
#   softroce  the Release build's fabric and verbs tests (conformance suite on
#             the verbs backend, multi-process memcached cluster tests of
#             dmidx-cluster-check and of dmidx-ycsb) inside a Soft-RoCE VM
#             (tools/softroce-vm.sh), for machines without RDMA
#
# Environment: DMIDX_BUILD_ROOT (default: <repo>/build) holds one folder per
# stage; DMIDX_JOBS (default: nproc) sets build and test parallelism.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_root=${DMIDX_BUILD_ROOT:-$root/build}
jobs=${DMIDX_JOBS:-$(nproc)}
all_stages=(release consumer layers asan tsan softroce)

# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=("${all_stages[@]}")
for stage in "${stages[@]}"; do
  case "$stage" in
    release|consumer|layers|asan|tsan|softroce) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "test.sh: unknown stage '$stage' (stages: ${all_stages[*]})" >&2; exit 2 ;;
  esac
done

"$root/tools/install-deps.sh"

# build DIR [cmake args...]: configure and build one tree.
build() {
  local dir=$1; shift
  cmake -S "$root" -B "$dir" -G Ninja -DDMIDX_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" --parallel "$jobs"
}

run_tests() {
  local dir=$1
  ctest --test-dir "$dir" --output-on-failure --parallel "$jobs" --timeout 900
}

# The race suites once more, two instances of each at once (on top of
# nothing else: every instance has at most one core), so that a race that
# shows only on a loaded machine cannot hide behind an idle one. A failing
# instance prints its log and fails the stage.
race_suites=(
  "radix_race_test"
  "radix_regression_test"
  "btree_concurrency_test"
  "hocl_test"
  "rdwc_test"
  "index_suites_test --gtest_filter=*Concurrency*"
)
race_under_load() {
  local dir=$1 logs
  logs=$(mktemp -d)
  for suite in "${race_suites[@]}"; do
    local name=${suite%% *} failed=0 pids=()
    for instance in 1 2; do
      # shellcheck disable=SC2086 # the suite's flags split on purpose
      (set -f; cd "$dir/tests" && timeout 900 ./$suite >"$logs/$name.$instance" 2>&1) &
      pids+=($!)
    done
    for instance in 1 2; do
      if ! wait "${pids[$((instance - 1))]}"; then
        echo "test.sh: $name failed under load (instance $instance of 2):" >&2
        tail -n 60 "$logs/$name.$instance" >&2
        failed=1
      fi
    done
    [ "$failed" = 0 ] || { rm -rf "$logs"; exit 1; }
    echo "race suite under load: $name: 2 of 2 instances passed"
  done
  rm -rf "$logs"
}

fail() {
  echo "test.sh: $*" >&2
  exit 1
}

# consumer_with_cmake PREFIX DIR: builds tests/consumer in DIR against the
# dmidx under PREFIX with find_package(dmidx), and runs it.
consumer_with_cmake() {
  local prefix=$1 dir=$2 found
  rm -rf "$dir"
  cmake -S "$root/tests/consumer" -B "$dir" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
  found=$(sed -n 's/^dmidx_DIR:PATH=//p' "$dir/CMakeCache.txt")
  case "$found" in
    "$prefix"/*) ;;
    *) fail "find_package(dmidx) found '$found', not the package under $prefix" ;;
  esac
  cmake --build "$dir"
  "$dir/dmidx_consumer"
}

# consumer_with_pkg_config PREFIX DIR: builds tests/consumer into DIR with one
# g++ command line whose flags come from PREFIX's dmidx.pc, and runs it (a
# shared libdmidx from the .pc's libdir).
consumer_with_pkg_config() {
  local prefix=$1 dir=$2 pc_dir includedir libdir flags
  pc_dir=$(dirname "$(find "$prefix" -path '*/pkgconfig/dmidx.pc' -print -quit)")
  [ -f "$pc_dir/dmidx.pc" ] || fail "no pkgconfig/dmidx.pc under $prefix"
  export PKG_CONFIG_PATH=$pc_dir
  pkg-config --validate dmidx || fail "pkg-config rejects $pc_dir/dmidx.pc"
  [ "$(pkg-config --variable=pcfiledir dmidx)" = "$pc_dir" ] ||
    fail "pkg-config found a dmidx.pc other than $pc_dir/dmidx.pc"
  includedir=$(pkg-config --variable=includedir dmidx)
  [ -f "$includedir/dmidx/dmidx.h" ] ||
    fail "dmidx.pc's includedir '$includedir' has no dmidx/dmidx.h (not relative to the .pc?)"
  libdir=$(pkg-config --variable=libdir dmidx)
  flags=$(pkg-config --cflags --libs dmidx)
  unset PKG_CONFIG_PATH
  rm -rf "$dir"
  mkdir -p "$dir"
  echo "g++ main.cc $flags"
  # shellcheck disable=SC2086 # the flags split on purpose
  g++ -o "$dir/dmidx_consumer" "$root/tests/consumer/main.cc" $flags
  LD_LIBRARY_PATH=$libdir "$dir/dmidx_consumer"
}

# debian_package BUILD DIR: builds BUILD's Debian package into DIR with cpack,
# prints its fields (on stderr) and checks them, and prints its path.
debian_package() {
  local build=$1 dir=$2 debs deb version
  rm -rf "$dir"
  cpack --config "$build/CPackConfig.cmake" -G DEB -B "$dir" >&2
  debs=("$dir"/*.deb)
  if [ ${#debs[@]} != 1 ] || [ ! -f "${debs[0]}" ]; then
    fail "cpack made not one .deb in $dir: ${debs[*]}"
  fi
  deb=${debs[0]}
  dpkg-deb --info "$deb" >&2
  [ "$(dpkg-deb --field "$deb" Package)" = dmidx ] || fail "$deb is not package dmidx"
  version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
  [ "$(dpkg-deb --field "$deb" Version)" = "$version-1" ] ||
    fail "$deb has version $(dpkg-deb --field "$deb" Version), not project() version $version-1"
  [ -n "$(dpkg-deb --field "$deb" Depends)" ] || fail "$deb declares no Depends"
  echo "$deb"
}

# check_debian_contents DEB ROOT STAGE: DEB (unpacked in ROOT) holds what an
# engine needs, and exactly what `cmake --install` put under STAGE.
check_debian_contents() {
  local deb=$1 root=$2 stage=$3 contents wanted
  contents=$(dpkg-deb --contents "$deb")
  for wanted in '/usr/lib/.*libdmidx\.(a|so)( |$)' '/usr/include/dmidx/dmidx\.h$' \
      '/usr/lib/.*pkgconfig/dmidx\.pc$' '/usr/lib/.*cmake/dmidx/dmidxConfig\.cmake$' \
      '/usr/lib/.*cmake/dmidx/dmidxTargets\.cmake$' '/usr/share/doc/dmidx/LICENSE$' \
      '/usr/bin/dmidx-memnode$' '/usr/bin/dmidx-cluster-check$' '/usr/bin/dmidx-ycsb$' \
      '/usr/bin/dmidx-ycsb-plot$'; do
    grep -Eq "$wanted" <<<"$contents" || fail "$deb holds nothing matching $wanted"
  done
  diff -r "$stage" "$root/usr" >&2 ||
    fail "$deb does not hold what cmake --install installed in $stage"
}

# package_names: the package names of a Depends field on stdin, one a line
# (versions, alternatives and architectures dropped).
package_names() { tr ',|' '\n' | sed 's/(.*)//; s/:.*//; s/ //g' | grep -v '^$'; }

# packages_owning PATTERN: the installed packages with a file matching the
# dpkg -S PATTERN, one a line.
packages_owning() {
  dpkg -S "$1" 2>/dev/null | sed 's/: [^:]*$//; s/, /\n/g' | sed 's/:.*//' | sort -u
}

# needs OWNERS WHAT LIST: fails, saying WHAT is missing from the Depends of
# check_debian_depends's $deb, unless one of the packages OWNERS is in LIST.
needs() {
  local owner
  for owner in $1; do
    if grep -qxF "$owner" <<<"$3"; then return 0; fi
  done
  fail "$2 (from ${1:-no installed package}) is not in $(basename "$deb")'s Depends: $depends"
}

# check_debian_depends DEB ROOT: DEB's Depends (DEB unpacked in ROOT) names
# the package of every shared library its programs and libraries load that it
# does not hold itself (dpkg-shlibdeps ran), of every pkg-config module dmidx.pc requires, and, itself or through its
# own Depends (libboost-context-dev is the metapackage of
# libboost-context1.74-dev), of every library `pkg-config --libs` links.
check_debian_depends() {
  local deb=$1 root=$2 depends named reachable package program needed flag
  depends=$(dpkg-deb --field "$deb" Depends)
  named=$(package_names <<<"$depends")
  reachable=$named
  for package in $named; do
    reachable+=$'\n'$(dpkg-query -W -f='${Depends}' "$package" 2>/dev/null | package_names)
  done
  while IFS= read -r program; do
    file -b "$program" | grep -q '^ELF' || continue
    for needed in $(objdump -p "$program" | awk '$1 == "NEEDED" { print $2 }'); do
      [ -z "$(find "$root" -name "$needed")" ] || continue # the package holds it
      needs "$(packages_owning "*/$needed")" "$(basename "$program") loads $needed" "$named"
    done
  done < <(find "$root" -type f)
  export PKG_CONFIG_PATH
  PKG_CONFIG_PATH=$(dirname "$(find "$root" -path '*/pkgconfig/dmidx.pc' -print -quit)")
  for package in $(pkg-config --print-requires dmidx); do
    needs "$(packages_owning "$(pkg-config --path "$package")")" "dmidx.pc requires $package" \
      "$named"
  done
  for flag in $(pkg-config --libs-only-l dmidx); do
    [ "$flag" = -ldmidx ] && continue
    needs "$(packages_owning "*/lib${flag#-l}.so")" "pkg-config --libs dmidx links $flag" \
      "$reachable"
  done
  unset PKG_CONFIG_PATH
}

for stage in "${stages[@]}"; do
  echo "=== test.sh: stage $stage"
  case "$stage" in
    release)
      build "$build_root/release" -DCMAKE_BUILD_TYPE=Release
      run_tests "$build_root/release"
      ;;
    consumer)
      [ -f "$build_root/release/build.ninja" ] ||
        build "$build_root/release" -DCMAKE_BUILD_TYPE=Release
      cmake --build "$build_root/release" --parallel "$jobs"
      rm -rf "$build_root/stage"
      cmake --install "$build_root/release" --prefix "$build_root/stage" >/dev/null
      consumer_with_cmake "$build_root/stage" "$build_root/consumer"
      deb=$(debian_package "$build_root/release" "$build_root/deb")
      rm -rf "$build_root/deb-root"
      dpkg -x "$deb" "$build_root/deb-root"
      check_debian_contents "$deb" "$build_root/deb-root" "$build_root/stage"
      check_debian_depends "$deb" "$build_root/deb-root"
      libdir=$(dirname "$(find "$build_root/deb-root" -name 'libdmidx.*' -print -quit)")
      for tool in dmidx-memnode dmidx-cluster-check dmidx-ycsb; do
        LD_LIBRARY_PATH=$libdir "$build_root/deb-root/usr/bin/$tool" --help >/dev/null ||
          fail "$tool from the package does not run"
      done
      consumer_with_cmake "$build_root/deb-root/usr" "$build_root/consumer-deb"
      consumer_with_pkg_config "$build_root/deb-root/usr" "$build_root/consumer-pc"
      echo "consumer: $(basename "$deb") builds engines with find_package and with pkg-config"
      ;;
    layers)
      [ -f "$build_root/release/build.ninja" ] ||
        build "$build_root/release" -DCMAKE_BUILD_TYPE=Release
      cmake --build "$build_root/release" --parallel "$jobs"
      "$root/tools/check-layers.sh" "$build_root/release"
      # Without verbs: the library and the tests of the layers the switch
      # changes (fabric, memory node, runtime); the layers above compile the
      # same either way, and the release stage runs their tests.
      cmake -S "$root" -B "$build_root/noverbs" -G Ninja -DDMIDX_WERROR=ON \
        -DCMAKE_BUILD_TYPE=Release -DDMIDX_WITH_VERBS=OFF -DDMIDX_BUILD_BENCHMARKS=OFF >/dev/null
      cmake --build "$build_root/noverbs" --parallel "$jobs" --target dmidx \
        fabric_conformance_test fault_injection_test fabric_allocation_test sim_test \
        memory_node_test remote_allocator_test scheduler_test arena_test runtime_seams_test \
        cluster_test
      ctest --test-dir "$build_root/noverbs" --output-on-failure --parallel "$jobs" --timeout 900 \
        -L 'fabric|memnode|runtime' --no-tests=error
      ;;
    asan)
      build "$build_root/asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDMIDX_SANITIZE=address \
        -DDMIDX_BUILD_BENCHMARKS=OFF
      export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
      run_tests "$build_root/asan"
      race_under_load "$build_root/asan"
      unset ASAN_OPTIONS UBSAN_OPTIONS
      ;;
    tsan)
      build "$build_root/tsan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDMIDX_SANITIZE=thread \
        -DDMIDX_BUILD_BENCHMARKS=OFF
      export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
      run_tests "$build_root/tsan"
      race_under_load "$build_root/tsan"
      unset TSAN_OPTIONS
      ;;
    softroce)
      [ -f "$build_root/release/build.ninja" ] ||
        build "$build_root/release" -DCMAKE_BUILD_TYPE=Release
      cmake --build "$build_root/release" --parallel "$jobs"
      # The VM sees this machine's filesystem at the same paths, so the
      # release tree's binaries run there against real rdma-core verbs.
      # A failing test is tried up to 5 times: Soft-RoCE under emulation
      # occasionally lets an old WRITE land after newer ones around a
      # retransmission (WriteOrderSeenByConcurrentReader/verbs catches it
      # in about 1 of 4 runs; rxe's duplicate_request counter rises with
      # it), which is the emulated NIC, not dmidx. A real ordering bug fails
      # every time and still fails the stage. The local and sim rows of the
      # fabric suites ran in the release stage already.
      DMIDX_BUILD_ROOT=$build_root "$root/tools/softroce-vm.sh" -t 1500 \
        -C "$build_root/release" -- \
        ctest -L 'fabric|verbs' -E '/(local|sim) |^SimTest\.' --output-on-failure --timeout 600 \
        --repeat until-pass:5
      ;;
  esac
done
echo "=== test.sh: all stages passed (${stages[*]})"
