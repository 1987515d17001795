#!/bin/sh
# test_shuffle_trace.sh BENCH_COLL SHUFFLE_TRACE_PY - a traced shuffle of
# 64 KiB partitions on 3 nodes (copies pulled from their makers), summarised
# per receiver by bench/shuffle_trace.py: every partition of the repetition
# shows up once under its receiver, with its pull's events in the order they
# must happen.
set -eu
BENCH=$1
TOOL=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "test_shuffle_trace: FAIL: $*" >&2; [ -f "$T/out" ] && cat "$T/out" >&2; exit 1; }

HOPLITE_TRACE=$T/trace "$BENCH" --op shuffle --sizes 64K --hosts 3 --reps 2 --procs \
    > /dev/null 2> "$T/bench.err" || { cat "$T/bench.err" >&2; fail "bench_coll failed"; }
[ -s "$T/trace" ] || fail "no trace written"
/usr/bin/python3 "$TOOL" "$T/trace" --rep 1 > "$T/out" || fail "shuffle_trace.py failed"
grep -q "^repetition 1: 6 partitions" "$T/out" || fail "repetition 1 does not list 6 partitions"
# the per-receiver rows: "to from s.announce d.locadd s.ask d.acquire s.answer s.pullq
# s.pullgo s.serve s.pullrep s.pulled"
sed -n '/per receiver/,$p' "$T/out" | awk 'NR > 2' > "$T/rows"
[ "$(wc -l < "$T/rows")" -eq 6 ] || fail "want 6 partition rows"
for to in 0 1 2; do
    n=$(awk -v to="$to" '$1 == to' "$T/rows" | wc -l)
    [ "$n" -eq 2 ] || fail "receiver $to has $n partitions, want 2"
    awk -v to="$to" '$1 == to && $2 == to {exit 1}' "$T/rows" || fail "receiver $to lists its own partition"
done
# a pull starts, reaches its sender, is answered and ends, in that order
awk '{ if ($9 == "-" || $10 == "-" || $11 == "-" || $12 == "-") exit 1;
       if (!($9 <= $10 && $10 <= $11 && $11 <= $12)) exit 1 }' "$T/rows" ||
    fail "a pull's events are missing or out of order"
# the maker's store registered the copy before the directory had it, and
# before anyone pulled it; an ACQUIRE, where the store sent one, was
# answered after it arrived and before the pull began
awk '{ if ($3 == "-" || $4 == "-") exit 1;
       if (!($3 <= $4 && $4 <= $9)) exit 1;
       if ($5 != "-" && !($5 <= $6 && $6 <= $7 && $7 <= $9)) exit 1 }' "$T/rows" ||
    fail "a copy's registration or its ACQUIRE is missing or out of order"
echo "test_shuffle_trace: ok"
cat "$T/out"
