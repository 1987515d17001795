#!/bin/sh
# test.sh - the whole default test suite: install, build, run every test,
# then a short fuzzing run of every fuzz target (10 s each).
#   scripts/test.sh [ctest options, e.g. -R putget]   (with options: ctest only)
# Environment: HPL_TEST_TIMEOUT_SCALE multiplies test timeouts (slow machines,
# sanitizer builds: HPL_CMAKE_ARGS=-DHPL_SANITIZE=ON HPL_BUILD_DIR=build-asan);
# HPL_TEST_FUZZ=0 skips the fuzzing run, HPL_FUZZ_SECONDS sets its length.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/bootstrap.sh"
cd "${HPL_BUILD_DIR:-$top/build}"
ctest --output-on-failure "$@"
if [ $# -eq 0 ] && [ "${HPL_TEST_FUZZ:-1}" != 0 ]; then
  "$top/scripts/fuzz.sh" "${HPL_FUZZ_SECONDS:-10}"
fi
