#!/bin/sh
# test_simcompare.sh HPSIM - `hpsim compare` (bench/sim/simcompare.c) on a
# small session file: the machine row's floor is printed above the tables,
# a coll row and a chain row are each judged in their own table, and a
# machine row without a positive floor is refused as a bad row.
set -eu
HPSIM=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "test_simcompare: FAIL: $*" >&2; [ -f "$T/out" ] && cat "$T/out" >&2; exit 1; }

printf 'machine\t35.0\nchain\t1048576\t1gbit\t0.0147\t0.0135\t0.0151\ncoll\tbcast\t1048576\t1gbit\toff\t0.0147\t0.0142\t0.0158\t2.633\n' > "$T/s.tsv"
rc=0
"$HPSIM" compare "$T/s.tsv" > "$T/out" 2>&1 || rc=$?
[ "$rc" -le 1 ] || fail "exit $rc on a good file"
head -1 "$T/out" | grep -q "floor of 35.0 us summed" || fail "the machine's floor is not the first line"
grep -q "^| bcast 1 MiB, 1gbit, off | 0.0147" "$T/out" || fail "no row for the broadcast"
grep -q "^| chain 1 MiB, 1gbit | 0.0147" "$T/out" || fail "no row for the chain"
grep -q "rows and 0 fault runs" "$T/out" || fail "no summary line"

printf 'machine\t-1\n' > "$T/bad.tsv"
rc=0
"$HPSIM" compare "$T/bad.tsv" > "$T/out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a machine row without a floor gave exit $rc, want 2"
grep -q "not a coll, fault, chain or machine row" "$T/out" || fail "no reason for the bad row"
echo "test_simcompare: ok"
