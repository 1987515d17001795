#!/bin/bash
# baselines.sh - run the comparison collectives (MPICH, Open MPI, Open MPI
# with a forced segmented pipeline, Gloo) on the emulated cluster and print
# one TSV row per configuration.
#
#   baselines.sh [--up N RATE] [--ops bcast,reduce,allreduce,shuffle] [--sizes 1K,1M,64M]
#                [--hosts 4,8] [--reps 3] [--impls mpich,openmpi,openmpi-pipe,gloo]
#                [--launches L] [--out FILE] [--timeout SEC] [--lead-ms MS] [--no-header]
#
# The cluster is the one of HPL_NS_PREFIX (default "hpl"), brought up by the
# caller with `cluster.sh up N RATE`, or by this script with --up (and taken
# down at the end).  --hosts defaults to the cluster's N; a run on K hosts
# uses hosts 0..K-1.  Sizes take binary suffixes K, M, G.  Each
# configuration is one launch (one warm-up + REPS timed repetitions); with
# --launches L it is launched L times and the samples of all launches are
# pooled (MPI timings on this 2-core machine can differ from one launch to
# the next: see docs/benchmarks.md, "Measuring fairly").
#
# stdout (and appended to --out FILE): a comment "# baselines rate=..." line,
# a header, then rows
#   op size hosts impl median_s min_s max_s ratio_to_bound cpu_pct
# ratio_to_bound = median_s / (size / B), B = the cluster rate in bytes/s (NA
# when unshaped; for shuffle, MPI_Alltoall with size bytes per peer, the
# bound is (hosts-1) * size / B, what each rank receives); cpu_pct = % of all cores busy (/proc/stat) over the whole
# launch (start-up, warm-up, REPS timed repetitions, verification).  A failed
# configuration prints FAIL in the time columns; its log stays in
# HPL_BENCH_BUILD/logs.  Each launch gets `timeout`, is retried once if it
# fails without a data mismatch, and processes it left in the cluster's
# namespaces are ended by pid.  A launch counts as done when rank 0 printed
# its median line and no mismatches, whatever the launcher's exit status.
#
# shuffle runs on mpich and openmpi only (gloo_coll has no all-to-all, and
# openmpi-pipe has no pipelined variant of it): others are skipped with a note.
#
# Binaries are built into HPL_BENCH_BUILD (default
# build/bench-baselines (under the checkout)): mpi_coll.mpich, mpi_coll.openmpi,
# gloo_coll, yield_preload.so.

set -u
set -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER="$HERE/cluster.sh"
AGENT="$HERE/netns-agent.sh"
BUILD=${HPL_BENCH_BUILD:-$(cd "$HERE/.." && pwd)/build/bench-baselines}
PREFIX=${HPL_NS_PREFIX:-hpl}
STATE_DIR=${HPL_NS_STATE_DIR:-/run/hoplite-ns}
RETRIES=${HPL_BENCH_RETRIES:-1}
# HPL_BENCH_PIN=1: every rank binds itself to CPU (rank mod the CPUs)
# (mpi_coll.c, gloo_coll.cc); the rows' implementation gets "+pin"
PINNED=
[ "${HPL_BENCH_PIN:-0}" = 1 ] && PINNED=+pin
export HPL_NS_PREFIX=$PREFIX

die() { echo "baselines.sh: $*" >&2; exit 1; }
note() { echo "baselines.sh: $*" >&2; }

size_bytes() {
    local s=$1
    case "$s" in
        *[kK]) echo $(( ${s%?} * 1024 )) ;;
        *[mM]) echo $(( ${s%?} * 1024 * 1024 )) ;;
        *[gG]) echo $(( ${s%?} * 1024 * 1024 * 1024 )) ;;
        *[!0-9]*|'') return 1 ;;
        *) echo "$s" ;;
    esac
}

rate_bps() {
    [[ "$1" =~ ^([0-9.]+)([a-zA-Z]+)$ ]] || { echo 0; return; }
    local m
    case "$(echo "${BASH_REMATCH[2]}" | tr A-Z a-z)" in
        bit) m=1 ;; kbit) m=1e3 ;; mbit) m=1e6 ;; gbit) m=1e9 ;; tbit) m=1e12 ;; *) m=0 ;;
    esac
    awk -v n="${BASH_REMATCH[1]}" -v m="$m" 'BEGIN{printf "%.0f\n", n*m}'
}

