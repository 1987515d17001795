#!/bin/sh
# bootstrap.sh - install what hoplite needs (Debian/Ubuntu) and build it.
#
#   scripts/bootstrap.sh [--extra "pkg ..."]
#
# Installs missing Debian packages with apt-get (as root, or through sudo),
# then configures and builds into $HPL_BUILD_DIR (default ./build) with
# warnings as errors. Sourced-free: the other scripts run it first.
set -eu

top=$(cd "$(dirname "$0")/.." && pwd)
build=${HPL_BUILD_DIR:-$top/build}
extra=""
while [ $# -gt 0 ]; do
  case "$1" in
    --extra) extra="$extra $2"; shift 2 ;;
    *) echo "bootstrap.sh: unknown option $1" >&2; exit 2 ;;
  esac
done

# Build and test dependencies (Debian 12 package names).
pkgs="gcc make cmake pkg-config libprotobuf-c-dev protobuf-c-compiler libjemalloc-dev
      libuv1-dev uthash-dev libcmocka-dev libsodium-dev libssl-dev libxxhash-dev liburing-dev python3 python3-numpy python3-pytest
      python3-distributed python3-pip python3-setuptools python3-wheel python3-venv
      python3-yaml libmicrohttpd-dev libcjson-dev libcurl4-openssl-dev etcd-server systemd
      iproute2 procps $extra"

missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "bootstrap: installing:$missing"
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
    echo "bootstrap: need root (or sudo) to install:$missing" >&2; exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

echo "bootstrap: building in $build"
cmake -S "$top" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHPL_WERROR=ON \
  ${HPL_CMAKE_ARGS:-} >/dev/null
log="$build/build.log"
if ! cmake --build "$build" -j "$(nproc)" >"$log" 2>&1; then
  cat "$log" >&2
  echo "bootstrap: build failed (log: $log)" >&2
  exit 1
fi
echo "bootstrap: build ok"
