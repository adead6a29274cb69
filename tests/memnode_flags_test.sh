#!/usr/bin/env bash
# dmidx-memnode's command line, on any machine (no RDMA needed): --help
# documents every flag the parser accepts, bad flags exit 2 with a message,
# an unreachable memcached exits 1 naming it.
# Usage: memnode_flags_test.sh DMIDX_MEMNODE SOURCE... (the files holding
# its option tables: tools/dmidx_memnode.cc, tools/command_line.h)
set -uo pipefail
memnode=$1
shift
source_files=("$@")
failures=0
check() {  # check NAME CONDITION...
  local name=$1
  shift
  if "$@"; then echo "PASS: $name"; else echo "FAIL: $name"; failures=$((failures + 1)); fi
}

help=$("$memnode" --help); rc=$?
check "--help exits 0" [ $rc -eq 0 ]
# Every long option in the parser's table appears in the help text.
mapfile -t flags < <(grep -ho '{"[a-z-]*", \(no\|required\)_argument' "${source_files[@]}" | cut -d'"' -f2)
check "the parser has flags" [ ${#flags[@]} -ge 10 ]
for flag in "${flags[@]}"; do
  check "--help documents --$flag" grep -q -- "--$flag" <<< "$help"
done

out=$("$memnode" --no-such-flag 2>&1); rc=$?
check "unknown flag exits 2" [ $rc -eq 2 ]
check "unknown flag is named" grep -q -- "--no-such-flag" <<< "$out"
out=$("$memnode" --pool-bytes=12Q 2>&1); rc=$?
check "bad size exits 2" [ $rc -eq 2 ]
check "bad size is named" grep -q "'12Q' is not a size" <<< "$out"
out=$("$memnode" --huge-pages=maybe 2>&1); rc=$?
check "bad boolean exits 2" [ $rc -eq 2 ]
out=$("$memnode" stray 2>&1); rc=$?
check "stray argument exits 2" [ $rc -eq 2 ]
out=$(timeout 30 "$memnode" --memcached=127.0.0.1:1 --pool-bytes=4M --huge-pages=off 2>&1); rc=$?
check "unreachable memcached exits 1" [ $rc -eq 1 ]
check "unreachable memcached is named" grep -q "memcached at 127.0.0.1:1 unreachable" <<< "$out"
out=$("$memnode" --cluster='bad name' 2>&1); rc=$?
check "bad cluster name exits 2" [ $rc -eq 2 ]
check "bad cluster name is explained" grep -q -- "--cluster:" <<< "$out"
out=$("$memnode" --memcached=host:99999 2>&1); rc=$?
check "bad memcached address exits 2" [ $rc -eq 2 ]
check "bad memcached address is explained" grep -q -- "--memcached:" <<< "$out"

echo "$failures failed"
[ $failures -eq 0 ]
