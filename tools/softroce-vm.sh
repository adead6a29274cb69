#!/usr/bin/env bash
# softroce-vm.sh: runs one command inside a throw-away qemu VM that has two
# Soft-RoCE (rxe) devices, for machines whose own kernel has no RDMA support.
#
# Usage: tools/softroce-vm.sh [options] -- COMMAND [ARG...]
#
# The VM boots Debian 12's stock kernel (package linux-image-amd64, fetched
# with `apt-get download` and unpacked, never installed on the host) under
# plain TCG, with a busybox initramfs that loads the RDMA, 9p, overlay and veth
# modules. The host's root filesystem is shared read-only over 9p and mounted
# in the guest as the lower layer of an overlay whose upper layer is guest RAM,
# so every host path (repository, build trees, /usr, even /tmp) appears at the
# same absolute path, and the guest may write anywhere without touching the
# host. The build root is additionally shared read-write, so what the command
# writes there reaches the host. /run and /dev/shm are fresh tmpfs.
#
# In the guest, as root: `ulimit -l unlimited`; a veth pair veth0 10.77.0.1/24
# <-> veth1 10.77.0.2/24 (it exists only inside the guest; the VM has no NIC);
# `rdma link add rxe0 ... netdev veth0` and rxe1 on veth1; then
# `cd WORKDIR && bash -c COMMAND` with stdin from /dev/null. One COMMAND word
# is shell text ('a && b | c'); several words are run as that exact argv.
# The command's stdout comes out on this script's stdout; its stderr, the
# guest's console (kernel errors, -v boot log) and this script's own messages
# ("softroce-vm: ...") on stderr.
#
# The guest environment is fresh: PATH, HOME=/root, LANG=C.UTF-8, TERM=dumb,
# plus SOFTROCE_VM=1, SOFTROCE_DEVICES="rxe0 rxe1",
# SOFTROCE_ADDRS="10.77.0.1 10.77.0.2" and SOFTROCE_GID_INDEX (index of the
# RoCE v2 IPv4 GID, the same on both devices; e.g. `ibv_rc_pingpong -g`).
#
# Options:
#   -C, --workdir DIR     directory to run COMMAND in (default: current dir)
#   -e, --env NAME=VALUE  export NAME in the guest (repeatable)
#   -m, --memory SIZE     guest RAM, qemu -m syntax (default 2048M;
#                         env SOFTROCE_VM_MEMORY)
#       --smp N           guest CPUs (default 2; env SOFTROCE_VM_SMP)
#   -t, --timeout SEC     bound on the whole run, boot to power-off
#                         (default 900; env SOFTROCE_VM_TIMEOUT)
#       --boot-timeout SEC  bound until the guest's init has started
#                         (default 300; env SOFTROCE_VM_BOOT_TIMEOUT)
#       --rw DIR          also share host DIR read-write at the same path
#                         (repeatable; created if missing; the build root
#                         is always shared so)
#       --no-rw           share nothing read-write, not even the build root
#       --cache-dir DIR   kernel and initramfs cache (default
#                         BUILD_ROOT/softroce-vm; env SOFTROCE_VM_CACHE)
#       --refresh-kernel  resolve linux-image-amd64 again and fetch the
#                         newest kernel even if one is cached
#       --append ARGS     extra kernel command-line arguments
#       --prepare-only    install packages, fetch the kernel, build the
#                         initramfs, but do not boot
#       --keep            keep the per-run directory (guest logs) on exit
#   -v, --verbose         show kernel boot messages and trace guest setup
#   -h, --help            show this help
#
# BUILD_ROOT is $DMIDX_BUILD_ROOT, or <repo>/build (as in tools/test.sh).
#
# Exit status: the command's own status, or
#    2  bad usage                 120  host preparation failed (packages,
#  121  guest failed to boot           kernel download, initramfs)
#  122  guest setup failed (module load, 9p/overlay mount, veth, rdma link)
#  124  timeout (qemu killed)     130/143  interrupted (SIGINT/SIGTERM)
# A command that itself exits with one of these codes is still reported as
# "command exited with status N" on stderr, which is unambiguous.
#
# Needs root (apt-get, and qemu reading the whole host tree for the share).
# Never uses KVM: it hangs at boot on the machines this was written for, and
# TCG is fast enough (boot to command in seconds; an RDMA op takes ~100 us,
# so use the VM for correctness, never for performance).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_root=${DMIDX_BUILD_ROOT:-$repo/build}
prog=softroce-vm