UP_N= UP_RATE= OPS=bcast,reduce SIZES=1K,1M,64M HOSTS= REPS=3
IMPLS=mpich,openmpi,openmpi-pipe,gloo OUT= TIMEOUT= LEAD=20 HEADER=1 LAUNCHES=1
while [ $# -gt 0 ]; do
    case "$1" in
        --up) UP_N=${2:-}; UP_RATE=${3:-}; shift 3 || die "--up needs N RATE" ;;
        --ops) OPS=${2:-}; shift 2 || die "--ops needs a value" ;;
        --sizes) SIZES=${2:-}; shift 2 || die "--sizes needs a value" ;;
        --hosts) HOSTS=${2:-}; shift 2 || die "--hosts needs a value" ;;
        --reps) REPS=${2:-}; shift 2 || die "--reps needs a value" ;;
        --launches) LAUNCHES=${2:-}; shift 2 || die "--launches needs a value" ;;
        --impls) IMPLS=${2:-}; shift 2 || die "--impls needs a value" ;;
        --out) OUT=${2:-}; shift 2 || die "--out needs a file" ;;
        --timeout) TIMEOUT=${2:-}; shift 2 || die "--timeout needs seconds" ;;
        --lead-ms) LEAD=${2:-}; shift 2 || die "--lead-ms needs a value" ;;
        --no-header) HEADER=0; shift ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[[ "$REPS" =~ ^[0-9]+$ ]] && [ "$REPS" -ge 1 ] || die "--reps must be >= 1"
[[ "$LAUNCHES" =~ ^[0-9]+$ ]] && [ "$LAUNCHES" -ge 1 ] || die "--launches must be >= 1"

# ---- build -------------------------------------------------------------
mkdir -p "$BUILD/logs" || die "cannot create $BUILD"
# BIN is stale if missing or older than any of the sources after it
stale() { local b=$1 f; shift; [ -e "$b" ] || return 0; for f; do [ "$f" -nt "$b" ] && return 0; done; return 1; }
build() {
    if stale "$BUILD/mpi_coll.mpich" "$HERE/mpi_coll.c" "$HERE/benchpin.h"; then
        mpicc.mpich -O2 -Wall -o "$BUILD/mpi_coll.mpich" "$HERE/mpi_coll.c" ||
            note "building mpi_coll.mpich failed"
    fi
    if stale "$BUILD/mpi_coll.openmpi" "$HERE/mpi_coll.c" "$HERE/benchpin.h"; then
        mpicc.openmpi -O2 -Wall -o "$BUILD/mpi_coll.openmpi" "$HERE/mpi_coll.c" ||
            note "building mpi_coll.openmpi failed"
    fi
    if stale "$BUILD/gloo_coll" "$HERE/gloo_coll.cc" "$HERE/benchpin.h"; then
        g++ -O2 -std=c++17 -Wall -o "$BUILD/gloo_coll" "$HERE/gloo_coll.cc" -lgloo -pthread ||
            note "building gloo_coll failed"
    fi
    if stale "$BUILD/yield_preload.so" "$HERE/yield_preload.c"; then
        gcc -O2 -Wall -shared -fPIC -o "$BUILD/yield_preload.so" "$HERE/yield_preload.c" -ldl ||
            note "building yield_preload.so failed"
    fi
}
build

# ---- cluster -----------------------------------------------------------
OWN_CLUSTER=0
TMP=$(mktemp -d /tmp/hpl-baselines.XXXXXX) || die "mktemp failed"
LAUNCH_PIDS=()
cleanup() {
    local p
    for p in "${LAUNCH_PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$TMP"
    [ $OWN_CLUSTER = 1 ] && "$CLUSTER" down --kill
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "$UP_N" ]; then
    "$CLUSTER" up "$UP_N" "$UP_RATE" || die "cluster up failed"
    OWN_CLUSTER=1
fi
STATE="$STATE_DIR/$PREFIX.state"
[ -f "$STATE" ] || die "no cluster '$PREFIX' is up; run 'cluster.sh up N RATE' or pass --up N RATE"
N=$(sed -n 's/^N=//p' "$STATE")
RATE=$(sed -n 's/^rate=//p' "$STATE")
BPS=0; [ "$RATE" = none ] || BPS=$(rate_bps "$RATE")
[ -n "$HOSTS" ] || HOSTS=$N
ADDRS=()
for ((i = 0; i < N; i++)); do ADDRS+=("$("$CLUSTER" addr $i)"); done

# ---- helpers -------------------------------------------------------------
cpu_sample() {
    awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t-$5-$6, t; exit}' /proc/stat
}

ns_pids() { # pids in host namespaces 0..K-1
    local k=$1 i
    for ((i = 0; i < k; i++)); do ip netns pids "$PREFIX-h$i" 2>/dev/null; done | sort -n
}

