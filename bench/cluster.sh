#!/bin/bash
# cluster.sh - an emulated multi-host cluster on one machine, built from
# network namespaces, veth pairs and a bridge that lives in a namespace of its
# own (the root namespace gets no address on it, so no emulated traffic can
# leave the machine).
#
#   cluster.sh up N RATE          build hosts 0..N-1; RATE like 1gbit, 200mbit, or none
#   cluster.sh down [--kill]      remove everything this prefix made
#   cluster.sh exec HOST CMD...   run CMD in host HOST's namespace
#   cluster.sh addr HOST          print the host's IPv4 address
#   cluster.sh addrs              every host's address, host 0 first, comma-separated
#   cluster.sh ns HOST            print the host's namespace name
#   cluster.sh status             show what exists
#   cluster.sh ratelimit HOST RATE   change one host's rate (both directions)
#   cluster.sh cut HOST | uncut HOST take the host's switch port down / up
#
# Each host's egress: htb at RATE over a pfifo_fast queue (HPL_NS_LEAF=pfifo
# for a single FIFO), its ingress a tbf on the switch port.
# Names derive from HPL_NS_PREFIX (default "hpl"):
#   ${PREFIX}-sw      switch namespace, bridge "br0", ports "p0".."p{N-1}"
#   ${PREFIX}-h<i>    host i, interface "eth0", address ${SUBNET}.(i+1)/24
# SUBNET is 10.213.X, X = HPL_NS_SUBNET if set (0..255), else derived from
# the prefix (cksum of the prefix mod 250, plus 1).  HPL_NS_SUBNET may also be
# a full three-octet base such as 10.99.7.
# Topology: docs/benchmarks.md.  Requires root and a working `ip netns`.

set -u
set -o pipefail

PREFIX=${HPL_NS_PREFIX:-hpl}
STATE_DIR=${HPL_NS_STATE_DIR:-/run/hoplite-ns}
STATE="$STATE_DIR/$PREFIX.state"
LOCK="$STATE_DIR/$PREFIX.lock"
SW="$PREFIX-sw"
# The queue behind each host's shaper: pfifo_fast, the kernel's default
# qdisc (three bands by the packet's priority, so sockets marked interactive
# go first; one FIFO for everything else), or pfifo, one FIFO for all.
LEAF=${HPL_NS_LEAF:-pfifo_fast}
case "$LEAF" in pfifo_fast|pfifo) ;; *) echo "cluster.sh: HPL_NS_LEAF='$LEAF': pfifo_fast or pfifo" >&2; exit 1 ;; esac

die() { echo "cluster.sh: $*" >&2; exit 1; }
log() { [ -n "${HPL_NS_QUIET:-}" ] || echo "cluster.sh: $*" >&2; }

# Prefix: short enough that "${PREFIX}-h255" stays a reasonable name, and
# made of characters safe in file names and shell words.
check_prefix() {
    case "$PREFIX" in
        ''|*[!a-zA-Z0-9_]*) die "HPL_NS_PREFIX='$PREFIX': use letters, digits and _ only" ;;
    esac
    [ ${#PREFIX} -le 12 ] || die "HPL_NS_PREFIX='$PREFIX' is longer than 12 characters"
}

subnet_base() {
    local s=${HPL_NS_SUBNET:-}
    if [ -z "$s" ]; then
        local c
        c=$(printf '%s' "$PREFIX" | cksum | cut -d' ' -f1)
        echo "10.213.$(( c % 250 + 1 ))"
    elif [[ "$s" =~ ^[0-9]+$ ]] && [ "$s" -le 255 ]; then
        echo "10.213.$s"
    elif [[ "$s" =~ ^(10|192\.168|172\.(1[6-9]|2[0-9]|3[01]))(\.[0-9]+)+$ ]] &&
         [ "$(echo "$s" | tr -cd . | wc -c)" -eq 2 ]; then
        echo "$s"
    else
        die "HPL_NS_SUBNET='$s': give a number 0..255 or a private three-octet base like 10.99.7"
    fi
}

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    command -v ip >/dev/null || die "'ip' not found (install iproute2)"
    command -v tc >/dev/null || die "'tc' not found (install iproute2)"
    ip netns list >/dev/null 2>&1 || die "'ip netns list' fails: network namespaces unavailable here"
}

