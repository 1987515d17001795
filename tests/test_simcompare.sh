#!/bin/sh
# test_simcompare.sh HPSIM - `hpsim compare` (bench/sim/simcompare.c) on a
# small session file: the machine row's floor is printed above the tables,
# a coll row and a chain row are each judged in their own table, and a
# machine row without a positive floor is refused as a bad row, and a calib
# row's digest and combine costs are the ones used (a reduce row gives the
# same figures twice, and other figures with other costs), and a coll row's
# optional tenth field (the VM's kdamond CPU per repetition) is printed
# beside it, "-" when unknown.
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
grep -q "not a coll, fault, chain, machine or calib row" "$T/out" || fail "no reason for the bad row"

red='coll\treduce\t67108864\t1gbit\tsha256\t0.88\t0.87\t0.89\t3.2\ncoll\treduce\t67108864\t1gbit\toff\t0.58\t0.57\t0.59\t1.7\n'
printf "calib\t6.0e-10\t2.0e-11\n$red" > "$T/c1.tsv"
printf "calib\t3.0e-09\t2.0e-11\n$red" > "$T/c2.tsv"
"$HPSIM" compare "$T/c1.tsv" > "$T/o1" 2>&1 || [ $? -le 1 ] || fail "exit on a calib file"
"$HPSIM" compare "$T/c1.tsv" > "$T/o1b" 2>&1 || true
"$HPSIM" compare "$T/c2.tsv" > "$T/o2" 2>&1 || true
grep -q "digests 0.600 ns/B and combine 0.020 ns/B, as recorded" "$T/o1" || { cat "$T/o1" >&2; fail "the calib row's costs are not the ones used"; }
cmp -s "$T/o1" "$T/o1b" || fail "the same calib file compared twice gave different figures"
a=$(grep "^| reduce 64 MiB, 1gbit, sha256" "$T/o1"); b=$(grep "^| reduce 64 MiB, 1gbit, sha256" "$T/o2")
[ -n "$a" ] && [ "$a" != "$b" ] || fail "a five times dearer digest did not change the sha256 reduce row"
printf 'calib\t0\t1\n' > "$T/bad2.tsv"
rc=0
"$HPSIM" compare "$T/bad2.tsv" > "$T/out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "a calib row with no cost gave exit $rc, want 2"
printf 'coll\tbcast\t67108864\t1gbit\toff\t0.57\t0.56\t0.58\t0.9\t140\ncoll\tbcast\t1048576\t1gbit\toff\t0.0147\t0.0142\t0.0158\t2.6\t-\n' > "$T/bg.tsv"
"$HPSIM" compare "$T/bg.tsv" > "$T/out" 2>&1 || [ $? -le 1 ] || fail "exit on a file with kdamond fields"
grep -q "^| bcast 64 MiB, 1gbit, off | 0.5700 .* | 140 |\$" "$T/out" || fail "the kdamond figure is not beside its row"
grep -q "^| bcast 1 MiB, 1gbit, off | 0.0147 .* | - |\$" "$T/out" || fail "an unknown kdamond figure is not -"
echo "test_simcompare: ok"
