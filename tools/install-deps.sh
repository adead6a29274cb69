#!/usr/bin/env bash
# Installs dmidx's build and test dependencies from Debian 12 packages.
# Idempotent: packages already present are left alone and apt is not touched.
# Must run as root (or with sudo available). Used by the README quick start and CI.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  dpkg-dev file
  libibverbs-dev librdmacm-dev rdma-core ibverbs-providers
  libboost-context-dev
  libmemcached-dev memcached
  googletest libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev
  python3-matplotlib
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

as_root=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    as_root=(sudo)
  else
    echo "install-deps: missing packages (${missing[*]}) and not root; rerun as root" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
