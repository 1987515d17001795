#!/bin/sh
# test.sh - the whole default test suite: install, build, run every test.
#   scripts/test.sh [ctest options, e.g. -R putget]
# Environment: HPL_TEST_TIMEOUT_SCALE multiplies test timeouts (slow machines,
# sanitizer builds: HPL_CMAKE_ARGS=-DHPL_SANITIZE=ON HPL_BUILD_DIR=build-asan).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/bootstrap.sh"
cd "${HPL_BUILD_DIR:-$top/build}"
ctest --output-on-failure "$@"
