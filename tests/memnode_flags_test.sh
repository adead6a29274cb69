#!/usr/bin/env bash
# dmidx-memnode's command line, on any machine (no RDMA needed): --help
# documents every flag the parser accepts, bad flags exit 2 with a message,
# an unreachable memcached exits 1 naming it. (tools_flags_test.sh has the
# exact message of each bad value.)
# Usage: memnode_flags_test.sh DMIDX_MEMNODE SOURCE... (the files that
# define its flags: tools/dmidx_memnode.cc, tools/cli.cc)
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
# Every flag the sources define (a string literal "--name" outside comments,
# handed to CLI11 or to tools/cli.h's Add*Flag helpers) appears in the help
# as a flag line, and every flag line of the help is defined in the sources.
mapfile -t flags < <(grep -hv '^[[:space:]]*//' "${source_files[@]}" |
                       grep -o '"--[a-z][a-z-]*"' | tr -d '"' | sort -u)
check "the sources define flags" [ ${#flags[@]} -ge 10 ]
mapfile -t documented < <(grep -o '^  --[a-z][a-z-]*' <<< "$help" | tr -d ' ' | sort -u)
for flag in "${flags[@]}"; do
  check "--help documents $flag" grep -qx -- "$flag" < <(printf '%s\n' "${documented[@]}")
done
for flag in "${documented[@]}"; do
  check "$flag is defined in the sources" grep -qx -- "$flag" < <(printf '%s\n' "${flags[@]}")
done

# one_line_naming TEXT: a bad command line is reported on one line that
# names the tool and points at --help.
one_line_naming() {
  [ "$(wc -l <<< "$1")" -eq 1 ] && grep -q '^dmidx-memnode: .*run with --help' <<< "$1"
}
out=$("$memnode" --no-such-flag 2>&1); rc=$?
check "unknown flag exits 2" [ $rc -eq 2 ]
check "unknown flag is named" grep -q -- "--no-such-flag" <<< "$out"
check "unknown flag: one line" one_line_naming "$out"
out=$("$memnode" --pool-bytes=12Q 2>&1); rc=$?
check "bad size exits 2" [ $rc -eq 2 ]
check "bad size is named" grep -q -- "--pool-bytes: '12Q' is not a size" <<< "$out"
check "bad size: one line" one_line_naming "$out"
out=$("$memnode" --pool-bytes 2>&1); rc=$?
check "missing value exits 2" [ $rc -eq 2 ]
check "missing value is named" grep -q -- "--pool-bytes" <<< "$out"
check "missing value: one line" one_line_naming "$out"
out=$("$memnode" --catalog-entries=0 2>&1); rc=$?
check "out-of-range integer exits 2" [ $rc -eq 2 ]
check "out-of-range integer is named" grep -q -- "--catalog-entries: must be >= 1, not 0" <<< "$out"
out=$("$memnode" --new-run=yes 2>&1); rc=$?
check "a value for a switch exits 2" [ $rc -eq 2 ]
out=$("$memnode" --huge-pages=maybe 2>&1); rc=$?
check "bad boolean exits 2" [ $rc -eq 2 ]
out=$("$memnode" stray 2>&1); rc=$?
check "stray argument exits 2" [ $rc -eq 2 ]
check "stray argument is named" grep -q "unexpected argument 'stray'" <<< "$out"
out=$(timeout 30 "$memnode" --memcached=127.0.0.1:1 --pool-bytes=4M --chunk-bytes=1M \
  --huge-pages=off 2>&1); rc=$?
check "unreachable memcached exits 1" [ $rc -eq 1 ]
check "unreachable memcached is named" grep -q "memcached at 127.0.0.1:1 unreachable" <<< "$out"
# "--flag=" is an empty value, not "take the next argument" (CLI11's own
# reading), and the last of a repeated flag wins.
out=$(timeout 30 "$memnode" --device= --memcached=127.0.0.1:1 --pool-bytes=4M --chunk-bytes=1M --huge-pages=off \
  2>&1); rc=$?
check "empty value: runs and exits 1" [ $rc -eq 1 ]
check "empty value does not swallow the next flag" \
  grep -q "memcached at 127.0.0.1:1 unreachable" <<< "$out"
out=$(timeout 30 "$memnode" --memcached=127.0.0.1:2 --pool-bytes=1T --memcached=127.0.0.1:1 \
  --pool-bytes=4M --chunk-bytes=1M --huge-pages=off 2>&1); rc=$?
check "repeated flag: runs and exits 1" [ $rc -eq 1 ]
check "repeated flag: the last value wins" grep -q "memcached at 127.0.0.1:1 unreachable" <<< "$out"
out=$("$memnode" --cluster='bad name' 2>&1); rc=$?
check "bad cluster name exits 2" [ $rc -eq 2 ]
check "bad cluster name is explained" grep -q -- "--cluster:" <<< "$out"
out=$("$memnode" --memcached=host:99999 2>&1); rc=$?
check "bad memcached address exits 2" [ $rc -eq 2 ]
check "bad memcached address is explained" grep -q -- "--memcached:" <<< "$out"

echo "$failures failed"
[ $failures -eq 0 ]
