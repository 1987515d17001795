#!/bin/bash
# ab_coll.sh - variants of hoplite side by side in one emulated cluster:
# the same bench_coll runs, alternating between the variants round by round,
# so that a change (a refactoring, a tuning, an option such as --integrity)
# is judged against its reference on the same hosts, minutes apart.
#
#   bench/ab_coll.sh --a DIR --b DIR [--op bcast] [--hosts 8] [--rate 1gbit]
#                    [--sizes 1K,64M,256M] [--reps 5] [--rounds 3]
#                    [--modes "--procs;;--procs --put-timed"] [--out FILE]
#   bench/ab_coll.sh --variant 'NAME|BUILD|STORE ARGS|DIR ARGS' ... [same options]
#
# --a and --b are build directories (each with bench/bench_coll and the
# servers it starts from that build): two variants named a and b with the
# default store arguments ($HPL_STORE_ARGS, else --prefault). Each --variant
# adds one: a name (letters, digits, '-'), a build directory, the stores'
# arguments and the directory's (both may be empty). The first variant is
# the reference. Each round runs every mode (';'-separated bench_coll
# arguments; an empty one is threads) with every variant; the order rotates
# from round to round, so no variant always goes first. Rows go to FILE
# (default bench/results/ab-OP-RATE.tsv) with impl "NAME..." (bench_coll's
# row format), and the medians over the rounds are printed per mode and
# size, with each variant's time over the reference's and its CPU per GiB
# (bench_coll's stderr). Needs root; tears the cluster down on exit.
set -u
set -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
export HPL_NS_PREFIX=${HPL_NS_PREFIX:-hplab}
A= B= OP=bcast HOSTS=8 RATE=1gbit SIZES=1K,64M,256M REPS=5 ROUNDS=3 OUT=
MODES="--procs;;--procs --put-timed"
VARIANTS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --a) A=$2; shift 2 ;;
        --b) B=$2; shift 2 ;;
        --variant) VARIANTS+=("$2"); shift 2 ;;
        --op) OP=$2; shift 2 ;;
        --hosts) HOSTS=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --sizes) SIZES=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --modes) MODES=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) echo "ab_coll.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
DEFARGS=${HPL_STORE_ARGS---prefault}
[ -n "$A" ] && VARIANTS=("a|$A|$DEFARGS|" "${VARIANTS[@]}")
[ -n "$B" ] && VARIANTS+=("b|$B|$DEFARGS|")
[ "${#VARIANTS[@]}" -ge 2 ] || { echo "ab_coll.sh: give --a and --b, or two --variant" >&2; exit 2; }
NAMES=() BUILDS=() SARGS=() DARGS=()
for v in "${VARIANTS[@]}"; do
    IFS='|' read -r name build sargs dargs <<< "$v"
    [[ "$name" =~ ^[A-Za-z0-9-]+$ ]] || { echo "ab_coll.sh: bad variant name in '$v'" >&2; exit 2; }
    [ -x "$build/bench/bench_coll" ] || { echo "ab_coll.sh: no $build/bench/bench_coll" >&2; exit 1; }
    NAMES+=("$name") BUILDS+=("$build") SARGS+=("$sargs") DARGS+=("$dargs")
done
[ "$(id -u)" = 0 ] || { echo "ab_coll.sh: needs root (network namespaces)" >&2; exit 1; }
OUT=${OUT:-$HERE/results/ab-$OP-$RATE.tsv}
mkdir -p "$(dirname "$OUT")"
echo "# ab $(date -u +%FT%TZ) op=$OP hosts=$HOSTS rate=$RATE sizes=$SIZES reps=$REPS variants=${VARIANTS[*]}" >> "$OUT"
CPU=$(mktemp)

cleanup() { "$HERE/cluster.sh" down --kill >/dev/null 2>&1; rm -f "$CPU"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$HERE/cluster.sh" up "$HOSTS" "$RATE" || exit 1
addrs=$("$HERE/cluster.sh" addrs)
IFS=';' read -r -a modes <<< "$MODES"
[ "${MODES: -1}" = ";" ] && modes+=("")

run() { # variant-index mode
    local i=$1
    # shellcheck disable=SC2086
    "${BUILDS[$i]}/bench/bench_coll" --op "$OP" --sizes "$SIZES" --hosts "$HOSTS" --reps "$REPS" \
        --netns "$HPL_NS_PREFIX" --addrs "$addrs" --rate "$RATE" --no-header \
        --impl "${NAMES[$i]}" $2 --store-args "${SARGS[$i]}" --dir-args "${DARGS[$i]}" \
        --out "$OUT" 2> >(sed -n "s/^bench_coll: [a-z-]* \([0-9]*\) B .*CPU \([0-9.]*\) s per GiB moved.*/${NAMES[$i]}\t$2\t\1\t\2/p" >> "$CPU") \
        >/dev/null || echo "ab_coll.sh: ${NAMES[$i]} run ($2) failed" >&2
}
n=${#NAMES[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for mode in "${modes[@]}"; do
        for ((k = 0; k < n; k++)); do run $(((k + r) % n)) "$mode"; done
    done
    echo "ab_coll.sh: round $((r + 1)) of $ROUNDS done" >&2
done

# medians over the rounds of this invocation, per mode and size, each
# variant against the first
start=$(grep -n "^# ab " "$OUT" | tail -1 | cut -d: -f1)
tail -n +"$start" "$OUT" | awk -F'\t' -v names="${NAMES[*]}" '
    BEGIN { nv = split(names, vn, " ") }
    /^#/ { next }
    {
        for (i = 1; i <= nv; i++)
            if (index($4, vn[i]) == 1 && (length($4) == length(vn[i]) || substr($4, length(vn[i]) + 1, 1) == "+")) break
        if (i > nv) next
        mode = substr($4, length(vn[i]) + 1); key = $2 "\t" mode; id = i "\t" key
        k = ++n[id]; v[id, k] = $5; rb[id, k] = $8; keys[key] = 1
    }
    function median(id, k,   i, j, t, a) {
        for (i = 1; i <= k; i++) a[i] = v[id, i]
        return med(a, k)
    }
    function median_rb(id, k,   i, a) {
        for (i = 1; i <= k; i++) a[i] = rb[id, i] + 0
        return med(a, k)
    }
    function med(a, k,   i, j, t) {
        for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
        return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
    }
    END {
        printf "%-12s %-22s %-12s %12s %8s %8s\n", "size", "mode", "variant", "median s", "/ref", "/bound"
        for (key in keys) {
            split(key, p, "\t"); ref = "1\t" key
            if (!(ref in n)) continue
            m0 = median(ref, n[ref])
            for (i = 1; i <= nv; i++) {
                id = i "\t" key
                if (!(id in n)) continue
                m = median(id, n[id])
                printf "%-12s %-22s %-12s %12.6f %8.3f %8.3f\n", p[1], (p[2] == "" ? "threads" : p[2]), vn[i], m, m / m0, median_rb(id, n[id])
            }
        }
    }' | sort -k1,1n -k2,2 -s
if [ -s "$CPU" ]; then
    echo "CPU s per GiB moved (bench_coll's; median over the rounds): size, mode, variant"
    awk -F'\t' '{ k = $3 "\t" ($2 == "" ? "threads" : $2) "\t" $1; v[k, ++n[k]] = $4 }
        END { for (k in n) { m = n[k]; for (i = 1; i <= m; i++) a[i] = v[k, i]
              for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
              split(k, p, "\t"); printf "%-12s %-22s %-12s %8.3f\n", p[1], p[2], p[3], (m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2) } }' "$CPU" | sort -k1,1n -k2,2 -s
fi
