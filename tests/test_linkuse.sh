#!/bin/sh
# test_linkuse.sh LINKUSE_PY - bench/linkuse.py's report on a made-up record
# of two switch ports at 200 Mbit/s: a first burst of 1 s with host 0's
# uplink full and host 1's half used, 0.5 s of trickle (heartbeats), a second
# burst of 0.5 s with both full. The report must find the two bursts, their
# lengths, each host's share of the rate and the per-bin use; `watched` must
# give the watched process's CPU within each repetition of a bench_coll trace
# (rep -1, the warm-up, left out); `record` outside a switch namespace must
# refuse.
set -eu
TOOL=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "test_linkuse: FAIL: $*" >&2; [ -f "$T/out" ] && cat "$T/out" >&2; exit 1; }

# rows every 5 ms: t_ns cpu_busy cpu_total watched rx0 tx0 rx1 tx1
# (200 Mbit/s = 25 MB/s = 125 000 bytes per 5 ms)
/usr/bin/python3 - "$T/rec" <<'PY'
import sys
full, half, trickle = 125000, 62500, 100
phases = [(200, full, half), (100, trickle, trickle), (100, full, full), (40, trickle, trickle)]
t, busy, total, rx0, rx1, w = 10**9, 0, 0, 0, 0, 0
with open(sys.argv[1], "w") as f:
    f.write(f"{t} {busy} {total} {w} {rx0} {rx1} {rx1} {rx0}\n")
    for n, a, b in phases:
        for k in range(n):
            t += 5 * 10**6
            total += 2
            busy += 1  # the machine half busy
            rx0 += a
            rx1 += b
            w += k % 4 == 0  # the watched process: a tick every 20 ms
            f.write(f"{t} {busy} {total} {w} {rx0} {rx1} {rx1} {rx0}\n")
PY
/usr/bin/python3 "$TOOL" report "$T/rec" --rate 200mbit --gap-ms 100 --bins --bin-ms 250 > "$T/out" ||
    fail "report failed"
[ "$(grep -c '^burst' "$T/out")" -eq 2 ] || fail "want 2 bursts"
grep -q '^burst 0: 1000.0 ms' "$T/out" || fail "first burst is not 1000 ms"
grep -q '^burst 1: 500.0 ms' "$T/out" || fail "second burst is not 500 ms"
# burst 0: host 0 up 100 %, down 50 % (it receives what host 1 sends); host 1 the reverse
sed -n '/^burst 0/,/^burst 1/p' "$T/out" > "$T/b0"
awk '$1 == "0" && NF == 5 && $2 ~ /\./ { if ($2 < 99 || $2 > 101 || $3 < 49 || $3 > 51) exit 1; n++ }
     $1 == "1" && NF == 5 && $2 ~ /\./ { if ($2 < 49 || $2 > 51 || $3 < 99 || $3 > 101) exit 1; n++ }
     END { exit n == 2 ? 0 : 1 }' "$T/b0" || fail "burst 0's busy shares are wrong"
# its bins: 4 of 250 ms, host 0 at 100 %, host 1 at 50 %, the machine 50 % busy
awk '/^ *[0-9]+ +[0-9]+ +[0-9]+ +cpu/ { if ($2 < 99 || $2 > 101 || $3 < 49 || $3 > 51 || $5 < 49 || $5 > 51) exit 1; n++ }
     END { exit n == 4 ? 0 : 1 }' "$T/b0" || fail "burst 0's bins are wrong"
# a bench_coll trace: rep -1 over the first burst (not counted), rep 0 over
# its first half (500 ms: 25 ticks), rep 1 over the second burst (500 ms:
# 25 ticks) and rep 2 wholly after the record (left out)
hz=$(getconf CLK_TCK)
cat > "$T/trace" <<EOF
bench_coll: rep -1 from 1000000000 ns (monotonic) ends (ms): 0:1000.0
bench_coll: rep 0 from 1000000000 ns (monotonic) ends (ms): 0:500.0 1:499.0
bench_coll: rep 1 from 2500000000 ns (monotonic) ends (ms): 0:500.0
bench_coll: rep 2 from 9000000000 ns (monotonic) ends (ms): 0:100.0
EOF
/usr/bin/python3 "$TOOL" watched "$T/rec" --trace "$T/trace" > "$T/w" || fail "watched failed"
want=$((25 * 1000 / hz))
[ "$(grep -c '^rep' "$T/w")" -eq 2 ] || { cat "$T/w" >&2; fail "watched: want reps 0 and 1 only"; }
grep -q "^rep 0 $want ms" "$T/w" && grep -q "^rep 1 $want ms" "$T/w" && grep -q "^median $want" "$T/w" ||
    { cat "$T/w" >&2; fail "watched: want $want ms in each repetition"; }
echo 'bench_coll: rep 0 from 99000000000 ns (monotonic) ends (ms): 0:1.0' > "$T/trace2"
if /usr/bin/python3 "$TOOL" watched "$T/rec" --trace "$T/trace2" > "$T/w2" 2>&1; then
    fail "watched gave a figure for a repetition outside the record"
fi
# outside a switch namespace there are no ports p0, p1, ...: record refuses
if /usr/bin/python3 "$TOOL" record "$T/rec2" > "$T/rec.err" 2>&1; then
    ip -o link | grep -q ': p[0-9]*[@:]' || fail "record ran without switch ports"
else
    grep -q "no switch ports" "$T/rec.err" || fail "record's refusal does not say why"
fi
echo "test_linkuse: ok"
cat "$T/out"
