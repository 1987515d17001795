#!/bin/sh
# test_hops_spacing.sh HOPS_PY - bench/hops.py --spacing on a made-up trace:
# two samples (object ids) of a broadcast to 4 receivers, each with a get
# and the receivers' s.pulled at known times. The first gap and the later
# gaps must come out as the medians over both samples; an event that never
# occurs twice in a sample must be refused with the reason.
set -eu
TOOL=$1
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "test_hops_spacing: FAIL: $*" >&2; [ -f "$T/out" ] && cat "$T/out" >&2; exit 1; }

# times in ns; sample A: ends at +10.0, +12.0 (first gap 2 ms), +12.2, +12.5 ms;
# sample B: +10.0, +11.0 (first gap 1 ms), +11.1, +11.3 ms
cat > "$T/trace" <<'TR'
1000000000 11 get bench/bcast/1048576/1
1010000000 21 s.pulled bench/bcast/1048576/1
1012000000 22 s.pulled bench/bcast/1048576/1
1012200000 23 s.pulled bench/bcast/1048576/1
1012500000 24 s.pulled bench/bcast/1048576/1
2000000000 11 get bench/bcast/1048576/2
2010000000 21 s.pulled bench/bcast/1048576/2
2011000000 22 s.pulled bench/bcast/1048576/2
2011100000 23 s.pulled bench/bcast/1048576/2
2011300000 24 s.pulled bench/bcast/1048576/2
TR
/usr/bin/python3 "$TOOL" "$T/trace" --gap-ms 50 --spacing s.pulled > "$T/out" || fail "--spacing failed"
grep -q "^2 samples with s.pulled" "$T/out" || fail "want 2 samples"
# first gaps 2.0 and 1.0 ms: median 1.5
grep -q "^first gap (ms): median 1.500, least 1.000, most 2.000" "$T/out" || fail "wrong first gap"
# later gaps 0.2, 0.3, 0.1, 0.2 ms: median 0.2, 4 gaps
grep -q "^later gaps (ms): median 0.200, .* 4 gaps" "$T/out" || fail "wrong later gaps"
if /usr/bin/python3 "$TOOL" "$T/trace" --gap-ms 50 --spacing get > "$T/out2" 2>&1; then
  fail "an event seen once per sample gave gaps"
fi
grep -q "no sample has get twice" "$T/out2" || { cat "$T/out2" >&2; fail "no reason given"; }
echo "test_hops_spacing: ok"
