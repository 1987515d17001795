#!/bin/bash
# validate_session.sh - measure the 8-host rows hpsim is validated against,
# then compare the simulator with them at once (hpsim compare): one
# session, one machine state. The VM's speed moves these rows by more than
# 5 % from one day to the next (bench/results/sim-validation-2026-11-30b.md),
# so the simulator is only judged against rows measured with it.
#
#   bench/sim/validate_session.sh [--reps N] [--out FILE] [--no-200mbit] [--no-faults]
#                                 [--kdamond-off]
#
# Needs root (network namespaces) and a build (scripts/bootstrap.sh). Brings
# up its own emulated cluster (prefix hplv, bench/cluster.sh) and takes it
# down at the end. Measures, one process per host (--procs), stores
# --prefault:
#   1 Gbit/s, sha256 and integrity off: bcast 1M/64M/256M, reduce and
#     allreduce 64M/256M (N repetitions, default 5);
#   1 Gbit/s: bench_faults --scenario bcast-midchain and
#     bcast-midchain-pause (2 s) at 64M and 256M (3 runs each);
#   200 Mbit/s, sha256: the same collectives (3 repetitions);
#   at both rates, the emulated network alone: a plain TCP chain through
#     the 8 hosts (bench/p2p_check.sh --chain-only, no hoplite code) of
#     1M/64M/256M, 3 times each, so the network model is judged apart from
#     the stores.
# --kdamond-off switches the kernel's DAMON threads off for the session and
# back on at its end (this VM's platform runs one, a memory monitor with a
# pageout scheme, whose bursts stall a reduce's links: bench/results/
# sim-kdamond-2026-12-03.md); a "# kdamond off" comment line says so.
# Writes the rows (hpsim compare's format, simcompare.c) to FILE (default
# bench/results/sim-session-DATE.tsv) and prints the comparison. Takes
# about 17 minutes. Exit status: hpsim compare's (0: every row within 5 %).
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
TOP=$(cd "$HERE/.." && pwd)
BUILD=${HPL_BUILD_DIR:-$TOP/build}
REPS=5
OUT=""
DO200=1
DOFAULTS=1
KDOFF=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) REPS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-200mbit) DO200=0; shift ;;
    --no-faults) DOFAULTS=0; shift ;;
    --kdamond-off) KDOFF=1; shift ;;
    *) echo "validate_session.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ -n "$OUT" ] || OUT="$TOP/bench/results/sim-session-$(date -u +%Y-%m-%dT%H%M).tsv"
for b in bench/bench_coll bench/bench_faults bench/bench_peek bench/sim/hpsim; do
  [ -x "$BUILD/$b" ] || { echo "validate_session.sh: build first ($BUILD/$b missing)" >&2; exit 1; }