# End (by pid) processes that appeared in the namespaces during a launch.
reap_new() {
    local before=$1 k=$2 new p
    new=$(comm -13 "$before" <(ns_pids "$k"))
    [ -z "$new" ] && return 0
    note "ending leftover processes: $(echo $new)"
    kill -TERM $new 2>/dev/null
    for p in 1 2 3 4 5 6 7 8 9 10; do
        new=$(comm -13 "$before" <(ns_pids "$k"))
        [ -z "$new" ] && return 0
        sleep 0.2
    done
    kill -KILL $new 2>/dev/null
}

launch_timeout() { # bytes each rank receives, hosts -> seconds
    [ -n "$TIMEOUT" ] && { echo "$TIMEOUT"; return; }
    local b=$BPS
    [ "$b" -gt 0 ] || b=10000000000
    awk -v s="$1" -v b="$b" -v r="$REPS" -v h="$2" \
        'BEGIN{t = 30 + (r + 1) * (3 + h) * 3 * s * 8 / b; printf "%d\n", t}'
}

# One launch of IMPL; rank 0's stdout goes to $out, everything else to $log.
launch() {
    local impl=$1 op=$2 size=$3 k=$4 out=$5 log=$6 t=$7
    local hostlist i
    hostlist=$(IFS=,; echo "${ADDRS[*]:0:$k}")
    case "$impl" in
        mpich)
            "$CLUSTER" exec 0 timeout -k 5 "$t" mpiexec.hydra \
                -launcher ssh -launcher-exec "$AGENT" -iface eth0 -hosts "$hostlist" -n "$k" \
                -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 \
                -genv LD_PRELOAD "$BUILD/yield_preload.so" \
                -genv HPL_MPI_FINALIZE_TIMEOUT 0 -genv HPL_BENCH_PIN "${HPL_BENCH_PIN:-0}" \
                "$BUILD/mpi_coll.mpich" "$op" "$size" "$REPS" --lead-ms "$LEAD" \
                >"$out" 2>>"$log"
            ;;
        openmpi|openmpi-pipe)
            local hf="$TMP/hostfile.$k" extra=()
            for ((i = 0; i < k; i++)); do echo "${ADDRS[$i]} slots=1"; done >"$hf"
            if [ "$impl" = openmpi-pipe ]; then
                extra=(--mca coll_tuned_use_dynamic_rules 1)
                case "$op" in
                    bcast) extra+=(--mca coll_tuned_bcast_algorithm 3
                                   --mca coll_tuned_bcast_algorithm_segmentsize 131072) ;;
                    reduce) extra+=(--mca coll_tuned_reduce_algorithm 3
                                    --mca coll_tuned_reduce_algorithm_segmentsize 131072) ;;
                    allreduce) extra+=(--mca coll_tuned_allreduce_algorithm 4) ;;
                esac
            fi
            extra+=(-x "HPL_BENCH_PIN=${HPL_BENCH_PIN:-0}")
            # Optional: the same yield shim MPICH gets (HPL_OMPI_PRELOAD=1).
            if [ "${HPL_OMPI_PRELOAD:-0}" = 1 ]; then
                extra+=(-x "LD_PRELOAD=$BUILD/yield_preload.so")
            fi
            "$CLUSTER" exec 0 timeout -k 5 "$t" mpirun.openmpi \
                --allow-run-as-root --oversubscribe --bind-to none \
                -np "$k" --hostfile "$hf" \
                --mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1 \
                --mca pml ob1 --mca btl tcp,self \
                --mca btl_tcp_if_include eth0 --mca oob_tcp_if_include eth0 \
                --mca mpi_yield_when_idle 1 --mca rtc_hwloc_vmhole none \
                --leave-session-attached \
                "${extra[@]}" \
                "$BUILD/mpi_coll.openmpi" "$op" "$size" "$REPS" --lead-ms "$LEAD" \
                >"$out" 2>>"$log"
            ;;
        gloo)
            local store pids=() rc=0 p
            store=$(mktemp -d "$TMP/store.XXXXXX")
            for ((i = k - 1; i >= 0; i--)); do
                local dst=/dev/null
                [ $i -eq 0 ] && dst=$out
                "$CLUSTER" exec $i timeout -k 5 "$t" "$BUILD/gloo_coll" "$op" "$size" "$REPS" \
                    --rank $i --world "$k" --store-dir "$store" --addr "${ADDRS[$i]}" \
                    --lead-ms "$LEAD" --timeout-s "$t" >"$dst" 2>>"$log" &
                pids+=($!)
            done
            LAUNCH_PIDS=("${pids[@]}")
            for p in "${pids[@]}"; do wait "$p" || rc=1; done
            LAUNCH_PIDS=()
            rm -rf "$store"
            return $rc
            ;;
        *) note "unknown implementation '$impl'"; return 2 ;;
    esac
}

emit() {
    printf '%s\n' "$1"
    [ -n "$OUT" ] && printf '%s\n' "$1" >>"$OUT"
}

