#!/bin/bash
# p2p_check.sh - can this machine carry N emulated hosts at RATE?
#
#   p2p_check.sh [--up N RATE] [--bytes S] [--hosts K] [--chain-only]
#
# Runs two plain TCP transfers of S bytes (default 256M) and reports goodput
# and CPU use:
#   pair   host 0 -> host 1
#   chain  host 0 -> 1 -> ... -> K-1, every middle host forwarding as bytes
#          arrive (K defaults to all hosts of the cluster; skipped if K < 3)
# --chain-only skips the pair (bench/sim/validate_session.sh times chains).
# Without --up it uses the cluster that is up for HPL_NS_PREFIX (default
# "hpl"); with --up it brings one up (prefix HPL_NS_PREFIX) and takes it down
# afterwards.  The helper bench/p2p.c is built with gcc into HPL_BENCH_BUILD
# (default build/bench-baselines (under the checkout)).
#
# Output: a human-readable summary on stderr and one TSV line per test on
# stdout:
#   p2p  test  hosts  rate  bytes  seconds  goodput_mbit  pct_of_rate  cpu_pct
# goodput = bytes*8 / (last receiver's end - sender's start), both read on
# CLOCK_MONOTONIC; cpu_pct = % of all cores busy during the transfer
# (/proc/stat).  TCP over MTU 1500 can reach at most ~95.6 % of the rate.

set -u
set -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER="$HERE/cluster.sh"
BUILD=${HPL_BENCH_BUILD:-$(cd "$HERE/.." && pwd)/build/bench-baselines}
PREFIX=${HPL_NS_PREFIX:-hpl}
STATE_DIR=${HPL_NS_STATE_DIR:-/run/hoplite-ns}
export HPL_NS_PREFIX=$PREFIX

die() { echo "p2p_check.sh: $*" >&2; exit 1; }

size_bytes() { # 64M, 1G, 4096, 1K -> bytes (binary suffixes)
    local s=$1
    case "$s" in
        *[kK]) echo $(( ${s%?} * 1024 )) ;;
        *[mM]) echo $(( ${s%?} * 1024 * 1024 )) ;;
        *[gG]) echo $(( ${s%?} * 1024 * 1024 * 1024 )) ;;
        *[!0-9]*|'') return 1 ;;
        *) echo "$s" ;;
    esac
}

UP_N= UP_RATE= BYTES=256M K= PAIR=1
while [ $# -gt 0 ]; do
    case "$1" in
        --up) UP_N=${2:-}; UP_RATE=${3:-}; shift 3 || die "--up needs N RATE" ;;
        --bytes) BYTES=${2:-}; shift 2 || die "--bytes needs a value" ;;
        --hosts) K=${2:-}; shift 2 || die "--hosts needs a value" ;;
        --chain-only) PAIR=0; shift ;;
        -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
S=$(size_bytes "$BYTES") || die "bad --bytes '$BYTES'"

mkdir -p "$BUILD" || die "cannot create $BUILD"
if [ ! -x "$BUILD/p2p" ] || [ "$HERE/p2p.c" -nt "$BUILD/p2p" ]; then
    gcc -O2 -Wall -Wextra -o "$BUILD/p2p" "$HERE/p2p.c" || die "building p2p failed"
fi

OWN_CLUSTER=0
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
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
[ "$N" -ge 2 ] || die "need at least 2 hosts"
[ -n "$K" ] || K=$N
[ "$K" -le "$N" ] || die "--hosts $K > cluster size $N"

rate_bps() { # same units as cluster.sh
    [[ "$1" =~ ^([0-9.]+)([a-zA-Z]+)$ ]] || { echo 0; return; }
    local m
    case "$(echo "${BASH_REMATCH[2]}" | tr A-Z a-z)" in
        bit) m=1 ;; kbit) m=1e3 ;; mbit) m=1e6 ;; gbit) m=1e9 ;; tbit) m=1e12 ;; *) m=0 ;;
    esac
    awk -v n="${BASH_REMATCH[1]}" -v m="$m" 'BEGIN{printf "%.0f\n", n*m}'
}
BPS=0; [ "$RATE" = none ] || BPS=$(rate_bps "$RATE")

cpu_sample() { # prints "busy total" jiffies over all cores
    awk '/^cpu /{t=0; for(i=2;i<=NF;i++) t+=$i; print t-$5-$6, t; exit}' /proc/stat
}

# Wait (sleeping) until host H listens on PORT, for at most 10 s.
wait_listen() {
    local h=$1 port=$2 i
    for ((i = 0; i < 200; i++)); do
        "$CLUSTER" exec "$h" ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && return 0
        sleep 0.05
    done
    return 1
}

