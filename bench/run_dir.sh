#!/bin/sh
# run_dir.sh - the directory and a store at many objects (bench_dir), this
# build and optionally an older one in the same invocation, one after the
# other, into one TSV (only ratios from one invocation count: see
# docs/benchmarks.md).
#
#   bench/run_dir.sh [--old BUILD_DIR [--old-no-auth]] [bench_dir options...]
#
# BUILD_DIR is the build directory of an older checkout: its servers and its
# libhoplite run the same bench_dir binary (functions the old library lacks
# are skipped). Defaults: 1 000 000 inline objects and 100 000 of 70 KiB.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
build=${HOPLITE_BUILD:-$here/build}
old= old_auth=
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$2; shift 2 ;;
    --old-no-auth) old_auth=--no-auth; shift ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || set -- --inline 1000000 --large 100000 --large-size 70K --secs 3
out=${BENCH_DIR_OUT:-$here/bench/results/dir-$(date +%Y%m%d-%H%M%S).tsv}
mkdir -p "$(dirname "$out")"
echo "machine: $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); results in $out"
"$build/bench/bench_dir" "$@" --label new --out "$out"
if [ -n "$old" ]; then
  LD_LIBRARY_PATH=$old HOPLITE_BIN_DIR=$old "$build/bench/bench_dir" "$@" $old_auth \
    --label old --out "$out"
fi
