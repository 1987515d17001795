#!/bin/sh
# test_trace.sh BENCH_COLL HOPS_PY - per-hop tracing (src/common/trace.h) end to
# end: bench_coll's 1 KiB broadcast with the put timed, run with
# $HOPLITE_TRACE, must leave the events of the client library, the store and
# the directory in one file, and bench/hops.py must put them in the order the
# bytes travel.
set -eu
BENCH=$1
HOPS=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "test_trace: FAIL: $*" >&2; [ -f "$T/out" ] && cat "$T/out" >&2; exit 1; }

HOPLITE_TRACE=$T/trace "$BENCH" --op bcast --sizes 1K --hosts 3 --reps 3 --procs --put-timed \
    > /dev/null 2> "$T/bench.err" || { cat "$T/bench.err" >&2; fail "bench_coll failed"; }
[ -s "$T/trace" ] || fail "no trace written"
pids=$(awk '{print $2}' "$T/trace" | sort -u | wc -l)
# the driver (puts), two workers (gets), store 0 and the directory at least
[ "$pids" -ge 5 ] || fail "trace lines from $pids processes, want >= 5"
/usr/bin/python3 "$HOPS" "$T/trace" --id-prefix bench/bcast/1024/ > "$T/out" || fail "hops.py failed"
# per sample: one put published to the directory and put through store 0
# (whose INLINE_PUT confirms it), two receivers
for want in "put 1.0" "publish 1.0" "d.publish 1.0" "s.put 1.0" "s.inline 1.0" "d.inline 1.0" \
            "put.done 1.0" \
            "get 2.0" "peek.send 2.0" "d.peek 2.0" "d.peekrep 2.0" "peek.got 2.0" "get.done 2.0"; do
    ev=${want% *} n=${want#* }
    awk -v ev="$ev" -v n="$n" '$1 == ev && $2 == n {f = 1} END {exit !f}' "$T/out" ||
        fail "event $ev not seen $n times per sample"
done
grep -q "^[0-9]* samples" "$T/out" || fail "no sample count"
# the bytes' path, in order of the medians: published to the directory,
# which answers the receivers; and the store's confirmation beside it
first() { awk -v ev="$1" '$1 == ev {print $3}' "$T/out"; }
last() { awk -v ev="$1" '$1 == ev {print $4}' "$T/out"; }
ordered() { /usr/bin/python3 -c "import sys; v = [float(x) for x in sys.argv[1:]]; sys.exit(v != sorted(v))" "$@"; }
ordered "$(first put)" "$(first publish)" "$(first d.publish)" "$(first d.peekrep)" \
        "$(last peek.got)" || fail "events out of order"
ordered "$(first put)" "$(first s.put)" "$(first s.inline)" "$(first d.inline)" \
        "$(first put.done)" || fail "the store's path is out of order"
ordered "$(last get)" "$(first put)" || fail "the receivers did not ask before the put"

echo "test_trace: ok ($pids processes traced)"
cat "$T/out"
