#!/bin/bash
# run_coll.sh - one collective benchmark, hoplite side by side with MPICH,
# Open MPI (default and pipelined) and Gloo, in the same emulated cluster.
#
#   bench/run_coll.sh [--op bcast|reduce|allreduce|shuffle] [--hosts "4 8"] [--rate 1gbit]
#                     [--sizes 1K,64K,1M,16M,64M,256M] [--reps 5] [--launches 2]
#                     [--impls mpich,openmpi,openmpi-pipe,gloo] [--out-dir bench/results]
#                     [--extra-mode "ARGS"]... [--pin]
#
# For each host count: bench/cluster.sh up N RATE, a plain TCP point-to-point
# and chain check (is the machine able to carry N hosts at RATE?), hoplite
# (build/bench/bench_coll: threads, --procs, for bcast --procs --put-timed, for shuffle
# --procs --overlap, for allreduce
# --procs with the directory's --no-rings, and when shaped --procs --pace: the stores
# told the links' rate, so their streams leave paced and copies come in with bounded
# receive windows; for shuffle also --procs --pace --overlap), for bcast the request/reply latency floor of
# small objects (build/bench/bench_reqrep), for shuffle the floor of a pulled shuffle
# through a directory (build/bench/bench_pullfloor), then the MPI/Gloo baselines
# (for shuffle: MPI_Alltoall in MPICH and Open MPI; baselines.sh skips the
# others), then down. Every --extra-mode adds one more hoplite run with those bench_coll
# arguments, for an A/B in the same cluster, e.g.
#   --extra-mode "--procs --put-timed --impl hoplite-nofanout --dir-args --no-fanout"
# --pin binds every rank of every implementation to one CPU, rank i (and
# hoplite's worker i) on CPU i mod the CPUs, as launchers bind ranks on real
# hosts (HPL_BENCH_PIN=1: bench_coll, bench_reqrep, mpi_coll, gloo_coll);
# rows get "+pin". hoplite's stores and directory are not bound.
# Needs root and a build (scripts/bootstrap.sh); installs the
# MPI/Gloo packages if missing.
#
# Writes (appending to) OUT_DIR/<op>-<rate>.tsv   rows: op size hosts impl
#        median_s min_s max_s ratio_to_bound cpu_pct
#        OUT_DIR/<op>-<rate>-source.tsv           hoplite bytes sent by the source
#        OUT_DIR/p2p-<rate>.tsv                   point-to-point check
# and plots OUT_DIR/<op>-<N>h-<rate>.png. The cluster is torn down on exit,
# also after a failure or Ctrl-C.
#
# hoplite's stores run with --prefault (HPL_STORE_ARGS overrides): their pools
# are populated when they start, as in a long-running store, so the first
# repetitions do not pay for the kernel allocating fresh pages.
set -u
set -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${HPL_BUILD_DIR:-$TOP/build}
export HPL_NS_PREFIX=${HPL_NS_PREFIX:-hplb}

OP=bcast HOSTS="4 8" RATE=1gbit SIZES=1K,64K,1M,16M,64M,256M REPS=5 LAUNCHES=2
IMPLS=mpich,openmpi,openmpi-pipe,gloo OUTDIR=$TOP/bench/results
EXTRA_MODES=()
while [ $# -gt 0 ]; do
    case "$1" in
        --op) OP=$2; shift 2 ;;
        --hosts) HOSTS=$2; shift 2 ;;
        --rate) RATE=$2; shift 2 ;;
        --sizes) SIZES=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --launches) LAUNCHES=$2; shift 2 ;;
        --impls) IMPLS=$2; shift 2 ;;
        --out-dir) OUTDIR=$2; shift 2 ;;
        --extra-mode) EXTRA_MODES+=("$2"); shift 2 ;;
        --pin) export HPL_BENCH_PIN=1; shift ;;
        -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
        *) echo "run_coll.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "run_coll.sh: needs root (network namespaces)" >&2; exit 1; }
[ -x "$BUILD/bench/bench_coll" ] || { echo "run_coll.sh: build first (scripts/bootstrap.sh)" >&2; exit 1; }
"$TOP/scripts/bootstrap.sh" --extra "mpich libmpich-dev openmpi-bin libopenmpi-dev libgloo-dev g++ python3-matplotlib" >&2 || exit 1

