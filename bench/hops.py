#!/usr/bin/env python3
"""hops.py - where the time of small gets and puts goes, from a trace.

    HOPLITE_TRACE=/tmp/t.txt build/bench/bench_coll --op bcast --sizes 1K --procs ...
    bench/hops.py /tmp/t.txt [--gap-ms 12] [--id-prefix bench/bcast/]

Every hoplite process started with $HOPLITE_TRACE appends lines
"<CLOCK_MONOTONIC ns> <pid> <event> <id>" (src/common/trace.h). A sample is one
object id: its events from the last burst (no gap longer than --gap-ms; the
bench's untimed put 20 ms before the gets is left out), and the 'flush'
events (no id) that fall inside that burst. Its zero is the burst's first
'put' if it has one (the put is timed), else its first 'get'. For every
event kind the table gives, over all samples, the median of the first and
of the last occurrence (microseconds after the zero) and how many occurred
per sample, in the order the medians fall.
The events:

  client library : get, peek.send, peek.got, get.done, put, put.done
  store          : s.put (a PUT arrived), s.inline (INLINE_PUT sent),
                   s.pullq / s.pullgo / s.pullrep / s.pulled (a copy's pull
                   queued for a slot, started, answered, ended), s.serve (a
                   PULL arrived at the sender)
  directory      : d.peek (a PEEK arrived), d.inline (an INLINE_PUT arrived),
                   d.peekrep (a PEEK answered, at once or when its object landed)
  any server     : flush (corked frames written to one connection); a turn
                   that writes to 4 or more connections at once (the
                   directory's fan-out) traces one flush.fanout instead,
                   which is not counted here

Only ids that start with --id-prefix count (e.g. one size of a bench run).

--spacing EVENT prints instead how far apart the occurrences of EVENT fall
within each sample: sorted by time, the gap from the first to the second
and the later gaps, as medians over all samples (ms). With s.pulled in a
broadcast of copies, the first is the receiver that pulled from the
source, and each later gap what one more hop of the chain added at its end.
"""
import argparse
import bisect
import statistics
import sys


def load(path, prefix):
    """The events of each id that starts with prefix, and the flushes."""
    by_id, flushes = {}, []
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) != 4:
                continue
            try:
                t = int(p[0])
            except ValueError:
                continue
            ev, oid = p[2], p[3]
            if ev == "flush":
                flushes.append(t)
            elif oid.startswith(prefix):
                by_id.setdefault(oid, []).append((t, ev))
    flushes.sort()
    return by_id, flushes


def samples(by_id, flushes, gap_ns):
    """One sample per id: its last burst of events plus the flushes in it."""
    out = []
    for evs in by_id.values():
        evs.sort()
        burst = [evs[-1]]
        for e in reversed(evs[:-1]):
            if burst[-1][0] - e[0] > gap_ns:
                break
            burst.append(e)
        burst.reverse()
        if not any(ev in ("get", "put") for _, ev in burst):
            continue
        lo, hi = burst[0][0], burst[-1][0]
        i = bisect.bisect_left(flushes, lo)
        while i < len(flushes) and flushes[i] <= hi:
            burst.append((flushes[i], "flush"))
            i += 1
        out.append(burst)
    return out


def spacing(ss, event):
    """Medians (ms) of the first and the later gaps between occurrences of event."""
    first, later = [], []
    for s in ss:
        ts = sorted(t for t, ev in s if ev == event)
        gaps = [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
        if gaps:
            first.append(gaps[0])
            later += gaps[1:]
    if not first:
        sys.exit("hops.py: no sample has %s twice" % event)
    print("%d samples with %s twice or more" % (len(first), event))
    print("first gap (ms): median %.3f, least %.3f, most %.3f" %
          (statistics.median(first), min(first), max(first)))
    if len(later) >= 2:
        q = statistics.quantiles(later, n=4)
        print("later gaps (ms): median %.3f, quartiles %.3f-%.3f, %d gaps" %
              (statistics.median(later), q[0], q[2], len(later)))
    elif later:
        print("later gaps (ms): median %.3f, 1 gap" % later[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--gap-ms", type=float, default=12.0)
    ap.add_argument("--id-prefix", default="")
    ap.add_argument("--spacing", metavar="EVENT", help="gaps between the occurrences of EVENT")
    a = ap.parse_args()
    by_id, flushes = load(a.trace, a.id_prefix)
    ss = samples(by_id, flushes, int(a.gap_ms * 1e6))
    if not ss:
        sys.exit("hops.py: no sample with a get or a put in %s" % a.trace)
    if a.spacing:
        spacing(ss, a.spacing)
        return
    first, last, count = {}, {}, {}
    for s in ss:
        puts = [t for t, ev in s if ev == "put"]
        zero = min(puts) if puts else min(t for t, ev in s if ev == "get")
        seen = {}
        for t, ev in s:
            seen.setdefault(ev, []).append((t - zero) / 1e3)
        for ev, ts in seen.items():
            first.setdefault(ev, []).append(min(ts))
            last.setdefault(ev, []).append(max(ts))
            count.setdefault(ev, []).append(len(ts))
    print("%d samples (zero: the first put if the sample has one, else the first get)" % len(ss))
    print("%-10s %9s %12s %12s" % ("event", "per sample", "first (us)", "last (us)"))
    order = sorted(first, key=lambda ev: statistics.median(first[ev]))
    for ev in order:
        print("%-10s %9.1f %12.1f %12.1f" % (ev, statistics.median(count[ev]),
                                             statistics.median(first[ev]),
                                             statistics.median(last[ev])))


if __name__ == "__main__":
    main()
