#!/usr/bin/env python3
"""shuffle_trace.py - when each partition of a traced shuffle moved, per receiver.

    HOPLITE_TRACE=/tmp/t build/bench/bench_coll --op shuffle --sizes 64K --procs ...
    bench/shuffle_trace.py /tmp/t [--rep 2] [--receivers 0,1]

bench_coll names a shuffle's partitions shuf/REP/FROM/TO (bench_shuffle.c); every
hoplite process started with $HOPLITE_TRACE appends "<CLOCK_MONOTONIC ns> <pid>
<event> <id>" lines (src/common/trace.h). A repetition's zero is its first event
of any partition. Two tables, in milliseconds after that zero:

  - for each kind of event, the min, median and max over the repetition's
    partitions of the first time it occurred (one table per repetition);
  - with --rep, for each receiver, its partitions in the order their pulls
    started: when the maker's store registered the partition (s.announce)
    and the directory had it (d.locadd), when the receiver's store asked
    the directory (s.ask), the ACQUIRE arrived there (d.acquire) and the
    answer came back (s.answer), when it queued the pull for an inbound
    slot (s.pullq), started it (s.pullgo), when the PULL reached the sender
    (s.serve), the reply came (s.pullrep) and the last byte arrived
    (s.pulled).

A gap between s.announce and d.locadd (or s.ask and d.acquire) is a message
to the directory waiting in a queue or for the directory's CPU; between
s.pullgo and s.serve, the time the PULL (and, on a new
connection, the handshake) spent crossing queues; between s.serve and
s.pullrep, the reply waiting behind the sender's other streams.
"""
import argparse
import statistics
import sys

STAGES = ["s.put", "s.announce", "d.locadd", "get", "peek.send", "d.peek", "d.peekrep",
          "peek.got", "s.ask", "d.acquire", "s.answer", "s.pullq", "s.pullgo", "s.serve",
          "s.pullrep", "s.pulled", "get.done"]
ROW = ["s.announce", "d.locadd", "s.ask", "d.acquire", "s.answer", "s.pullq", "s.pullgo",
       "s.serve", "s.pullrep", "s.pulled"]


def load(path):
    """{(rep, from, to): {event: first time (ns)}} for the shuffle's ids."""
    parts = {}
    with open(path) as f:
        for line in f:
            p = line.split()
            if len(p) != 4 or not p[3].startswith("shuf/"):
                continue
            f4 = p[3].split("/")
            try:
                t, key = int(p[0]), (int(f4[1]), int(f4[2]), int(f4[3]))
            except (ValueError, IndexError):
                continue
            ev = parts.setdefault(key, {})
            if p[2] not in ev or t < ev[p[2]]:
                ev[p[2]] = t
    return parts


def zeros(parts):
    """Each repetition's first event of any of its partitions."""
    z = {}
    for (rep, _, _), ev in parts.items():
        t = min(ev.values())
        if rep not in z or t < z[rep]:
            z[rep] = t
    return z


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--rep", type=int, help="one repetition's partitions, per receiver")
    ap.add_argument("--receivers", default="", help="with --rep: only these, e.g. 0,3")
    a = ap.parse_args()
    parts = load(a.trace)
    if not parts:
        sys.exit("shuffle_trace.py: no shuf/REP/FROM/TO events in %s" % a.trace)
    z = zeros(parts)
    ms = lambda key, e: (parts[key][e] - z[key[0]]) / 1e6
    for rep in sorted(z):
        keys = [k for k in parts if k[0] == rep]
        print("repetition %d: %d partitions" % (rep, len(keys)))
        print("  %-10s %5s %8s %8s %8s" % ("event", "n", "min", "median", "max"))
        for e in STAGES:
            v = sorted(ms(k, e) for k in keys if e in parts[k])
            if v:
                print("  %-10s %5d %8.2f %8.2f %8.2f" % (e, len(v), v[0], statistics.median(v),
                                                        v[-1]))
    if a.rep is None:
        return
    if a.rep not in z:
        sys.exit("shuffle_trace.py: no repetition %d in %s" % (a.rep, a.trace))
    want = {int(x) for x in a.receivers.split(",") if x != ""}
    print("\nrepetition %d per receiver (ms)" % a.rep)
    print("  %-4s %-4s" % ("to", "from") + "".join("%11s" % e for e in ROW))
    for to in sorted({k[2] for k in parts if k[0] == a.rep}):
        if want and to not in want:
            continue
        keys = [k for k in parts if k[0] == a.rep and k[2] == to]
        keys.sort(key=lambda k: parts[k].get("s.pullgo", parts[k].get("s.pullq", 0)))
        for k in keys:
            cells = "".join("%11.1f" % ms(k, e) if e in parts[k] else "%11s" % "-" for e in ROW)
            print("  %-4d %-4d%s" % (to, k[1], cells))


if __name__ == "__main__":
    main()