# Rate string -> bits per second.  Accepts tc's decimal units bit, kbit,
# mbit, gbit, tbit (1kbit = 1000 bit/s).
rate_bps() {
    local r=$1 num unit
    [[ "$r" =~ ^([0-9]+(\.[0-9]+)?)([a-zA-Z]*)$ ]] || return 1
    num=${BASH_REMATCH[1]}; unit=$(echo "${BASH_REMATCH[3]}" | tr A-Z a-z)
    case "$unit" in
        bit) awk -v n="$num" 'BEGIN{printf "%.0f\n", n}' ;;
        kbit) awk -v n="$num" 'BEGIN{printf "%.0f\n", n*1e3}' ;;
        mbit) awk -v n="$num" 'BEGIN{printf "%.0f\n", n*1e6}' ;;
        gbit) awk -v n="$num" 'BEGIN{printf "%.0f\n", n*1e9}' ;;
        tbit) awk -v n="$num" 'BEGIN{printf "%.0f\n", n*1e12}' ;;
        *) return 1 ;;
    esac
}

check_rate() {
    [ "$1" = none ] && return 0
    local b
    b=$(rate_bps "$1") || die "bad RATE '$1' (use e.g. 1gbit, 200mbit, 500kbit, or none)"
    [ "$b" -ge 100000 ] || die "RATE '$1' is below 100kbit; too slow to be useful"
}

# Token bucket in bytes: one 64 KiB GSO packet plus headroom, or 1 ms of the
# rate, whichever is larger (a smaller bucket stalls TCP behind the shaper).
bucket_bytes() {
    local bps=$1
    local ms=$(( bps / 8 / 1000 ))
    local min=$(( 64 * 1024 + 4 * 1024 ))
    [ $ms -gt $min ] && echo $ms || echo $min
}

# Queue limit of the switch-side tbf: 5 ms of the rate, at least 4 buckets.
queue_bytes() {
    local bps=$1 b=$2
    local q=$(( bps / 8 / 200 ))
    [ $q -gt $(( 4 * b )) ] && echo $q || echo $(( 4 * b ))
}

host_ns() { echo "$PREFIX-h$1"; }

state_get() { # KEY -> value from the state file
    [ -f "$STATE" ] || return 1
    sed -n "s/^$1=//p" "$STATE" | tail -n 1
}

check_host() { # HOST -> validate against the state
    local h=$1 n
    [[ "$h" =~ ^[0-9]+$ ]] || die "HOST '$h' must be a number 0..N-1"
    n=$(state_get N) || die "no cluster '$PREFIX' is up (no $STATE)"
    [ "$h" -lt "$n" ] || die "HOST $h out of range: cluster '$PREFIX' has $n hosts"
}

# Apply RATE to host H: htb on eth0 (host egress), tbf on the switch port
# towards the host (host ingress).  "none" removes both.
apply_rate() {
    local h=$1 rate=$2 ns
    ns=$(host_ns "$h")
    if [ "$rate" = none ]; then
        ip -n "$ns" link set eth0 up 2>/dev/null
        tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
        tc -n "$SW" qdisc del dev "p$h" root 2>/dev/null || true
        return 0
    fi
    local bps b q
    bps=$(rate_bps "$rate") || return 1
    b=$(bucket_bytes "$bps")
    q=$(queue_bytes "$bps" "$b")
    # Shaped already: change both shapers in place, so the host is never
    # unshaped in between and a slowdown acts after two commands.
    if tc -n "$ns" class change dev eth0 parent 1: classid 1:10 htb \
            rate "${bps}bit" ceil "${bps}bit" burst "$b" cburst "$b" quantum 65536 2>/dev/null &&
       tc -n "$SW" qdisc change dev "p$h" root handle 1: tbf \
            rate "${bps}bit" burst "$b" limit "$q" 2>/dev/null; then
        return 0
    fi
    ip -n "$ns" link set eth0 up 2>/dev/null
    tc -n "$ns" qdisc del dev eth0 root 2>/dev/null || true
    tc -n "$SW" qdisc del dev "p$h" root 2>/dev/null || true
    tc -n "$ns" qdisc add dev eth0 root handle 1: htb default 10 &&
    tc -n "$ns" class add dev eth0 parent 1: classid 1:10 htb \
        rate "${bps}bit" ceil "${bps}bit" burst "$b" cburst "$b" quantum 65536 &&
    tc -n "$ns" qdisc add dev eth0 parent 1:10 handle 10: "$LEAF" &&
    tc -n "$SW" qdisc add dev "p$h" root handle 1: tbf \
        rate "${bps}bit" burst "$b" limit "$q"
}

