#!/bin/sh
# bcast_many.sh - many stores on loopback: node-0 puts one object, every other
# node gets it at once (one `hoplite get` process each, started back to back).
# Prints how many copies left the source, checks every copy, and keeps the
# directory's transfer record (who pulled from whom, when) for a look.
#
#   bench/bcast_many.sh [NODES (128)] [SIZE_BYTES (8388608)]
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HOPLITE_BUILD:-$here/build}
N=${1:-128}
SIZE=${2:-8388608}
W=$(mktemp -d /tmp/hoplite-bcast.XXXXXX)
"$B/hoplite" cluster up --nodes "$N" --memory 64M --dir "$W/c" > "$W/up.log" 2>&1 &
UP=$!
trap 'kill -INT $UP 2>/dev/null || true' EXIT
i=0
until grep -q "node-$((N - 1)) " "$W/up.log" 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 300 ] || { echo "cluster did not come up: $W/up.log"; exit 1; }
  sleep 0.2
done
head -c "$SIZE" /dev/urandom > "$W/obj"
"$B/hoplite" -s "$W/c/node-0.sock" put X "$W/obj"
sent() { "$B/hoplite" -s "$W/c/node-0.sock" counters | awk '$1=="data_bytes_sent"{print $2}'; }
before=$(sent)
pids=
for i in $(seq 1 $((N - 1))); do
  "$B/hoplite" -s "$W/c/node-$i.sock" get -t 300000 X "$W/out-$i" 2>>"$W/get.log" &
  pids="$pids $!"
done
for p in $pids; do wait "$p"; done
after=$(sent)
bad=0
for i in $(seq 1 $((N - 1))); do cmp -s "$W/obj" "$W/out-$i" || bad=$((bad + 1)); done
"$B/hoplite" -s "$W/c/node-0.sock" transfers > "$W/transfers.txt"
src=$(awk 'NR==2{print $4}' "$W/transfers.txt")
echo "$((N - 1)) receivers of $SIZE bytes: the source sent $(awk -v a="$after" -v b="$before" -v s="$SIZE" 'BEGIN{printf "%.2f", (a-b)/s}') copies; wrong copies: $bad"
echo "receivers the directory sent to the source (seq, time in us, receiver):"
awk -v s="$src" 'NR>1 && $3=="assign" && $5==s {print "  " $1, $2, $4}' "$W/transfers.txt"
echo "first receiver done at seq $(awk -v s="$src" 'NR>1 && $3=="done" && $5==s {print $1; exit}' "$W/transfers.txt"); record in $W/transfers.txt"
rm -f "$W"/out-* "$W/obj"
[ "$bad" -eq 0 ]