mkdir -p "$OUTDIR"
TSV=$OUTDIR/$OP-$RATE.tsv
SRC=$OUTDIR/$OP-$RATE-source.tsv
P2P=$OUTDIR/p2p-$RATE.tsv
[ -s "$TSV" ] || printf 'op\tsize\thosts\timpl\tmedian_s\tmin_s\tmax_s\tratio_to_bound\tcpu_pct\n' > "$TSV"
[ -s "$SRC" ] || printf 'op\tsize\thosts\timpl\tsource_bytes_sent\tcopies\n' > "$SRC"
echo "# run $(date -u +%FT%TZ) op=$OP rate=$RATE hosts=$HOSTS sizes=$SIZES reps=$REPS" >> "$TSV"

cleanup() { "$HERE/cluster.sh" down --kill >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 130' INT TERM

for N in $HOSTS; do
    echo "== $OP on $N hosts at $RATE" >&2
    "$HERE/cluster.sh" up "$N" "$RATE" || exit 1
    "$HERE/p2p_check.sh" --bytes 256M >> "$P2P" || echo "run_coll.sh: p2p check failed" >&2
    addrs=$("$HERE/cluster.sh" addrs)
    # hoplite three ways: participants as threads of one process, as one
    # process per host (how task workers run), and for bcast also with the
    # put inside the timed region (receivers already waiting)
    modes=("" "--procs")
    [ "$OP" = bcast ] && modes+=("--procs --put-timed")
    # shuffle with the gets sent before the puts (the async API)
    [ "$OP" = shuffle ] && modes+=("--procs --overlap")
    # allreduce without rings (reduce, then broadcast), for the comparison
    [ "$OP" = allreduce ] && modes+=("--procs --impl hoplite-noring --dir-args --no-rings")
    # the stores told their link's rate (--link-rate): streams leave paced
    [ "$RATE" != none ] && modes+=("--procs --pace")
    # ... which also bounds copies' receive windows (--pull-window): for the
    # shuffle with the gets sent first too
    [ "$RATE" != none ] && [ "$OP" = shuffle ] && modes+=("--procs --pace --overlap")
    modes+=("${EXTRA_MODES[@]}")
    for mode in "${modes[@]}"; do
        # shellcheck disable=SC2086
        "$BUILD/bench/bench_coll" --op "$OP" --sizes "$SIZES" --hosts "$N" --reps "$REPS" \
            --netns "$HPL_NS_PREFIX" --addrs "$addrs" --rate "$RATE" --no-header $mode \
            --store-args "${HPL_STORE_ARGS---prefault}" \
            --out "$TSV" --extra-out "$SRC" || echo "run_coll.sh: hoplite run ($mode) failed" >&2
    done
    if [ "$OP" = bcast ]; then
        # the floor of any request/reply design for small objects (<= 64 KiB)
        # (clients as threads, then as processes of their own)
        for rr in "" --procs; do
            # shellcheck disable=SC2086
            "$BUILD/bench/bench_reqrep" --netns "$HPL_NS_PREFIX" --addrs "$addrs" --hosts "$N" \
                --sizes "$SIZES" --reps 30 --rate "$RATE" --out "$TSV" $rr >/dev/null ||
                echo "run_coll.sh: request/reply floor ($rr) failed" >&2
        done
    fi
    if [ "$OP" = shuffle ]; then
        # the floor of a receiver-driven shuffle through a directory (plain
        # sockets), then with a worker process beside each server, then with
        # that and SHA-256 at both ends (what hoplite's design adds)
        for pf in "" --worker-proc "--worker-proc --sha256"; do
            # shellcheck disable=SC2086
            "$BUILD/bench/bench_pullfloor" --netns "$HPL_NS_PREFIX" --addrs "$addrs" --hosts "$N" \
                --sizes "$SIZES" --reps "$REPS" --rate "$RATE" --out "$TSV" $pf >/dev/null ||
                echo "run_coll.sh: pull floor ($pf) failed" >&2
        done
    fi
    "$HERE/baselines.sh" --ops "$OP" --sizes "$SIZES" --reps "$REPS" --launches "$LAUNCHES" \
        --impls "$IMPLS" --no-header --out "$TSV" >/dev/null || echo "run_coll.sh: baselines failed" >&2
    "$HERE/cluster.sh" down --kill || exit 1
done
/usr/bin/python3 "$HERE/plot.py" -o "$OUTDIR" "$TSV"
echo "results: $TSV $SRC $P2P and $OUTDIR/$OP-*h-$RATE.png" >&2