# run_chain K: host 0 sends S bytes through hosts 1..K-1.  Prints
# "seconds cpu_pct" or fails.
run_chain() {
    local k=$1 port=$(( 20000 + RANDOM % 20000 )) tmp i
    tmp=$(mktemp -d /tmp/hpl-p2p.XXXXXX)
    PIDS=()
    for ((i = k - 1; i >= 1; i--)); do
        local me next
        me=$("$CLUSTER" addr $i)
        if [ $i -eq $((k - 1)) ]; then
            "$CLUSTER" exec $i "$BUILD/p2p" recv "$me" $port >"$tmp/r$i" 2>"$tmp/e$i" &
        else
            next=$("$CLUSTER" addr $((i + 1)))
            "$CLUSTER" exec $i "$BUILD/p2p" recv "$me" $port "$next" $port >"$tmp/r$i" 2>"$tmp/e$i" &
        fi
        PIDS+=($!)
        wait_listen $i $port || { cat "$tmp"/e* >&2; rm -rf "$tmp"; return 1; }
    done
    local c0 c1
    c0=$(cpu_sample)
    "$CLUSTER" exec 0 timeout 600 "$BUILD/p2p" send "$("$CLUSTER" addr 1)" $port "$S" >"$tmp/s" 2>"$tmp/es"
    local rc=$?
    for i in "${PIDS[@]}"; do wait "$i" || rc=1; done
    PIDS=()
    c1=$(cpu_sample)
    if [ $rc -ne 0 ]; then
        cat "$tmp"/e* >&2; rm -rf "$tmp"; return 1
    fi
    local start end got
    start=$(awk '{print $2}' "$tmp/s")
    end=$(awk '{print $2}' "$tmp/r$((k - 1))")
    got=$(awk '{print $4}' "$tmp/r$((k - 1))")
    local own # the transfer processes' own CPU (s), which other load does not sway
    own=$(cat "$tmp/s" "$tmp"/r* | awk '{s += $6} END {printf "%.3f", s / 1e6}')
    rm -rf "$tmp"
    [ "$got" = "$S" ] || { echo "p2p_check.sh: receiver got $got of $S bytes" >&2; return 1; }
    echo "$start $end $c0 $c1 $own" | awk -v hz="$(getconf CLK_TCK)" \
        '{printf "%.6f %.1f %.3f %s\n", $2-$1, 100*($5-$3)/($6-$4), ($5-$3)/hz, $7}'
}

report() { # test k
    local test=$1 k=$2 out secs cpu cpus own
    out=$(run_chain "$k") || { echo "p2p_check.sh: $test transfer failed" >&2; return 1; }
    read -r secs cpu cpus own <<<"$out"
    local mbit pct
    mbit=$(awk -v s="$S" -v t="$secs" 'BEGIN{printf "%.1f", s*8/t/1e6}')
    if [ "$BPS" -gt 0 ]; then
        pct=$(awk -v m="$mbit" -v b="$BPS" 'BEGIN{printf "%.1f", 100*m*1e6/b}')
    else
        pct=NA
    fi
    local per_gib # CPU seconds per GiB that crossed a link (k-1 hops)
    per_gib=$(awk -v c="$cpus" -v s="$S" -v k="$k" 'BEGIN{printf "%.3f", c/(s*(k-1)/1073741824)}')
    local own_gib # the same from the transfer processes' own CPU
    own_gib=$(awk -v c="$own" -v s="$S" -v k="$k" 'BEGIN{printf "%.3f", c/(s*(k-1)/1073741824)}')
    printf '%s: %d hosts, %s bytes in %s s = %s Mbit/s (%s%% of %s), CPU %s%% of %d cores busy, %s s per GiB moved (the processes'"'"' own: %s s per GiB)\n' \
        "$test" "$k" "$S" "$secs" "$mbit" "$pct" "$RATE" "$cpu" "$(nproc)" "$per_gib" "$own_gib" >&2
    printf 'p2p\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n' "$test" "$k" "$RATE" "$S" "$secs" "$mbit" "$pct" "$cpu"
}

status=0
if [ "$PAIR" = 1 ]; then
    report pair 2 || status=1
fi
if [ "$K" -ge 3 ]; then
    report chain "$K" || status=1
fi
if [ "$BPS" -gt 0 ]; then
    echo "p2p_check.sh: TCP goodput ceiling with MTU 1500 is ~95.6% of the rate;" \
         "a chain far below it, or CPU near 100%, means this machine cannot carry $K hosts at $RATE" >&2
fi
exit $status
