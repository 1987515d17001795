#!/usr/bin/env python3
"""linkuse.py - how busy each emulated host's links were, over time.

    ip netns exec PREFIX-sw bench/linkuse.py record OUT [--period-ms 5] [--watch PID]
    bench/linkuse.py report OUT --rate 200mbit [--bin-ms 100] [--gap-ms 300]
    bench/linkuse.py plot LABEL=OUT... --rate 200mbit --out F.png [--burst K]

record runs in the switch's namespace (bench/cluster.sh) and appends, every
period, one line "<CLOCK_MONOTONIC ns> <cpu busy> <cpu total> <watched> <rx0>
<tx0> <rx1> <tx1> ..." (the machine's CPU jiffies from /proc/stat, the CPU
jiffies of the process --watch names, 0 without one, then) the
byte counters of the switch ports p0, p1, ...: a port's rx is its host's
uplink (bytes the host sent), its tx the host's downlink. It stops on SIGINT
or SIGTERM.

report splits the record into bursts (stretches where some uplink carried
more than 5 % of the rate, separated by at least --gap-ms below that on
every port: one benchmark repetition each) and
prints for each burst its length, and for each host the share of the burst
its uplink and downlink spent busy at the shaped rate (bytes on the wire
including Ethernet headers, over rate times the burst's length), the time
from the burst's start to its uplink's last byte, and with --bins a line per
bin of uplink use in percent, then the machine's CPUs' busy share and the
watched process's share of one CPU. The rate is the one cluster.sh shaped with.
Bursts whose busiest uplink sent less than --min-mb MB are left out and not
numbered.

watched prints the CPU the watched process (record --watch) used within
each timed repetition of a bench_coll run (its HPL_BENCH_TRACE=1 stderr,
"rep N from T ns (monotonic) ends (ms): ..."), warm-up (rep -1) left out,
one line per repetition, then the median in ms. bench/sim/
validate_session.sh watches the VM's memory monitor (kdamond) this way.

plot draws burst K (numbered as report numbers them) of each record, the
hosts' mean uplink use per bin above and the machine's CPU below, one line
per LABEL=RECORD, into a PNG.
"""
import argparse
import bisect
import os
import re
import signal
import sys
import time


def parse_rate(s):
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", s.lower())
    if not m:
        sys.exit("linkuse.py: rate like 200mbit or 1gbit")
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    return float(m.group(1)) * mult / 8  # bytes per second


def ports():
    out = {}
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, rest = line.split(":", 1)
            name = name.strip()
            if re.fullmatch(r"p[0-9]+", name):
                v = rest.split()
                out[int(name[1:])] = (int(v[0]), int(v[8]))
    return out


def cpu_ticks():
    """(busy, total) jiffies of all CPUs together, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle, iowait
    return sum(v) - idle, sum(v)


TICKS = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat counts in these


def pid_ticks(pid):
    """utime + stime of process or thread pid in jiffies (0: none or gone)."""
    if not pid:
        return 0
    try:
        with open(f"/proc/{pid}/stat") as f:
            v = f.read().rsplit(")", 1)[1].split()
        return int(v[11]) + int(v[12])
    except OSError:
        return 0


def record(path, period_ms, watch):
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    n = len(ports())
    if n == 0:
        sys.exit("linkuse.py: no switch ports p0.. here (run in PREFIX-sw)")
    with open(path, "a") as f:
        while not stop:
            t = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            p = ports()
            busy, total = cpu_ticks()
            f.write(f"{t} {busy} {total} {pid_ticks(watch)} " + " ".join(f"{p[i][0]} {p[i][1]}" for i in range(n)) + "\n")
            time.sleep(period_ms / 1000)


def nhosts(rows):
    """Hosts (switch ports) in a record's rows [t, rx0, tx0, ...]."""
    return (len(rows[0]) - 1) // 2


def carried(rows, k, col, floor):
    """Whether column col (a port's counter) grew by more than floor bytes
    per second from row k - 1 to row k (heartbeats and other trickles stay
    below a floor of 5 % of the rate)."""
    dt = (rows[k][0] - rows[k - 1][0]) / 1e9
    return dt > 0 and rows[k][col] - rows[k - 1][col] > floor * dt


