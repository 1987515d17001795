#!/bin/sh
# demo.sh - the main job: install, build, then run a local cluster that
# broadcasts objects (and reduces them) and prints what happened.
#   scripts/demo.sh [--nodes N] [--size BYTES]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/bootstrap.sh"
exec "${HPL_BUILD_DIR:-$top/build}/hoplite" demo "$@"
