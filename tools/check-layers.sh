#!/usr/bin/env bash
# Checks docs/design.md's layer table against what the compiler actually read:
# for every object of a layer's target in a Ninja build folder, the headers
# it depended on (`ninja -t deps`) must not include what that layer must not
# know about. Run after a build; exits 1 naming each offending object and
# header, 2 on bad use.
#
#   tools/check-layers.sh BUILD_DIR
set -euo pipefail

[ $# -eq 1 ] || { echo "usage: tools/check-layers.sh BUILD_DIR (a built Ninja tree)" >&2; exit 2; }
build=$1
[ -f "$build/build.ninja" ] || { echo "check-layers: $build is not a Ninja build folder" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# Verbs, memcached and the runtime's insides: what index, lock and cache
# code must never reach, directly or through a header.
backend='infiniband/|rdma/|libmemcached|/lib/bootstrap/|/lib/fabric/verbs/|/lib/memnode/verbs|/lib/fabric/local_fabric\.h|/lib/runtime/(client|cluster_backend)\.h'
above_runtime="$root/(btree|radix|lock|cache)/"

# target  forbidden-header-pattern. A rule whose target has no objects in
# the build fails the check, except the layers listed in `not_yet` (they
# arrive with later issues) and the verbs targets of a build without verbs.
# A target's objects are found in any folder of the build
# ("bench/CMakeFiles/dmidx_bench.dir/...").
rules=(
  "dmidx_common   $root/(lib/(fabric|memnode|runtime|bootstrap)|btree|radix|lock|cache)/"
  "dmidx_fabric   $root/(lib/(memnode|runtime|bootstrap)|btree|radix|lock|cache)/|libmemcached"
  "dmidx_memnode  $root/(lib/(runtime|bootstrap)|btree|radix|lock|cache)/|infiniband/|libmemcached"
  "dmidx_runtime  $above_runtime"
  "dmidx_lock     $backend|$root/(btree|radix|cache)/"
  "dmidx_cache    $backend|$root/(btree|radix|lock)/"
  "dmidx_index    $backend|$root/(btree|radix|cache)/"
  "dmidx_btree    $backend|$root/radix/"
  "dmidx_radix    $backend|$root/btree/"
  "dmidx_registry $backend|$root/(bench|tools|testing|tests)/"
  "dmidx_fabric_verbs  $root/(lib/(memnode|runtime|bootstrap)|btree|radix|lock|cache|index)/|libmemcached"
  "dmidx_memnode_verbs $root/(lib/(runtime|bootstrap)|btree|radix|lock|cache|index)/|libmemcached"
  "dmidx_bootstrap     $root/(lib/(memnode|runtime)|btree|radix|lock|cache|index)/"
  # The bench reaches the cluster only through the public API
  # (dmidx/cluster.h) and the indexes through the registry: no runtime,
  # fabric or memory-node header, no index's insides, and no tool's.
  "dmidx_bench    $root/(lib/(runtime|fabric|memnode|bootstrap)|btree|radix|lock|cache|index|tools)/"
  "dmidx-ycsb     $root/(lib/(runtime|fabric|memnode|bootstrap)|btree|radix|lock|cache|index)/"
  # dmidx-ycsb's failure experiment kills a compute node through the
  # runtime's cluster and the fabric's fault switches (tools/fault_switch.h)
  # (the memory-node header its cluster includes), nothing else below.
  "dmidx_tools_faults $root/(lib/(bootstrap|fabric/verbs)|btree|radix|lock|cache|index|bench)/|/lib/memnode/verbs|libmemcached"
)
not_yet=" "
verbs_layers=" dmidx_fabric_verbs dmidx_memnode_verbs dmidx_bootstrap dmidx-ycsb dmidx_tools_faults "
with_verbs=$(grep -q '^DMIDX_WITH_VERBS:BOOL=ON' "$build/CMakeCache.txt" && echo yes || echo no)

# Dependency paths as the compiler wrote them: relative to the build folder
# when a compiler launcher rewrote them (ccache with CCACHE_BASEDIR), made
# absolute here so that the patterns below see one form.
deps=$(cd "$build" && ninja -t deps | BUILD="$(pwd)" python3 -c '
import os, sys
build = os.environ["BUILD"]
for line in sys.stdin:
    if line.startswith("    ") and not line.startswith("    /"):
        line = "    " + os.path.normpath(os.path.join(build, line.strip())) + "\n"
    sys.stdout.write(line)')
failures=0
checked=0
layers=0
for rule in "${rules[@]}"; do
  read -r target pattern <<<"$rule"
  # Each object's block: a header line "CMakeFiles/<target>.dir/...o: ..."
  # followed by indented dependency paths.
  # The pattern goes through the environment: awk -v would process its
  # backslashes as escapes.
  offending=$(TARGET="^([^ ]*/)?CMakeFiles/$target[.]dir/" PATTERN="$pattern" awk '
    /^[^ ]/ { object = ""; if ($0 ~ ENVIRON["TARGET"]) { object = $1; sub(/:$/, "", object); objects++ } next }
    object != "" && $1 ~ ENVIRON["PATTERN"] { print object " reads " $1 }
    END { print "#objects " objects + 0 }' <<<"$deps")
  count=$(sed -n 's/^#objects //p' <<<"$offending")
  if [ "$count" -eq 0 ]; then
    if [[ "$not_yet" == *" $target "* ]] ||
       { [ "$with_verbs" = no ] && [[ "$verbs_layers" == *" $target "* ]]; }; then
      continue
    fi
    echo "check-layers: no objects of $target in $build: a layer was renamed or moved, so its rule checks nothing"
    failures=1
    continue
  fi
  layers=$((layers + 1))
  checked=$((checked + count))
  bad=$(grep -v '^#objects ' <<<"$offending" || true)
  if [ -n "$bad" ]; then
    echo "check-layers: $target reaches headers its layer must not know about:"
    sed 's/^/  /' <<<"$bad"
    failures=1
  fi
done
[ "$checked" -gt 0 ] || { echo "check-layers: no layer objects found in $build (built?)" >&2; exit 2; }

# Every header of the repository a layer's objects read is in the layer's
# own folders, in include/dmidx/, or in the folders of a layer it declares
# in CMakeLists.txt (DEPENDS, followed through the declared layers' own):
# the build's dmidx_layers.txt, written by dmidx_layer().
table="$build/dmidx_layers.txt"
[ -f "$table" ] || { echo "check-layers: $table is missing (configure with this CMakeLists.txt)" >&2; exit 2; }
undeclared=$(ROOT="$root" TABLE="$table" python3 -c '
import os, sys
root, table = os.environ["ROOT"], os.environ["TABLE"]
dirs, depends = {}, {}
for line in open(table):
    fields = line.split()
    if not fields:
        continue
    name = fields[0]
    dirs[name] = set(fields[1].split(",")) if len(fields) > 1 else set()
    depends[name] = [d for d in (fields[2].split(",") if len(fields) > 2 else []) if d]
def reachable(name):
    seen, stack = set(), [name]
    while stack:
        layer = stack.pop()
        if layer in seen or layer not in dirs:
            continue
        seen.add(layer)
        stack.extend(depends[layer])
    return seen
allowed = {name: {"include/dmidx"}.union(*(dirs[l] for l in reachable(name))) for name in dirs}
layer = None
for line in sys.stdin:
    if not line.startswith(" "):
        layer, obj = None, line.split(":")[0]
        for name in dirs:
            if obj.startswith("CMakeFiles/" + name + ".dir/"):
                layer = name
        continue
    path = line.strip()
    if layer is None or not path.startswith(root + "/") or path.startswith(root + "/build"):
        continue
    folder = os.path.dirname(os.path.relpath(path, root))
    if folder not in allowed[layer]:
        print("  %s (%s) reads %s, of a layer it does not declare" % (obj, layer, os.path.relpath(path, root)))
' <<<"$deps")
if [ -n "$undeclared" ]; then
  echo "check-layers: objects read headers of layers their CMake target does not declare (DEPENDS):"
  echo "$undeclared"
  failures=1
fi
[ $failures -eq 0 ] && echo "check-layers: $checked objects of $layers layers respect the layer table"
exit $failures
