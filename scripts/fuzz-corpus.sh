#!/bin/bash
# fuzz-corpus.sh - record seed corpora for the fuzz targets from real
# sessions: run the integration tests with HPL_RECORD_DIR set (every server
# connection's and every client's received bytes go to files), sort the
# files by who received them, and merge them with libFuzzer's -merge=1 into
# tests/fuzz/corpus/TARGET (only inputs that add coverage are kept).
#
#   scripts/fuzz-corpus.sh        (needs the normal build and scripts/fuzz.sh's build)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${HPL_BUILD_DIR:-$top/build}
fuzz=${HPL_FUZZ_BUILD_DIR:-$top/build-fuzz}
rec=$(mktemp -d /tmp/hpl-record-XXXXXX)
raw=$(mktemp -d /tmp/hpl-seeds-XXXXXX)
trap 'rm -rf "$rec" "$raw"' EXIT
(cd "$build" && HPL_RECORD_DIR=$rec ctest -E "netns|pytest|protocol|faultrun|crpc|uvconn" >/dev/null)
mkdir -p "$raw"/{fuzz_dir,fuzz_store,fuzz_client,fuzz_frame}
for f in "$rec"/*; do
  b=$(basename "$f")
  [ -s "$f" ] || continue
  case "$b" in
    dir_-*) cp "$f" "$raw/fuzz_dir/$b"                                  # the directory
            { printf '\017'; cat "$f"; } > "$raw/fuzz_frame/$b" ;;
    client-*) { printf '\000'; cat "$f"; } > "$raw/fuzz_store/$b" ;;   # a store's client socket
    data-in-*) { printf '\001'; cat "$f"; } > "$raw/fuzz_store/$b" ;;  # a store's data port
    crpc-*) cp "$f" "$raw/fuzz_client/$b" ;;                            # what clients read
  esac
done
for t in fuzz_dir fuzz_store fuzz_client fuzz_frame; do
  mkdir -p "$top/tests/fuzz/corpus/$t"
  "$fuzz/tests/fuzz/$t" -merge=1 -rss_limit_mb=4096 "$top/tests/fuzz/corpus/$t" "$raw/$t" \
    >/dev/null 2>&1
  echo "fuzz-corpus.sh: $t: $(ls "$top/tests/fuzz/corpus/$t" | wc -l) seeds," \
       "$(du -sh "$top/tests/fuzz/corpus/$t" | cut -f1)"
done
