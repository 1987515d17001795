#!/bin/bash
# ab_coll.sh - two builds of hoplite side by side in one emulated cluster:
# the same bench_coll runs, alternating between the builds round by round,
# so that a change (a refactoring, a tuning) is judged against the build
# before it on the same hosts, minutes apart.
#
#   bench/ab_coll.sh --a DIR --b DIR [--op bcast] [--hosts 8] [--rate 1gbit]
#                    [--sizes 1K,64M,256M] [--reps 5] [--rounds 3]
#                    [--modes "--procs;;--procs --put-timed"] [--out FILE]
#
# --a and --b are build directories (each with bench/bench_coll and the
# servers it starts from that build). Each round runs every mode (';'-separated
# bench_coll arguments; an empty one is threads) with A, then with B; the
# next round starts with B, so neither build always goes first. Rows go to
# FILE (default bench/results/ab-OP-RATE.tsv) with impl "a..." or "b..."
# (bench_coll's row format), and the medians over the rounds are printed
# per mode and size with B/A. Needs root; tears the cluster down on exit.
set -u
set -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export HPL_NS_PREFIX=${HPL_NS_PREFIX:-hplab}
A= B= OP=bcast HOSTS=8 RATE=1gbit SIZES=1K,64M,256M REPS=5 ROUNDS=3 OUT=
MODES="--procs;;--procs --put-timed"
while [ $# -gt 0 ]; do
    case "$1" in
        --a) A=$2; shift 2 ;;
        --b) B=$2; shift 2 ;;
        --op) OP=$2; shift 2 ;;
        --hosts) HOSTS=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --sizes) SIZES=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "ab_coll.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ -n "$A" ] && [ -n "$B" ] || { echo "ab_coll.sh: --a and --b are required" >&2; exit 2; }
for d in "$A" "$B"; do
    [ -x "$d/bench/bench_coll" ] || { echo "ab_coll.sh: no $d/bench/bench_coll" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "ab_coll.sh: needs root (network namespaces)" >&2; exit 1; }
OUT=${OUT:-$HERE/results/ab-$OP-$RATE.tsv}
mkdir -p "$(dirname "$OUT")"
echo "# ab $(date -u +%FT%TZ) op=$OP hosts=$HOSTS rate=$RATE sizes=$SIZES reps=$REPS a=$A b=$B" >> "$OUT"

cleanup() { "$HERE/cluster.sh" down --kill >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$HERE/cluster.sh" up "$HOSTS" "$RATE" || exit 1
addrs=$("$HERE/cluster.sh" addrs)
IFS=';' read -r -a modes <<< "$MODES"
[ "${MODES: -1}" = ";" ] && modes+=("")

run() { # build label mode
    # shellcheck disable=SC2086
    "$1/bench/bench_coll" --op "$OP" --sizes "$SIZES" --hosts "$HOSTS" --reps "$REPS" \
        --netns "$HPL_NS_PREFIX" --addrs "$addrs" --rate "$RATE" --no-header --impl "$2" $3 \
        --store-args "${HPL_STORE_ARGS---prefault}" --out "$OUT" >/dev/null ||
        echo "ab_coll.sh: $2 run ($3) failed" >&2
}
for ((r = 0; r < ROUNDS; r++)); do
    order=(a b)
    ((r % 2)) && order=(b a)
    for mode in "${modes[@]}"; do
        for x in "${order[@]}"; do
            if [ "$x" = a ]; then run "$A" a "$mode"; else run "$B" b "$mode"; fi
        done
    done
    echo "ab_coll.sh: round $((r + 1)) of $ROUNDS done" >&2
done

# medians over the rounds of this invocation, per mode and size
start=$(grep -n "^# ab " "$OUT" | tail -1 | cut -d: -f1)
tail -n +"$start" "$OUT" | awk -F'\t' '
    /^#/ { next }
    { key = $2 "\t" substr($4, 2); id = $4 "\t" $2; v[id, ++n[id]] = $5; keys[key] = 1 }
    function median(id, k,   i, j, t, a) {
        for (i = 1; i <= k; i++) a[i] = v[id, i]
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
        printf "%-12s %-22s %12s %12s %8s\n", "size", "mode", "a median s", "b median s", "b/a"
        for (key in keys) {
            split(key, p, "\t"); ka = "a" p[2] "\t" p[1]; kb = "b" p[2] "\t" p[1]
            if (!(ka in n) || !(kb in n)) continue
            ma = median(ka, n[ka]); mb = median(kb, n[kb])
            printf "%-12s %-22s %12.6f %12.6f %8.3f\n", p[1], (p[2] == "" ? "threads" : p[2]), ma, mb, mb / ma
        }
    }' | sort -k1,1n -k2