# Remove every namespace of this prefix (the state's list and anything
# matching the naming scheme).  Processes still inside a namespace keep it
# alive after `ip netns del`; they are reported, and with --kill (or
# HPL_NS_KILL=1) terminated by pid.
do_down() {
    local kill=${HPL_NS_KILL:-0}
    [ "${1:-}" = --kill ] && kill=1
    local list ns pids
    list=$( { [ -f "$STATE" ] && sed -n 's/^ns=//p' "$STATE"
              ip netns list 2>/dev/null | awk '{print $1}' |
                  grep -E "^$PREFIX-(sw|h[0-9]+)\$"; } | sort -u)
    for ns in $list; do
        ip netns list | awk '{print $1}' | grep -qx "$ns" || continue
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        if [ -n "${pids// /}" ]; then
            if [ "$kill" = 1 ]; then
                log "killing processes left in $ns: $pids"
                kill -TERM $pids 2>/dev/null
                sleep 0.5
                pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
                [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null
            else
                log "warning: processes still in $ns (pids $pids); use 'down --kill' to end them"
            fi
        fi
        ip netns del "$ns" 2>/dev/null || log "warning: could not delete namespace $ns"
    done
    rm -f "$STATE"
    # Per-host temporary directories made by netns-agent.sh.
    rm -rf "${HPL_AGENT_TMP:-/tmp/hoplite-ns-tmp}/$PREFIX"-h[0-9]*
    rmdir "${HPL_AGENT_TMP:-/tmp/hoplite-ns-tmp}" 2>/dev/null || true
}

do_up() {
    local n=${1:-} rate=${2:-}
    [ -n "$n" ] && [ -n "$rate" ] || die "usage: cluster.sh up N RATE"
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 254 ] || die "N='$n' must be 1..254"
    check_rate "$rate"
    local base
    base=$(subnet_base) || exit 1

    do_down --kill >/dev/null 2>&1     # leftovers of the same prefix
    trap 'log "up failed; cleaning up"; do_down --kill; exit 1' ERR
    set -E

    # Write the state before creating anything, so down finds partial work.
    {
        echo "prefix=$PREFIX"
        echo "N=$n"
        echo "rate=$rate"
        echo "subnet=$base.0/24"
        echo "ns=$SW"
        local i
        for ((i = 0; i < n; i++)); do echo "ns=$(host_ns $i)"; done
    } > "$STATE"

    ip netns add "$SW"
    ip -n "$SW" link set lo up
    ip netns exec "$SW" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
    ip netns exec "$SW" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
    ip -n "$SW" link add br0 type bridge stp_state 0 forward_delay 0
    ip -n "$SW" link set br0 up
    local i ns
    for ((i = 0; i < n; i++)); do
        ns=$(host_ns $i)
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.disable_ipv6=1
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control=reno
        # No per-destination ssthresh/cwnd carried from one run to the next.
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_no_metrics_save=1
        # Both ends are created directly in their namespaces: nothing ever
        # appears in the root namespace.
        ip -n "$SW" link add "p$i" type veth peer name eth0 netns "$ns"
        ip -n "$SW" link set "p$i" master br0
        ip -n "$SW" link set "p$i" up
        ip -n "$ns" addr add "$base.$((i + 1))/24" dev eth0
        ip -n "$ns" link set eth0 up
        apply_rate $i "$rate"
    done
    trap - ERR
    set +E
    log "up: $n hosts on $base.0/24, rate $rate, prefix $PREFIX"
}

