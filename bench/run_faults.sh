#!/bin/bash
# run_faults.sh - failure-injection runs on the emulated cluster.
#
#   bench/run_faults.sh [--hosts 8] [--rate 1gbit] [--runs 200] [--sizes 16M,64M,256M]
#                       [--seed S] [--out-dir bench/results]
#                       [--faults kill,cut,slow,pause,dirkill,srckill,corrupt,dirhost]
#                       [--no-scenarios] [--lease-ms MS (dirhost's standby directories; 500:
#                       their etcd elects in 500 ms, so a half-second lease is safe there)]
#
# Brings up HOSTS emulated hosts (bench/cluster.sh, prefix hplf), then runs
#   1. bench_faults: RUNS randomized broadcasts and reduces, each with one
#      fault (--faults kill,cut,slow,pause,dirkill,srckill,corrupt): one (or two)
#      stores killed with SIGKILL at a random moment, a host cut off (switch
#      port down) for 0.5-3 s and then back, a host slowed to a tenth of
#      RATE, a store stopped (SIGSTOP) for 1-8 s, the directory killed and
#      restarted 1 s later, or (broadcasts) the source's store killed as
#      soon as the first receiver holds a complete copy, or a store that
#      flips bytes in what it sends, or (dirhost) the leading one of two
#      standby directories (etcd in the switch namespace) has its host cut
#      off for good: healed only once the survivors are done and a standby
#      leads. dirhost runs in a bench_faults of its own (standby
#      directories; the other kinds keep one directory), with its share of
#      RUNS (RUNS / number of kinds, at least 1). Its summary gives,
#      per fault kind and size, the survivors' time over no-fault (median,
#      p90) and the runs over the target 1.3 x no-fault + 0.5 s;
#   2. the issue's two scenarios: a 256 MiB broadcast to HOSTS-1 receivers
#      with a mid-chain receiver killed at 50%, and a reduce of HOSTS-1 of
#      HOSTS sources with a source's node killed mid-reduce (at 40%)
#      (not with --no-scenarios).
# Output: OUT_DIR/faults-RATE.txt (the full log) and faults-RATE.tsv (the
# columns: top of bench/bench_faults.c).
# Needs root and a build (scripts/bootstrap.sh). Tears the cluster down on
# exit, also after a failure or Ctrl-C.
set -u
set -o pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${HPL_BUILD_DIR:-$TOP/build}
export HPL_NS_PREFIX=${HPL_NS_PREFIX:-hplf}
HOSTS=8 RATE=1gbit RUNS=200 SIZES=16M,64M,256M SEED= LEASE_MS=500 OUTDIR=$TOP/bench/results
FAULTS=kill,cut,slow,pause,dirkill,srckill,corrupt,dirhost SCENARIOS=1
while [ $# -gt 0 ]; do
    case "$1" in
        --hosts) HOSTS=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --sizes) SIZES=$2; shift 2 ;;
        --seed) SEED=$2; shift 2 ;;
        --out-dir) OUTDIR=$2; shift 2 ;;
        --faults) FAULTS=$2; shift 2 ;;
        --lease-ms) LEASE_MS=$2; shift 2 ;;
        --no-scenarios) SCENARIOS=0; shift ;;
        -h|--help) sed -n '2,32p' "$0"; exit 0 ;;
        *) echo "run_faults.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "run_faults.sh: needs root (network namespaces)" >&2; exit 1; }
[ -x "$BUILD/bench/bench_faults" ] || { echo "run_faults.sh: build first (scripts/bootstrap.sh)" >&2; exit 1; }
mkdir -p "$OUTDIR"
LOG=$OUTDIR/faults-$RATE.txt
TSV=$OUTDIR/faults-$RATE.tsv
cleanup() { "$HERE/cluster.sh" down --kill >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 130' INT TERM
"$HERE/cluster.sh" up "$HOSTS" "$RATE" || exit 1
addrs=$("$HERE/cluster.sh" addrs)
common=(--hosts "$HOSTS" --netns "$HPL_NS_PREFIX" --addrs "$addrs" --rate "$RATE"
        --store-args "${HPL_STORE_ARGS---prefault}" --out "$TSV")
# dirhost apart: it needs the standby directories
others=$(echo ",$FAULTS," | sed 's/,dirhost,/,/g; s/^,//; s/,$//')
nkinds=$(echo "$FAULTS" | tr ',' '\n' | grep -c .)
ha_runs=0
if echo ",$FAULTS," | grep -q ',dirhost,'; then
    ha_runs=$(( RUNS / nkinds )); [ $ha_runs -ge 1 ] || ha_runs=1
fi
status=0
{
    echo "# $(date -u +%FT%TZ) hosts=$HOSTS rate=$RATE runs=$RUNS sizes=$SIZES"
    if [ -n "$others" ]; then
        "$BUILD/bench/bench_faults" "${common[@]}" --runs $(( RUNS - ha_runs )) --sizes "$SIZES" \
            --faults "$others" --cluster-sh "$HERE/cluster.sh" ${SEED:+--seed "$SEED"} || status=1
    fi
    if [ "$ha_runs" -gt 0 ]; then
        "$BUILD/bench/bench_faults" "${common[@]}" --runs "$ha_runs" --sizes "$SIZES" \
            --faults dirhost --cluster-sh "$HERE/cluster.sh" ${SEED:+--seed "$SEED"} \
            ${LEASE_MS:+--lease-ms "$LEASE_MS"} || status=1
    fi
    if [ "$SCENARIOS" = 1 ]; then
        "$BUILD/bench/bench_faults" "${common[@]}" --scenario bcast-midchain --size 256M || status=1
        "$BUILD/bench/bench_faults" "${common[@]}" --scenario reduce-subset --size 256M || status=1
    fi
} 2>&1 | tee -a "$LOG"
echo "results: $LOG $TSV" >&2
exit $status
