#!/bin/sh
# fuzz.sh - build the libFuzzer targets (clang, ASan+UBSan) and run each.
#
#   scripts/fuzz.sh [SECONDS]        (default 60 per target)
#
# Targets (tests/fuzz/): fuzz_frame (frame parser, message decoding, the
# handshake), fuzz_dir (a directory in process: dispatch over a real object
# table), fuzz_store (a store in process: its client socket and data port),
# fuzz_client (the client library's reply reading). Seed corpora recorded
# from real sessions are in tests/fuzz/corpus/TARGET; what a run finds goes
# to $HPL_BUILD_DIR/corpus/TARGET (default build-fuzz). Any crash, sanitizer
# report or leak fails the run; the reproducer is left in the build dir
# (crash-*, leak-*) and `build-fuzz/tests/fuzz/TARGET FILE` replays it.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
build=${HPL_FUZZ_BUILD_DIR:-$top/build-fuzz}
cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cc" ] || [ ! -e "$(dirname "$(readlink -f "$cc")")/../lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a" ]; then
  extra="clang-14 libclang-rt-14-dev"
else
  extra=""
fi
HPL_BUILD_DIR=$build CC=${cc:-clang-14} \
  HPL_CMAKE_ARGS="-DHPL_FUZZ=ON -DHPL_SANITIZE=ON -DHPL_TESTS=OFF -DHPL_BENCH=OFF" \
  "$top/scripts/bootstrap.sh" --extra "$extra" >&2
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
cd "$build"
for t in fuzz_frame fuzz_client fuzz_dir fuzz_store; do
  mkdir -p "corpus/$t"
  seeds="$top/tests/fuzz/corpus/$t"
  [ -d "$seeds" ] || seeds=""
  log="fuzz-$t.log"
  if ./tests/fuzz/$t -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 \
       -print_final_stats=1 "corpus/$t" $seeds >"$log" 2>&1; then
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
    echo "fuzz.sh: $t: ${execs:-?} runs in ${secs} s, $cov, corpus $(ls "corpus/$t" | wc -l) files"
  else
    echo "fuzz.sh: $t FAILED (log: $build/$log):" >&2
    grep -E "ERROR|SUMMARY|==[0-9]+==" "$log" | head -n 20 >&2
    status=1
  fi
done
exit $status