do_status() {
    if [ ! -f "$STATE" ]; then
        echo "cluster '$PREFIX': down (no $STATE)"
        ip netns list | awk '{print $1}' | grep -E "^$PREFIX-(sw|h[0-9]+)\$" |
            sed 's/^/  leftover namespace: /'
        return 0
    fi
    local n rate i ns
    n=$(state_get N); rate=$(state_get rate)
    echo "cluster '$PREFIX': $n hosts, rate $rate, subnet $(state_get subnet)"
    for ((i = 0; i < n; i++)); do
        ns=$(host_ns $i)
        if ! ip netns list | awk '{print $1}' | grep -qx "$ns"; then
            echo "  host $i: MISSING namespace $ns"; continue
        fi
        local a up q p
        a=$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
        up=$(ip -n "$SW" -o link show "p$i" 2>/dev/null | grep -q 'state UP' && echo up || echo cut)
        q=$(tc -n "$ns" class show dev eth0 2>/dev/null | grep -o 'rate [^ ]*' | head -1)
        p=$(ip netns pids "$ns" 2>/dev/null | wc -l)
        echo "  host $i: ns $ns addr ${a:-?} link $up egress ${q:-unshaped} processes $p"
    done
}

cmd=${1:-}
[ -n "$cmd" ] || die "usage: cluster.sh up N RATE | down [--kill] | exec HOST CMD... | addr HOST | addrs | ns HOST | status | ratelimit HOST RATE | cut HOST | uncut HOST"
shift
check_prefix

case "$cmd" in
    up|down|ratelimit|cut|uncut)
        need_root
        mkdir -p "$STATE_DIR"
        exec 9>"$LOCK"
        flock -w 60 9 || die "could not lock $LOCK"
        ;;
esac

case "$cmd" in
    up) do_up "$@" ;;
    down) do_down "$@"; log "down: prefix $PREFIX removed" ;;
    exec)
        need_root
        h=${1:-}; shift || true
        [ $# -ge 1 ] || die "usage: cluster.sh exec HOST CMD..."
        if [ "$h" = sw ]; then exec ip netns exec "$SW" "$@"; fi
        check_host "$h"
        exec ip netns exec "$(host_ns "$h")" "$@"
        ;;
    addr)
        check_host "${1:-}"
        base=$(state_get subnet); base=${base%.0/24}
        echo "$base.$(( $1 + 1 ))"
        ;;
    addrs)
        n=$(state_get N) || die "no cluster '$PREFIX' is up (no $STATE)"
        base=$(state_get subnet); base=${base%.0/24}
        for ((i = 1; i <= n; i++)); do printf '%s%s' "$([ $i -gt 1 ] && echo ,)" "$base.$i"; done
        echo
        ;;
    ns)
        check_host "${1:-}"
        host_ns "$1"
        ;;
    status) do_status ;;
    ratelimit)
        check_host "${1:-}"
        [ -n "${2:-}" ] || die "usage: cluster.sh ratelimit HOST RATE"
        check_rate "$2"
        apply_rate "$1" "$2" || die "failed to set rate $2 on host $1"
        log "host $1: rate $2"
        ;;
    cut)
        check_host "${1:-}"
        ip -n "$SW" link set "p$1" down || die "failed to cut host $1"
        log "host $1: cut (switch port down)"
        ;;
    uncut)
        check_host "${1:-}"
        ip -n "$SW" link set "p$1" up || die "failed to uncut host $1"
        log "host $1: uncut"
        ;;
    *) die "unknown command '$cmd'" ;;
esac
