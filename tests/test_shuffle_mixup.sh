#!/bin/sh
# test_shuffle_mixup.sh - bench_coll's shuffle check catches a mix-up:
# with HPL_BENCH_SHUFFLE_MIXUP set, node 0 gives each peer the bytes meant
# for the next one; every size must then fail (a FAIL row, exit status 1)
# and the receiver must name the partition. Usage: test_shuffle_mixup.sh BENCH_COLL
bc=$1
out=$(HPL_BENCH_SHUFFLE_MIXUP=1 "$bc" --op shuffle --sizes 4K,1M --hosts 3 --reps 1 --procs 2>&1)
st=$?
echo "$out"
[ "$st" -ne 0 ] || { echo "FAIL: bench_coll exited 0 on mixed-up partitions"; exit 1; }
for size in 4096 1048576; do
    echo "$out" | grep -q "^shuffle	$size	3	hoplite+procs	FAIL" ||
        { echo "FAIL: no FAIL row for $size"; exit 1; }
done
echo "$out" | grep -q "node 1: partition shuf/-1/0/1 has the wrong bytes" ||
    { echo "FAIL: the wrong partition is not named"; exit 1; }
# without the mix-up the same run passes
"$bc" --op shuffle --sizes 4K,1M --hosts 3 --reps 1 --procs >/dev/null 2>&1 ||
    { echo "FAIL: the same run without the mix-up failed"; exit 1; }
echo "ok"