def bursts(rows, gap_ns, floor):
    """Index ranges [a, b] of rows where some uplink carried more than floor,
    split by silences of at least gap_ns."""
    out, start, last_move = [], None, None
    for k in range(1, len(rows)):
        if any(carried(rows, k, 1 + 2 * h, floor) for h in range(nhosts(rows))):
            if start is None:
                start = k - 1
            last_move = k
        elif start is not None and rows[k][0] - rows[last_move][0] >= gap_ns:
            out.append((start, last_move))
            start = None
    if start is not None:
        out.append((start, last_move))
    return out


def load(path):
    """The record's rows [t, rx0, tx0, ...] and CPU columns (busy, total, watched)."""
    rows, cpu = [], []
    with open(path) as f:
        for line in f:
            v = [int(x) for x in line.split()]
            rows.append([v[0]] + v[4:])
            cpu.append((v[1], v[2], v[3]))
    if len(rows) < 2:
        sys.exit(f"linkuse.py: {path}: record too short")
    return rows, cpu


def bins(rows, cpu, a, b, rate, bin_ms):
    """Bins of bin_ms over rows a..b: (ms from the start, each host's uplink
    use in %, the machine's busy %, the watched process's % of one CPU)."""
    n = nhosts(rows)
    ncpu = os.cpu_count() or 1
    out, k, edge, t0, t1 = [], a, rows[a][0], rows[a][0], rows[b][0]
    while edge < t1:
        nxt = edge + bin_ms * 1_000_000
        j = k
        while j < b and rows[j + 1][0] <= nxt:
            j += 1
        dt = (rows[j][0] - rows[k][0]) / 1e9
        if dt > 0:
            use = [100 * (rows[j][1 + 2 * h] - rows[k][1 + 2 * h]) / (rate * dt) for h in range(n)]
            jt = cpu[j][1] - cpu[k][1]
            busy = 100 * (cpu[j][0] - cpu[k][0]) / jt if jt else 0
            wat = 100 * ncpu * (cpu[j][2] - cpu[k][2]) / jt if jt else 0
            out.append(((rows[k][0] - t0) / 1e6, use, busy, wat))
        k, edge = j, nxt
        if j >= b:
            break
    return out


def kept_bursts(rows, rate, gap_ms, min_mb):
    """bursts() without those whose busiest uplink sent less than min_mb MB."""
    n = nhosts(rows)
    return [(a, b) for a, b in bursts(rows, gap_ms * 1_000_000, 0.05 * rate)
            if max(rows[b][1 + 2 * h] - rows[a][1 + 2 * h] for h in range(n)) >= min_mb * 1e6]


def report(path, rate, bin_ms, gap_ms, show_bins, min_mb):
    rows, cpu = load(path)
    n = nhosts(rows)
    for bi, (a, b) in enumerate(kept_bursts(rows, rate, gap_ms, min_mb)):
        t0, t1 = rows[a][0], rows[b][0]
        dur = (t1 - t0) / 1e9
        up = [rows[b][1 + 2 * h] - rows[a][1 + 2 * h] for h in range(n)]
        down = [rows[b][2 + 2 * h] - rows[a][2 + 2 * h] for h in range(n)]
        print(f"burst {bi}: {dur * 1000:.1f} ms, {sum(up) / 1e6:.1f} MB sent in all")
        print("host  up_busy%  down_busy%  up_MB  up_last_ms")
        for h in range(n):
            # its uplink's last sample above the trickle floor, as bursts() counts
            last = next((k for k in range(b, a, -1) if carried(rows, k, 1 + 2 * h, 0.05 * rate)), a)
            print(f"{h:4d}  {100 * up[h] / (rate * dur):8.1f}  {100 * down[h] / (rate * dur):10.1f}"
                  f"  {up[h] / 1e6:5.1f}  {(rows[last][0] - t0) / 1e6:10.1f}")
        if show_bins:
            print("uplink use per bin, % (rows: bins of", bin_ms, "ms; columns: hosts)")
            for t, use, busy, wat in bins(rows, cpu, a, b, rate, bin_ms):
                print(f"{t:7.0f} " + " ".join(f"{u:4.0f}" for u in use) +
                      f"  cpu {busy:3.0f}" + (f"  watched {wat:3.0f}" if cpu[-1][2] else ""))