# ---------------------------------------------------------------- constants --

# Host packages. kmod gives depmod/modprobe for the dependency order, cpio
# packs the initramfs, busybox-static is the initramfs userland; the rest is
# what the guest runs out of the host's root (the guest has no packages of
# its own).
packages=(
  qemu-system-x86 busybox-static cpio kmod
  rdma-core ibverbs-providers ibverbs-utils perftest iproute2
)

# Modules to load in the guest, before any dependency expansion. Each is
# expanded with `modprobe --show-depends` into the modules it needs, in load
# order; names that are built into the kernel are skipped. crc32_generic is
# not a symbol dependency of rdma_rxe but rxe asks the crypto API for "crc32"
# and fails with ENOENT without it (the guest cannot autoload modules, as the
# host's /lib/modules has no tree for the guest kernel).
modules=(
  crc32_generic
  virtio virtio_ring virtio_pci 9pnet 9pnet_virtio netfs fscache 9p
  overlay
  udp_tunnel ip6_udp_tunnel ib_core ib_uverbs rdma_rxe rdma_cm rdma_ucm
  veth
)

# The guest-only network (see the header).
addr0=10.77.0.1
addr1=10.77.0.2

# Exit codes (see the header).
rc_usage=2 rc_host=120 rc_boot=121 rc_setup=122 rc_timeout=124

# ------------------------------------------------------------------ helpers --

# shellcheck source=tools/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
say() { echo "$prog: $*" >&2; }
die() { local rc=$1; shift; say "error: $*"; exit "$rc"; }
is_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}
now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$t"; }  # microseconds since the epoch
elapsed() { local us=$(($(now_us) - $1)); printf '%d.%d' $((us / 1000000)) $((us / 100000 % 10)); }

# --------------------------------------------------------------- arguments --

workdir=$PWD
memory=${SOFTROCE_VM_MEMORY:-2048M}
smp=${SOFTROCE_VM_SMP:-2}
timeout=${SOFTROCE_VM_TIMEOUT:-900}
boot_timeout=${SOFTROCE_VM_BOOT_TIMEOUT:-300}
cache=${SOFTROCE_VM_CACHE:-$build_root/softroce-vm}
rw_dirs=("$build_root")
envs=()
append=
refresh_kernel=0
prepare_only=0
keep=0
verbose=0

need_arg() { [ $# -ge 2 ] || die $rc_usage "option $1 needs an argument (see --help)"; }
while [ $# -gt 0 ]; do
  case "$1" in
    -C|--workdir) need_arg "$@"; workdir=$2; shift 2 ;;
    -e|--env) need_arg "$@"; envs+=("$2"); shift 2 ;;
    -m|--memory) need_arg "$@"; memory=$2; shift 2 ;;
    --smp) need_arg "$@"; smp=$2; shift 2 ;;
    -t|--timeout) need_arg "$@"; timeout=$2; shift 2 ;;
    --boot-timeout) need_arg "$@"; boot_timeout=$2; shift 2 ;;
    --rw) need_arg "$@"; rw_dirs+=("$2"); shift 2 ;;
    --no-rw) rw_dirs=(); shift ;;
    --cache-dir) need_arg "$@"; cache=$2; shift 2 ;;
    --refresh-kernel) refresh_kernel=1; shift ;;
    --append) need_arg "$@"; append="$append $2"; shift 2 ;;
    --prepare-only) prepare_only=1; shift ;;
    --keep) keep=1; shift ;;
    -v|--verbose) verbose=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    *) die $rc_usage "unknown argument '$1' (the command goes after --; see --help)" ;;
  esac
