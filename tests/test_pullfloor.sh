#!/bin/sh
# test_pullfloor.sh - bench_pullfloor (the shuffle's floor, bench/) on 3
# emulated hosts: a run at every pull limit, and with a worker process per
# host (with and without SHA-256), gives one row per size and exits 0; with
# HPL_PULLFLOOR_MIXUP set host 0 hands each peer the next peer's bytes, and
# the run must fail naming a receiver of host 0's (with digests too).
# Usage: test_pullfloor.sh BENCH_PULLFLOOR CLUSTER_SH. Needs root and ip
# netns (exit 77: skipped otherwise). The namespaces it makes are removed
# on exit.
bin=$1
cl=$2
[ "$(id -u)" = 0 ] && ip netns list >/dev/null 2>&1 || { echo "skipped: needs root and ip netns"; exit 77; }
export HPL_NS_PREFIX=hplpf
trap '"$cl" down --kill >/dev/null 2>&1' EXIT
"$cl" up 3 1gbit >/dev/null 2>&1 || { echo "skipped: cannot make emulated hosts"; exit 77; }
addrs=$("$cl" addrs)
# each pull limit, then a worker process beside each server (with and
# without digests): OPTIONS=IMPL (the row's name) per run
for run in "--inflight 1=tcp-pullfloor+inflight1" "--inflight 7=tcp-pullfloor" \
    "--worker-proc=tcp-pullfloor+worker" "--worker-proc --sha256=tcp-pullfloor+worker+sha256"; do
    opts=${run%%=*}
    impl=${run#*=}
    # shellcheck disable=SC2086
    out=$("$bin" --netns hplpf --addrs "$addrs" --hosts 3 --sizes 4K,256K --reps 2 $opts 2>&1)
    st=$?
    echo "$out"
    [ "$st" -eq 0 ] || { echo "FAIL: exit status $st with $opts"; exit 1; }
    for size in 4096 262144; do
        echo "$out" | grep -q "^shuffle	$size	3	$impl	" ||
            { echo "FAIL: no $impl row for $size"; exit 1; }
    done
done
# mixed-up bytes: caught after the round, and by the digests within it
for opts in "" "--worker-proc --sha256"; do
    # shellcheck disable=SC2086
    out=$(HPL_PULLFLOOR_MIXUP=1 "$bin" --netns hplpf --addrs "$addrs" --hosts 3 --sizes 4K --reps 1 $opts 2>&1)
    st=$?
    echo "$out"
    [ "$st" -ne 0 ] || { echo "FAIL: exit 0 with mixed-up partitions ($opts)"; exit 1; }
    echo "$out" | grep -q "host [12] got wrong bytes from host 0" ||
        { echo "FAIL: the wrong source is not named ($opts)"; exit 1; }
done
echo "ok"