def plot(specs, rate, bin_ms, gap_ms, min_mb, burst, out):
    """One line per LABEL=RECORD: the hosts' mean uplink use in burst
    number `burst` (counted as report numbers them), and below it the
    machine's CPU, against time from the burst's start."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(9, 6),
                                   gridspec_kw={"height_ratios": [2, 1]})
    for spec in specs:
        label, _, path = spec.partition("=")
        if not path:
            sys.exit(f"linkuse.py: plot takes LABEL=RECORD, not '{spec}'")
        rows, cpu = load(path)
        kept = kept_bursts(rows, rate, gap_ms, min_mb)
        if burst >= len(kept):
            sys.exit(f"linkuse.py: {path} has {len(kept)} bursts, no burst {burst}")
        a, b = kept[burst]
        bs = bins(rows, cpu, a, b, rate, bin_ms)
        t = [x[0] / 1000 for x in bs]
        ax1.step(t, [sum(x[1]) / len(x[1]) for x in bs], where="post",
                 label=f"{label} ({(rows[b][0] - rows[a][0]) / 1e9:.2f} s)")
        ax2.step(t, [x[2] for x in bs], where="post", label=label)
    ax1.set_ylabel("uplink use, mean of hosts (%)")
    ax1.set_ylim(0, 105)
    ax1.legend(loc="lower center")
    ax1.grid(alpha=0.3)
    ax2.set_ylabel("machine CPU busy (%)")
    ax2.set_ylim(0, 105)
    ax2.set_xlabel(f"seconds from the burst's first byte ({bin_ms:.0f} ms bins)")
    ax2.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def watched(path, trace):
    """Per timed repetition of trace: the watched pid's CPU ms in its window."""
    rows, cpu = load(path)
    ts = [r[0] for r in rows]
    got = []
    with open(trace) as f:
        for line in f:
            m = re.search(r"rep (\d+) from (\d+) ns \(monotonic\) ends \(ms\):(.*)", line)
            if not m:
                continue
            start = int(m.group(2))
            end = start + int(max(float(x.split(":")[1]) for x in m.group(3).split()) * 1e6)
            i, j = bisect.bisect_left(ts, start), bisect.bisect_left(ts, end)
            if j >= len(ts) or i == j:
                continue  # the record does not cover it
            ms = (cpu[j][2] - cpu[i][2]) * 1000 / TICKS
            got.append(ms)
            print(f"rep {m.group(1)} {ms:.0f} ms")
    if not got:
        sys.exit("linkuse.py: no repetition of the trace lies within the record")
    got.sort()
    print(f"median {got[len(got) // 2]:.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("out")
    r.add_argument("--period-ms", type=float, default=5)
    r.add_argument("--watch", type=int, default=0, help="also record this pid's CPU time")
    p = sub.add_parser("report")
    p.add_argument("record")
    p.add_argument("--rate", required=True)
    p.add_argument("--bin-ms", type=float, default=100)
    p.add_argument("--gap-ms", type=float, default=300)
    p.add_argument("--bins", action="store_true")
    p.add_argument("--min-mb", type=float, default=1, help="skip bursts whose busiest uplink sent less")
    w = sub.add_parser("watched")
    w.add_argument("record")
    w.add_argument("--trace", required=True, help="bench_coll's stderr with HPL_BENCH_TRACE=1")
    q = sub.add_parser("plot")
    q.add_argument("specs", nargs="+", metavar="LABEL=RECORD")
    q.add_argument("--rate", required=True)
    q.add_argument("--out", required=True)
    q.add_argument("--burst", type=int, default=0)
    q.add_argument("--bin-ms", type=float, default=100)
    q.add_argument("--gap-ms", type=float, default=300)
    q.add_argument("--min-mb", type=float, default=1)
    a = ap.parse_args()
    if a.cmd == "record":
        record(a.out, a.period_ms, a.watch)
    elif a.cmd == "report":
        report(a.record, parse_rate(a.rate), a.bin_ms, a.gap_ms, a.bins, a.min_mb)
    elif a.cmd == "watched":
        watched(a.record, a.trace)
    else:
        plot(a.specs, parse_rate(a.rate), a.bin_ms, a.gap_ms, a.min_mb, a.burst, a.out)


if __name__ == "__main__":
    main()