done
export HPL_NS_PREFIX=hplv
CL="$HERE/cluster.sh"
KD_STATES=()
cleanup() {
  "$CL" down --kill >/dev/null 2>&1 || true
  local f
  for f in "${KD_STATES[@]}"; do echo on >"$f" 2>/dev/null || echo "validate_session.sh: could not switch $f back on" >&2; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
work=$(mktemp -d)

# coll RATE INTEGRITY OP SIZES REPS: one bench_coll, its rows appended to
# OUT. Where the kernel runs a DAMON thread (kdamond.0: this VM's memory
# monitor), bench/linkuse.py watches its CPU in the switch's namespace and
# each row gets its median ms within a timed repetition (else "-").
coll() {
  local rate=$1 integ=$2 op=$3 sizes=$4 reps=$5 addrs extra=() kd lu="" bg rc=0
  addrs=$("$CL" addrs)
  [ "$integ" = off ] && extra=(--store-arg --integrity=off)
  kd=$(pgrep -x kdamond.0 | head -1 || true)
  if [ -n "$kd" ]; then
    : >"$work/lu"
    "$CL" exec sw /usr/bin/python3 "$HERE/linkuse.py" record "$work/lu" --period-ms 20 --watch "$kd" &
    lu=$!
  fi
  HPL_BENCH_TRACE=1 "$BUILD/bench/bench_coll" --op "$op" --sizes "$sizes" --hosts 8 --reps "$reps" --netns hplv \
      --addrs "$addrs" --rate "$rate" --procs --store-args --prefault "${extra[@]}" --no-header \
      >"$work/rows" 2>"$work/err" || rc=$?
  [ -z "$lu" ] || { kill "$lu"; wait "$lu" 2>/dev/null || true; }
  [ "$rc" -eq 0 ] || { tail -20 "$work/err" >&2; return "$rc"; }
  # stderr: "bench_coll: OP SIZE B to ...: median ..., CPU X s per GiB moved ..."
  # and (trace) one "rep N from T ns ..." line per repetition, sizes in order
  awk -v rate="$rate" -v integ="$integ" '
    FNR == NR { if ($0 ~ /s per GiB moved/) { for (i = 1; i <= NF; i++) if ($i == "CPU") cpu[$3] = $(i + 1) }; next }
    { c = ($2 in cpu) ? cpu[$2] : "-"; printf "coll\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", $1, $2, rate, integ, $5, $6, $7, c }
  ' "$work/err" "$work/rows" >"$work/coll"
  if [ -n "$lu" ]; then
    # one trace file per size: the rep lines between its size's summary lines
    awk -v d="$work" '
      /^bench_coll: rep / { print >> (d "/trace." n); next }
      /s per GiB moved/ { close(d "/trace." n); n++ }
    ' n=0 "$work/err"
    local k=0
    while IFS= read -r row; do
      # (no figure, "-", when no repetition spans two of the record's samples)
      bg=$({ /usr/bin/python3 "$HERE/linkuse.py" watched "$work/lu" --trace "$work/trace.$k" 2>/dev/null || true; } |
           awk '$1 == "median" { print $2 }')
      printf '%s\t%s\n' "$row" "${bg:--}" >>"$OUT"
      rm -f "$work/trace.$k"
      k=$((k + 1))
    done <"$work/coll"
  else
    awk '{ print $0 "\t-" }' "$work/coll" >>"$OUT"
  fi
}

# chains RATE SIZES REPS: plain TCP chains (p2p_check.sh), one row per size
# with the median, least and most of REPS transfers, appended to OUT
chains() {
  local rate=$1 sizes=$2 reps=$3 size i
  for size in ${sizes//,/ }; do
    : >"$work/chain"
    for ((i = 0; i < reps; i++)); do
      "$HERE/p2p_check.sh" --chain-only --bytes "$size" 2>>"$work/chain.err" |
        awk '$1 == "p2p" && $2 == "chain" { print $5, $6 }' >>"$work/chain"
    done
    [ "$(wc -l <"$work/chain")" -eq "$reps" ] || { cat "$work/chain.err" >&2; return 1; }
    sort -n -k2 "$work/chain" | awk -v rate="$rate" '
      { b = $1; t[NR] = $2 }
      END { printf "chain\t%s\t%s\t%s\t%s\t%s\n", b, rate, t[int((NR + 1) / 2)], t[1], t[NR] }
    ' >>"$OUT"
  done
}

# faults SCENARIO SIZE: bench_faults' scenario rows appended to OUT
faults() {
  local sc=$1 size=$2 addrs
  addrs=$("$CL" addrs)
  : >"$work/f.tsv"
  "$BUILD/bench/bench_faults" --hosts 8 --netns hplv --addrs "$addrs" --rate 1gbit --cluster-sh "$CL" \
      --store-args --prefault --pause-s 2,2 --scenario "$sc" --size "$size" --out "$work/f.tsv" \
      >"$work/fout" 2>&1 || { cat "$work/fout" >&2; return 1; }
  # NAME SIZE HOSTS SECS NOFAULT RATIO DONE WRONG LOST HANG ACTED DEPTH CLOSE
  awk -v kind="$( [ "$sc" = bcast-midchain-pause ] && echo pause || echo kill )" '
    { printf "fault\t%s\t%s\t1gbit\t%s\t%s\t%s\t%s\t%s\t%s\n", kind, $2, $4, $5, $11, $12, $13, (kind == "pause" ? 2 : 0) }
  ' "$work/f.tsv" >>"$OUT"
}

{
  echo "# bench/sim/validate_session.sh, $(date -u +%FT%TZ), $(git -C "$TOP" rev-parse --short HEAD 2>/dev/null || echo '?'), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# coll OP SIZE RATE INTEGRITY MEDIAN_S MIN_S MAX_S CPU_S_PER_GIB BG_MS | fault KIND SIZE RATE MEASURED_S NOFAULT_S ACTED_S DEPTH CLOSE_S PAUSE_S | chain SIZE RATE MEDIAN_S MIN_S MAX_S | machine FLOOR_US | calib HASH_S_PER_B COMB_S_PER_B"
} >"$OUT"
# the VM's state: bench_peek's bare request/reply floor (µs summed), a
# "machine" row (hpsim compare prints it above the tables)
if [ "$KDOFF" = 1 ]; then
  for f in /sys/kernel/mm/damon/admin/kdamonds/*/state; do
    [ -f "$f" ] && [ "$(cat "$f")" = on ] || continue
    echo off >"$f" && KD_STATES+=("$f")
  done
  echo "# kdamond off: ${#KD_STATES[@]} DAMON thread(s) switched off for the session" >>"$OUT"
fi
"$BUILD/bench/bench_peek" 20000 1 2>/dev/null | awk '$1 == "floor" { printf "machine\t%s\n", $6 }' >>"$OUT"
# "calib" row: the digest and combine costs now, which compare then uses
"$BUILD/bench/sim/hpsim" calib >>"$OUT"
"$CL" up 8 1gbit >/dev/null
chains 1gbit 1M,64M,256M 3
for integ in sha256 off; do
  coll 1gbit "$integ" bcast 1M,64M,256M "$REPS"
  coll 1gbit "$integ" reduce 64M,256M "$REPS"
  coll 1gbit "$integ" allreduce 64M,256M "$REPS"
done
if [ "$DOFAULTS" = 1 ]; then
  for sc in bcast-midchain bcast-midchain-pause; do
    faults "$sc" 64M
    faults "$sc" 256M
  done
fi
if [ "$DO200" = 1 ]; then
  "$CL" down --kill >/dev/null
  "$CL" up 8 200mbit >/dev/null
  chains 200mbit 1M,64M,256M 3
  coll 200mbit sha256 bcast 1M,64M,256M 3
  coll 200mbit sha256 reduce 64M,256M 3
  coll 200mbit sha256 allreduce 64M,256M 3
fi
echo "# done $(date -u +%FT%TZ)" >>"$OUT"
rm -rf "$work"
echo "rows: $OUT"
"$BUILD/bench/sim/hpsim" compare "$OUT"