done
command_words=("$@")

[ $prepare_only = 1 ] || [ ${#command_words[@]} -gt 0 ] ||
  die $rc_usage "no command given (usage: $0 [options] -- COMMAND; see --help)"
for n in "$timeout" "$boot_timeout" "$smp"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || die $rc_usage "'$n' is not a positive whole number"
done
for e in ${envs[@]+"${envs[@]}"}; do
  [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || die $rc_usage "--env wants NAME=VALUE, got '$e'"
done
[ "$(id -u)" -eq 0 ] || die $rc_usage "must run as root (apt-get, and qemu must read the whole host tree)"
workdir=$(cd "$workdir" 2>/dev/null && pwd) || die $rc_usage "no such working directory: $workdir"

# ---------------------------------------------------------------- packages --

# Install what is missing; leave apt alone when everything is there.
ensure_packages() {
  local missing=() p
  for p in "${packages[@]}"; do is_installed "$p" || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || return 1
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 || return 1
}

# ------------------------------------------------------------------ kernel --

# Sets kver and kroot (the unpacked package: kroot/boot/vmlinuz-$kver,
# kroot/lib/modules/$kver). The name of the package in use is remembered in
# $cache/kernel/current, so later runs neither download nor ask apt.
ensure_kernel() {
  local dir=$cache/kernel pkg=
  mkdir -p "$dir"
  if [ $refresh_kernel = 0 ] && [ -s "$dir/current" ]; then
    pkg=$(<"$dir/current")
    [ -f "$dir/$pkg/done" ] || pkg=
  fi
  if [ -z "$pkg" ]; then
    # linux-image-amd64 is a metapackage; its candidate depends on exactly
    # one real image package, linux-image-<abi>-amd64.
    pkg=$(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
          sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]*-amd64\).*/\1/p' | head -n1)
    if [ -z "$pkg" ]; then
      apt-get update -qq || return 1
      pkg=$(apt-cache show --no-all-versions linux-image-amd64 |
            sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]*-amd64\).*/\1/p' | head -n1)
    fi
    [ -n "$pkg" ] || { say "cannot resolve linux-image-amd64 to a kernel package"; return 1; }
  fi
  if [ ! -f "$dir/$pkg/done" ]; then
    say "fetching $pkg (apt-get download; not installed on the host)"
    rm -rf "${dir:?}/$pkg" "$dir/download"
    mkdir -p "$dir/download"
    # apt-get warns that it downloads "unsandboxed as root": harmless.
    (cd "$dir/download" && apt-get download -q "$pkg" 2>&1 | grep -v unsandboxed >&2) || true
    local deb
    deb=$(find "$dir/download" -name "${pkg}_*.deb" | head -n1)
    [ -n "$deb" ] || { say "apt-get download $pkg failed"; return 1; }
    dpkg -x "$deb" "$dir/$pkg.tmp" || return 1
    rm -rf "$dir/download"
    mv "$dir/$pkg.tmp" "$dir/$pkg"
    touch "$dir/$pkg/done"
    # Other kernels in the cache (after --refresh-kernel) are not needed.
    find "$dir" -mindepth 1 -maxdepth 1 -name 'linux-image-*' ! -name "$pkg" -exec rm -rf {} +
  fi
  echo "$pkg" >"$dir/current"
  kver=${pkg#linux-image-}
  kroot=$dir/$pkg
  [ -f "$kroot/boot/vmlinuz-$kver" ] || { say "no vmlinuz-$kver in $pkg"; return 1; }
}

# --------------------------------------------------------------- initramfs --

# The initramfs /init (busybox sh, PID 1). It loads the modules listed in
# /modules.list, mounts the host root (9p) under an overlay at /newroot, the
# read-write shares on top, the pseudo filesystems, then chroots into it to
# run the host's bash on $run/stage2.sh (run dir passed on the kernel command
# line). It stays PID 1 so that it can always power the machine off. It
# reports progress on /dev/ttyS1, a second serial port that qemu writes to a
# host file, so the host learns how far the guest got even when the shares
# fail. Generic: nothing in it depends on one run.
read -r -d '' init_script <<'INIT' || true
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /lower /rw /newroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
ctl=/dev/ttyS1
report() { echo "$*" >"$ctl"; }
log() { read -r up _ </proc/uptime; echo "softroce-vm(guest) [$up]: $*" >/dev/console; }
halt() {
  [ "$verbose" = 1 ] && log "powering off"
  # Setting a tty's modes (TCSADRAIN) waits until its output has left the
  # UART, so nothing the command printed is lost at power-off.
  for t in /dev/ttyS2 /dev/ttyS1 /dev/console; do stty -F "$t" -onlcr 2>/dev/null; done
  [ "$verbose" = 1 ] || echo 0 >/proc/sys/kernel/printk  # no "reboot: Power down"
  [ "$verbose" = 1 ] && log "ports drained"
  sync; poweroff -f; sleep 10; echo o >/proc/sysrq-trigger
}
fail() { log "setup failed: $*"; report "setup-failed $*"; halt; }
arg() { # NAME: value of softroce.NAME= on the kernel command line
  # shellcheck disable=SC2013  # (words are wanted)
  for w in $(cat /proc/cmdline); do case "$w" in "softroce.$1="*) echo "${w#*=}" ;; esac; done
}
verbose=$(arg verbose)
# Raw newlines on all ports (the host would otherwise see CR LF).
for t in /dev/console /dev/ttyS1 /dev/ttyS2; do stty -F "$t" -onlcr 2>/dev/null; done
report booted
hostname softroce-vm

while read -r m; do
  [ "$verbose" = 1 ] && log "insmod $m"
  insmod "/modules/$m" || fail "insmod $m failed"
done </modules.list

run=$(arg run)
[ -n "$run" ] || fail "no softroce.run= on the kernel command line"
o=trans=virtio,version=9p2000.L,msize=262144
mount -t 9p -o "$o,ro,cache=loose" hostroot /lower ||
  fail "cannot mount the host root (9p tag hostroot)"
mount -t tmpfs -o mode=0755 rw /rw || fail "cannot mount tmpfs on /rw"
mkdir -p /rw/upper /rw/work
if ! mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/work overlay /newroot; then
  # Fallback: read-only root with writable scratch places.
  log "overlay mount failed; root is read-only, /tmp /var/tmp /root are tmpfs"
  mount --bind /lower /newroot || fail "cannot bind the host root"
  for d in /tmp /var/tmp /root; do mount -t tmpfs -o mode=1777 tmp "/newroot$d"; done
fi
[ -f "/newroot$run/stage2.sh" ] || fail "$run/stage2.sh not visible through the host root share"

# Read-write shares: lines "TAG PATH" (PATH may contain spaces).
while read -r tag path; do
  [ "$verbose" = 1 ] && log "mount 9p $tag read-write on $path"
  mount -t 9p -o "$o,cache=mmap" "$tag" "/newroot$path" || fail "cannot mount 9p $tag on $path"
done <"/newroot$run/rw-shares"

mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
# devtmpfs has no /dev/fd or /dev/std* (udev makes them on a normal system);
# bash's <(...) and many scripts need them.
ln -sf /proc/self/fd /newroot/dev/fd
ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout
ln -sf /proc/self/fd/2 /newroot/dev/stderr
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 shm /newroot/dev/shm
mount -t tmpfs -o mode=0755 run /newroot/run
mkdir -p /newroot/run/lock
# Let the guest's hostname resolve (in the overlay only; the host's file is
# untouched, and with the read-only fallback this just fails quietly).
echo "127.0.1.1 softroce-vm" 2>/dev/null >>/newroot/etc/hosts
report stage2
chroot /newroot /bin/bash "$run/stage2.sh" "$run" </dev/null >/dev/console 2>&1
rc=$?
[ "$rc" = 0 ] || report "stage2-exit $rc"
halt
INIT

# Sets initrd: a cpio archive (uncompressed, which TCG unpacks fastest) with
# busybox, /init and the modules in load order. Cached under a name that
# hashes everything that goes in, so it is rebuilt only when that changes.
ensure_initramfs() {
  # depmod wants a writable tree; modules.dep is generated into the unpacked
  # package (the .deb ships none, its postinst would run depmod).
  if [ ! -f "$kroot/lib/modules/$kver/modules.dep" ]; then
    depmod -b "$kroot" "$kver" || return 1
  fi
  local order=() builtin=() m line path seen=" "
  for m in "${modules[@]}"; do
    local deps
    if ! deps=$(modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>&1); then
      say "module $m: $deps"
      return 1
    fi
    while read -r line; do
      case "$line" in
        builtin*) builtin+=("${line#builtin }") ;;
        insmod*)
          path=${line#insmod }; path=${path%% *}
          case "$seen" in *" $path "*) ;; *) seen="$seen$path "; order+=("$path") ;; esac ;;
      esac
    done <<<"$deps"
  done
  local busybox=/bin/busybox
  [ -x "$busybox" ] || return 1
  local key
  key=$( { printf '%s\n' "$kver" "${order[@]}" "$init_script"; sha256sum "$busybox"; } |
         sha256sum | cut -c1-16)
  initrd=$cache/initramfs-$kver-$key.cpio
  if [ $verbose = 1 ]; then
    if [ ${#builtin[@]} -gt 0 ]; then
      say "built into $kver, so not loaded: $(printf '%s\n' "${builtin[@]}" | sort -u | tr '\n' ' ')"
    else
      say "none of the modules is built into $kver"
    fi
    say "modules in load order: $(printf '%s\n' "${order[@]##*/}" | tr '\n' ' ')"
  fi
  [ -f "$initrd" ] && return 0
  say "building initramfs for $kver (${#order[@]} modules)"
  local tree
  tree=$(mktemp -d "$cache/initramfs.XXXXXX")
  mkdir -p "$tree/bin" "$tree/modules" "$tree/dev"
  cp "$busybox" "$tree/bin/busybox"
  printf '%s\n' "$init_script" >"$tree/init"
  chmod 0755 "$tree/init"
  : >"$tree/modules.list"
  for path in "${order[@]}"; do
    cp "$path" "$tree/modules/"
    echo "${path##*/}" >>"$tree/modules.list"
  done
  # The kernel opens /dev/console before /init runs; give it the node.
  mknod -m 600 "$tree/dev/console" c 5 1
  (cd "$tree" && find . | LC_ALL=C sort | cpio -o -H newc --quiet) >"$initrd.tmp" || return 1
  mv "$initrd.tmp" "$initrd"
  rm -rf "$tree"
  # Older initramfs images of this cache are not needed any more.
  find "$cache" -maxdepth 1 -name 'initramfs-*.cpio' ! -path "$initrd" -delete
}

# ---------------------------------------------------------------- stage 2 --

# Runs in the guest as the host's /bin/bash, chrooted into the overlay root.
# $1 is the run directory (command, env, workdir). Sets up the RDMA devices,
# runs the command and reports "exit N" on the control port.
read -r -d '' stage2_script <<'STAGE2' || true
set -u
run=$1
ctl=/dev/ttyS1
report() { echo "$*" >"$ctl"; }
log() { local up _; read -r up _ </proc/uptime; echo "softroce-vm(guest) [$up]: $*"; }
fail() { log "setup failed: $*"; report "setup-failed $*"; exit 1; }
verbose=$(<"$run/verbose")
step() { [ "$verbose" = 1 ] && log "$*"; "$@" || fail "'$*' failed"; }
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 TERM=dumb USER=root LOGNAME=root
# Sets addr0 and addr1, the two addresses.
addr0='' addr1=''
# shellcheck disable=SC1091
. "$run/addresses" || fail "cannot read $run/addresses"

# Memory registration pins pages: lift the locked-memory limit for all that
# follows (the command inherits it).
ulimit -l unlimited || fail "ulimit -l unlimited"

# The veth pair, both ends in this one network namespace. rxe sends its
# packets out of its own netdev and resolves the peer's MAC with ARP on it.
# That ARP request (sender 10.77.0.1) arrives on veth1, and by default the
# kernel drops packets whose source is one of its own addresses as martians:
# the neighbour entry ends FAILED and ibv_modify_qp(RTR) fails, now and then
# or always. accept_local=1 (with rp_filter off) lets them in.
step ip link set lo up
step ip link add veth0 type veth peer name veth1
for dev in all default veth0 veth1; do
  sysctl -qw "net.ipv4.conf.$dev.accept_local=1" "net.ipv4.conf.$dev.rp_filter=0" ||
    fail "sysctl accept_local/rp_filter on $dev"
done
step ip addr add "$addr0/24" dev veth0
step ip addr add "$addr1/24" dev veth1
step ip link set veth0 up
step ip link set veth1 up
step rdma link add rxe0 type rxe netdev veth0
step rdma link add rxe1 type rxe netdev veth1

# Wait until both ports are ACTIVE and carry a RoCE v2 GID for their IPv4
# address (the GID table fills asynchronously), and find its index.
# (Shell builtins only: under TCG every process started costs milliseconds.)
gid_index() { # DEV ADDR -> index of the RoCE v2 GID ::ffff:ADDR
  local port=/sys/class/infiniband/$1/ports/1 want f i gid type
  # shellcheck disable=SC2086  # (split the address into its 4 numbers)
  printf -v want '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${2//./ }
  for f in "$port"/gids/*; do
    i=${f##*/}
    read -r gid <"$f" 2>/dev/null && [ "$gid" = "$want" ] || continue
    read -r type <"$port/gid_attrs/types/$i" 2>/dev/null && [ "$type" = "RoCE v2" ] || continue
    echo "$i"; return 0
  done
  return 1
}
port_active() { local s; read -r s <"/sys/class/infiniband/$1/ports/1/state" 2>/dev/null && [ "$s" = "4: ACTIVE" ]; }
g0='' g1=''
for ((try = 0; try < 200; try++)); do
  if port_active rxe0 && port_active rxe1 &&
     g0=$(gid_index rxe0 "$addr0") && g1=$(gid_index rxe1 "$addr1"); then
    break
  fi
  g0='' g1=''
  sleep 0.05
done
[ -n "$g0" ] && [ -n "$g1" ] ||
  fail "rxe0/rxe1 not ACTIVE with a RoCE v2 IPv4 GID after 10 s"
[ "$g0" = "$g1" ] || log "note: RoCE v2 IPv4 GID index differs: rxe0 $g0, rxe1 $g1"
export SOFTROCE_VM=1 SOFTROCE_DEVICES="rxe0 rxe1" SOFTROCE_ADDRS="$addr0 $addr1"
export SOFTROCE_GID_INDEX=$g0
# shellcheck disable=SC1091
. "$run/env" || fail "cannot read $run/env"
report "ready gid=$g0"
[ "$verbose" = 1 ] && log "rxe0 on veth0 ($addr0), rxe1 on veth1 ($addr1), RoCE v2 IPv4 GID index $g0 (after $try polls)"

workdir=$(<"$run/workdir")
cd "$workdir" || fail "cannot cd to $workdir"
# stdout goes to ttyS2 (the host's stdout), stderr stays on the console.
bash -c "$(<"$run/command")" </dev/null >/dev/ttyS2
rc=$?
report "exit $rc"
exit 0
STAGE2

# -------------------------------------------------------------------- run --

qemu_pid=
cat_pid=
run=
# Unblocks a cat still waiting in open() on the fifo (qemu never opened it):
# opening a fifo read-write does not block, and closing it again gives cat EOF.
# shellcheck disable=SC2317
release_cat() {
  local fd
  if [ -n "$cat_pid" ] && kill -0 "$cat_pid" 2>/dev/null; then
    exec {fd}<>"$run/stdout.fifo"; exec {fd}>&-
  fi
}
# shellcheck disable=SC2317  # (called from the EXIT trap)
cleanup() {
  if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
    kill -TERM "$qemu_pid" 2>/dev/null || true
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$qemu_pid" 2>/dev/null || true
  fi
  if [ -n "$cat_pid" ]; then release_cat; kill "$cat_pid" 2>/dev/null || true; fi
  if [ -n "$run" ] && [ -d "$run" ]; then
    if [ "$keep" = 1 ]; then say "kept $run (ctl.log: what the guest reported)"; else rm -rf "$run"; fi
  fi
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT
trap 'say "terminated"; exit 143' TERM

start=$(now_us)
ensure_packages || die $rc_host "installing packages failed"
mkdir -p "$cache" || die $rc_host "cannot create $cache"
cache=$(cd "$cache" && pwd)
# One preparation at a time per cache (concurrent runs share it).
exec {lock_fd}>"$cache/.lock"
flock "$lock_fd"
ensure_kernel || die $rc_host "fetching the kernel failed"
ensure_initramfs || die $rc_host "building the initramfs failed"
exec {lock_fd}>&-
if [ $prepare_only = 1 ]; then
  say "ready: kernel $kver, initramfs $initrd"
  exit 0
fi

# The per-run directory: the guest finds it through the host root share at
# the same path (it is passed on the kernel command line, so no whitespace).
run=$(mktemp -d "${TMPDIR:-/tmp}/softroce-vm.XXXXXX")
[[ $run != *[[:space:]]* ]] || die $rc_usage "TMPDIR must not contain whitespace"
printf '%s\n' "$stage2_script" >"$run/stage2.sh"
if [ ${#command_words[@]} -eq 1 ]; then
  printf '%s\n' "${command_words[0]}" >"$run/command"
else
  printf '%q ' "${command_words[@]}" >"$run/command"; echo >>"$run/command"
fi
printf '%s\n' "$workdir" >"$run/workdir"
echo "$verbose" >"$run/verbose"
printf 'addr0=%q addr1=%q\n' "$addr0" "$addr1" >"$run/addresses"
for e in ${envs[@]+"${envs[@]}"}; do printf 'export %s=%q\n' "${e%%=*}" "${e#*=}"; done >"$run/env"

# 9p shares: the host root read-only, each --rw directory read-write.
# multidevs=remap keeps inode numbers unique although the host tree spans
# several filesystems (else qemu warns and the guest may see clashes).
# shellcheck disable=SC2054  # (commas are qemu's)
qemu_args=(
  -accel tcg -cpu max -m "$memory" -smp "$smp"
  -nic none -display none -monitor none -no-reboot
  # Three serial ports. ttyS0, the console (kernel messages, guest setup
  # messages, the command's stderr): qemu's stdout, which is our stderr.
  # ttyS1, the control port: a file. ttyS2, the command's stdout: a fifo
  # that a cat copies to our stdout.
  -serial stdio
  -chardev "file,id=ctl,path=$run/ctl.log" -serial chardev:ctl
  -chardev "file,id=out,path=$run/stdout.fifo" -serial chardev:out
  -kernel "$kroot/boot/vmlinuz-$kver" -initrd "$initrd"
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
)
: >"$run/rw-shares"
i=0
for d in ${rw_dirs[@]+"${rw_dirs[@]}"}; do
  mkdir -p "$d" || die $rc_usage "cannot create --rw directory $d"
  d=$(cd "$d" && pwd)
  [[ $d != *,* ]] || die $rc_usage "qemu cannot share a path with a comma: $d"
  [ "$d" != / ] || die $rc_usage "--rw / would let the guest write the whole host"
  qemu_args+=(-virtfs "local,path=$d,mount_tag=rw$i,security_model=none,multidevs=remap")
  echo "rw$i $d" >>"$run/rw-shares"
  i=$((i + 1))
done
kargs="console=ttyS0 rdinit=/init panic=-1 softroce.run=$run softroce.verbose=$verbose"
[ $verbose = 1 ] || kargs="$kargs quiet loglevel=3"
kargs="$kargs$append"
qemu_args+=(-append "$kargs")

[ $verbose = 1 ] && say "qemu-system-x86_64 ${qemu_args[*]}"
say "booting $kver under TCG (timeout ${timeout} s)"
boot_start=$(now_us)
mkfifo "$run/stdout.fifo"
cat "$run/stdout.fifo" &
cat_pid=$!
qemu-system-x86_64 "${qemu_args[@]}" </dev/null >&2 &
qemu_pid=$!

# Watch the control port until qemu exits or time runs out. The guest
# reports "booted" when /init starts, "stage2" when it chroots into the host
# root, "ready gid=N" when rxe0/rxe1 are up, then "exit N" or
# "setup-failed WHY".
phase=boot
update_phase() {
  case "$(tr -d '\r' 2>/dev/null <"$run/ctl.log")" in
    *ready*) phase=running-command ;;
    *stage2*) phase=setup-after-chroot ;;
    *booted*) phase=setup ;;
  esac
}
timed_out=
while kill -0 "$qemu_pid" 2>/dev/null; do
  update_phase
  t=$(($(now_us) - boot_start))
  if [ "$t" -ge $((timeout * 1000000)) ]; then timed_out=run; break; fi
  if [ "$phase" = boot ] && [ "$t" -ge $((boot_timeout * 1000000)) ]; then timed_out=boot; break; fi
  sleep 0.2
done
if [ -n "$timed_out" ]; then
  kill -TERM "$qemu_pid" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL "$qemu_pid" 2>/dev/null || true
fi
qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=
# cat ends at the fifo's EOF, once it has copied all the command's output.
release_cat
wait "$cat_pid" 2>/dev/null || true
cat_pid=
update_phase

ctl=$(tr -d '\r' 2>/dev/null <"$run/ctl.log" || true)
took=$(elapsed "$boot_start")
if [ -n "$timed_out" ]; then
  if [ "$timed_out" = boot ]; then
    say "error: timeout: the guest did not start its init within $boot_timeout s; killed qemu"
  else
    say "error: timeout: the run did not finish within $timeout s (in phase '$phase'); killed qemu"
  fi
  exit $rc_timeout
fi
if status=$(sed -n 's/^exit \([0-9]*\)$/\1/p' <<<"$ctl" | tail -n1) && [ -n "$status" ]; then
  say "command exited with status $status (VM ran ${took} s, $(elapsed "$start") s in all)"
  exit "$status"
fi
if failure=$(sed -n 's/^setup-failed //p' <<<"$ctl" | tail -n1) && [ -n "$failure" ]; then
  say "error: guest setup failed: $failure"
  exit $rc_setup
fi
if [ "$phase" = boot ]; then
  if [ "$qemu_rc" != 0 ]; then
    say "error: the guest did not boot: qemu failed with status $qemu_rc (see its message above)"
  else
    say "error: the guest did not boot: the kernel stopped before the initramfs /init ran (panic?); rerun with -v for all kernel messages"
  fi
  exit $rc_boot
fi
say "error: the guest stopped without reporting a result (phase '$phase', qemu status $qemu_rc)"
exit $rc_setup