# ---- main loop -------------------------------------------------------------
if [ $HEADER = 1 ]; then
    emit "# baselines rate=$RATE prefix=$PREFIX reps=$REPS date=$(date -Is)"
    if [ -z "$OUT" ] || [ ! -s "$OUT" ]; then
        emit "$(printf 'op\tsize\thosts\timpl\tmedian_s\tmin_s\tmax_s\tratio_to_bound\tcpu_pct')"
    fi
fi
status=0
for op in ${OPS//,/ }; do
    case "$op" in bcast|reduce|allreduce|shuffle) ;; *) die "unknown op '$op'" ;; esac
    for s in ${SIZES//,/ }; do
        size=$(size_bytes "$s") || die "bad size '$s'"
        if [ "$op" != bcast ] && [ "$op" != shuffle ] && [ $((size % 4)) -ne 0 ]; then
            note "skipping $op of $size bytes: not a multiple of 4"
            continue
        fi
        for k in ${HOSTS//,/ }; do
            [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 2 ] && [ "$k" -le "$N" ] ||
                die "hosts '$k' must be 2..$N (cluster size)"
            # what each rank receives: the bound and the timeout's scale
            recv=$size
            [ "$op" = shuffle ] && recv=$((size * (k - 1)))
            for impl in ${IMPLS//,/ }; do
                if [ "$op" = shuffle ] && [ "$impl" != mpich ] && [ "$impl" != openmpi ]; then
                    note "skipping $impl for shuffle: only mpich and openmpi have it (MPI_Alltoall)"
                    continue
                fi
                log="$BUILD/logs/$op-$size-$k-$impl.log"
                out="$TMP/out"
                : >"$log"
                : >"$TMP/samples"
                t=$(launch_timeout "$recv" "$k")
                why=
                c0=$(cpu_sample)
                for ((l = 1; l <= LAUNCHES; l++)); do
                    attempt=0
                    while :; do
                        ns_pids "$k" >"$TMP/before"
                        launch "$impl" "$op" "$size" "$k" "$out" "$log" "$t"
                        rc=$?
                        cat "$out" >>"$log"
                        reap_new "$TMP/before" "$k"
                        # Rank 0 prints its results only after every
                        # repetition was verified, so a median line without
                        # a mismatches line is a valid result even if the
                        # launcher's exit was not clean (MPICH's hydra
                        # sometimes complains when ranks skip a hanging
                        # MPI_Finalize).
                        if grep -q '^median ' "$out" && ! grep -q '^mismatches ' "$out"; then
                            [ $rc -ne 0 ] && echo "---- results kept; launcher exit status $rc" >>"$log"
                            rc=0
                            break
                        fi
                        if grep -q '^mismatches ' "$out" || [ $attempt -ge "$RETRIES" ]; then break; fi
                        attempt=$((attempt + 1))
                        note "$op $size x$k $impl failed (rc $rc); retrying (log $log)"
                        echo "---- retry $attempt" >>"$log"
                    done
                    if [ $rc -ne 0 ]; then
                        why="rc $rc"
                        grep -q '^mismatches ' "$out" && why="DATA MISMATCH"
                        [ $rc -eq 124 ] && why="timeout after ${t}s"
                        break
                    fi
                    awk '/^sample /{print $3}' "$out" >>"$TMP/samples"
                done
                c1=$(cpu_sample)
                cpu=$(echo "$c0 $c1" | awk '{d = $4 - $2; if (d <= 0) d = 1; printf "%.1f", 100 * ($3 - $1) / d}')
                if [ -z "$why" ] && [ -s "$TMP/samples" ]; then
                    read -r med mn mx < <(sort -g "$TMP/samples" | awk '
                        { v[NR] = $1 }
                        END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
                              printf "%.9f %.9f %.9f\n", m, v[1], v[NR] }')
                    if [ "$BPS" -gt 0 ]; then
                        ratio=$(awk -v m="$med" -v s="$recv" -v b="$BPS" 'BEGIN{printf "%.3f", m/(s*8/b)}')
                    else
                        ratio=NA
                    fi
                    emit "$(printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s' \
                        "$op" "$size" "$k" "$impl$PINNED" "$med" "$mn" "$mx" "$ratio" "$cpu")"
                else
                    status=1
                    note "$op $size x$k $impl FAILED (${why:-no samples}); log: $log"
                    tail -n 5 "$log" | sed 's/^/    /' >&2
                    emit "$(printf '%s\t%s\t%s\t%s\tFAIL\tFAIL\tFAIL\tNA\t%s' \
                        "$op" "$size" "$k" "$impl$PINNED" "$cpu")"
                fi
            done
        done
    done
done
exit $status
