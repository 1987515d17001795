#!/bin/bash
# netns-agent.sh - an rsh/ssh stand-in for MPI launchers: runs a command in
# the network namespace of an emulated host of bench/cluster.sh.
#
#   netns-agent.sh [ssh-style options...] HOST CMD...
#
# HOST is an emulated host's IPv4 address (as written in the hostfile or
# -hosts list), "h<i>", "<prefix>-h<i>" or a plain index <i>.  The cluster is
# the one of HPL_NS_PREFIX (default "hpl"), read from its state file; the
# launcher passes its environment down to this script, and `ip netns exec`
# keeps it, so PATH / LD_LIBRARY_PATH / UCX_* reach the remote side as they
# are.  Like ssh, the command words are joined with spaces and run by a
# shell: `ip netns exec <ns> sh -c "CMD..."`.
#
# Options a launcher may put before HOST are skipped:
#   MPICH hydra (-launcher ssh):   ssh -x HOST CMD       (-x is added by hydra)
#   Open MPI (plm_rsh_agent):      agent HOST CMD        (or with -x / -q etc.)
# Options that take a value (-p -l -o -i -F -E -b -c -e -m -S -W -L -R -D -J)
# skip their value too.  HPL_AGENT_LOG=FILE appends each invocation to FILE.

set -u
PREFIX=${HPL_NS_PREFIX:-hpl}
STATE=${HPL_NS_STATE_DIR:-/run/hoplite-ns}/$PREFIX.state

die() { echo "netns-agent.sh: $*" >&2; exit 255; }

if [ -n "${HPL_AGENT_LOG:-}" ]; then
    { printf '%s' "$(date +%T.%N) agent"; printf ' [%s]' "$@"; echo; } >>"$HPL_AGENT_LOG"
fi

while [ $# -gt 0 ]; do
    case "$1" in
        -[plioFEbcemSWLRDJ]) shift 2 ;;
        -[plioFEbcemSWLRDJ]?*) shift ;;
        --) shift; break ;;
        -*) shift ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || die "usage: netns-agent.sh [options] HOST CMD..."
host=$1
shift
host=${host#*@}     # user@host

[ -f "$STATE" ] || die "no cluster '$PREFIX' is up ($STATE missing)"
n=$(sed -n 's/^N=//p' "$STATE")
subnet=$(sed -n 's/^subnet=//p' "$STATE")
base=${subnet%.0/24}

case "$host" in
    "$base".*) idx=$(( ${host##*.} - 1 )) ;;
    "$PREFIX"-h[0-9]*) idx=${host#"$PREFIX"-h} ;;
    h[0-9]*) idx=${host#h} ;;
    *) idx=$host ;;
esac
[[ "$idx" =~ ^[0-9]+$ ]] && [ "$idx" -lt "$n" ] ||
    die "host '$host' is not one of the $n hosts of cluster '$PREFIX' ($subnet)"

# Every emulated host has the machine's hostname, so Open MPI daemons on
# different hosts would create the same session directory
# (/tmp/ompi.<hostname>.<uid>/jf.<job>) at the same moment and one of them
# fails ("mkdir ... File exists") and the launch hangs.  A TMPDIR of its own
# per emulated host avoids that; cluster.sh down removes these directories.
tmpdir=${HPL_AGENT_TMP:-/tmp/hoplite-ns-tmp}/$PREFIX-h$idx
mkdir -p "$tmpdir" || die "cannot create $tmpdir"
export TMPDIR=$tmpdir

if [ -n "${HPL_AGENT_LOG:-}" ]; then
    ip netns exec "$PREFIX-h$idx" sh -c "$*"
    rc=$?
    echo "$(date +%T.%N) agent $host exit $rc" >>"$HPL_AGENT_LOG"
    exit $rc
fi
exec ip netns exec "$PREFIX-h$idx" sh -c "$*"
