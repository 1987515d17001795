#!/usr/bin/python3
"""plot.py - time vs object size for the collectives measured by baselines.sh
(and anything else writing the same TSV).

    /usr/bin/python3 bench/plot.py [-o OUTDIR] [--rate RATE] FILE.tsv...

Input rows (tab-separated; '#' lines are comments, a line starting with
"op" is a header):
    op size hosts impl median_s min_s max_s ratio_to_bound cpu_pct
A comment containing "rate=<RATE>" (baselines.sh writes one) sets the link
rate of the rows after it in that file; --rate overrides it.  Without either,
the rate is recovered from ratio_to_bound (S/B = median_s / ratio).

Output: one PNG per (op, hosts, rate): OUTDIR/<op>-<hosts>h-<rate>.png
(default OUTDIR: the directory of the first input).  Log-log axes, one line
per implementation (median, with a band from min to max), the bound S/B as a
dashed line and 1.046 x S/B as a dotted line: with MTU 1500 TCP carries at
most 1448 payload bytes per 1514 bytes on the wire, so no TCP transfer of S
bytes can beat 1.046 x S/B.  For op "shuffle" the bound is (hosts-1) x S/B,
the partitions each node receives.  If the same (impl, size) appears more than once
in a group, the last row read wins.
"""
import argparse
import math
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TCP_OVERHEAD = 1514.0 / 1448.0  # wire bytes per payload byte, MTU 1500

UNITS = {"bit": 1.0, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}

STYLE = {
    "mpich": ("tab:blue", "o"),
    "openmpi": ("tab:orange", "s"),
    "openmpi-pipe": ("tab:red", "^"),
    "gloo": ("tab:green", "D"),
    "tcp-reqrep": ("tab:gray", "x"),
    "tcp-reqrep+procs": ("tab:gray", "+"),
}


def rate_bps(rate):
    """'1gbit' -> 1e9 bits/s; None for 'none' or anything unparsable."""
    m = re.fullmatch(r"([0-9.]+)([a-zA-Z]+)", rate or "")
    if not m or m.group(2).lower() not in UNITS:
        return None
    return float(m.group(1)) * UNITS[m.group(2).lower()]


def label_for_bps(bps):
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        v = bps / UNITS[unit]
        if v >= 1 and abs(v - round(v)) < 0.01:
            return "%d%s" % (round(v), unit)
    return "%.0fbit" % bps


def size_label(n):
    for unit, f in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= f:
            v = n / f
            return ("%d %s" % (v, unit)) if v == int(v) else ("%.1f %s" % (v, unit))
    return "%d B" % n


def per_node(op, hosts):
    """Sizes each node receives: a shuffle's bound is (hosts - 1) * S / B."""
    return hosts - 1 if op == "shuffle" else 1


def read_rows(paths, forced_rate):
    """Yield dicts with op, size, hosts, impl, med, lo, hi, bps, ratelabel."""
    for path in paths:
        rate = forced_rate
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\n")
                if not line.strip():
                    continue
                if line.startswith("#"):
                    m = re.search(r"rate=(\S+)", line)
                    if m and forced_rate is None:
                        rate = m.group(1)
                    continue
                cols = line.split("\t")
                if cols[0] == "op":
                    continue
                if len(cols) < 9:
                    print("plot.py: %s:%d: expected 9 columns, skipped" % (path, lineno),
                          file=sys.stderr)
                    continue
                op, size, hosts, impl, med, lo, hi, ratio = cols[:8]
                try:
                    size, hosts = int(size), int(hosts)
                    med, lo, hi = float(med), float(lo), float(hi)
                except ValueError:
                    continue  # FAIL rows
                bps = rate_bps(rate) if rate else None
                if bps is None and rate != "none":
                    try:  # recover the rate from the ratio column
                        bps = size * per_node(op, hosts) * 8.0 / (med / float(ratio))
                        bps = float("%.3g" % bps)
                    except (ValueError, ZeroDivisionError):
                        bps = None
                label = rate if (rate and rate_bps(rate)) else (
                    label_for_bps(bps) if bps else "none")
                yield dict(op=op, size=size, hosts=hosts, impl=impl, med=med, lo=lo,
                           hi=hi, bps=bps, ratelabel=label)


def plot_group(key, rows, outdir):
    op, hosts, ratelabel = key
    bps = next((r["bps"] for r in rows if r["bps"]), None)
    fig, ax = plt.subplots(figsize=(7.5, 5.2))
    impls = sorted({r["impl"] for r in rows},
                   key=lambda i: (list(STYLE).index(i) if i in STYLE else 99, i))
    for impl in impls:
        pts = {}
        for r in rows:
            if r["impl"] == impl:
                pts[r["size"]] = r  # last one wins
        xs = sorted(pts)
        color, marker = STYLE.get(impl, (None, "x"))
        ax.plot(xs, [pts[x]["med"] for x in xs], marker=marker, color=color, label=impl)
        ax.fill_between(xs, [pts[x]["lo"] for x in xs], [pts[x]["hi"] for x in xs],
                        color=color, alpha=0.15, linewidth=0)
    sizes = sorted({r["size"] for r in rows})
    if bps and sizes:
        lo_s, hi_s = sizes[0], sizes[-1]
        xs = [lo_s * (hi_s / lo_s) ** (i / 50.0) for i in range(51)] if hi_s > lo_s else [lo_s]
        per = per_node(op, hosts)
        bound = [x * per * 8.0 / bps for x in xs]
        ax.plot(xs, bound, "k--", linewidth=1, label="%sS/B (link bound, B = %s)" % (
            "%d x " % per if per > 1 else "", ratelabel))
        ax.plot(xs, [b * TCP_OVERHEAD for b in bound], "k:", linewidth=1.2,
                label="1.046 x that (TCP goodput bound, MTU 1500)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sizes)
    ax.set_xticklabels([size_label(s) for s in sizes], rotation=30, ha="right")
    ax.minorticks_off()
    ax.set_xlabel("object size S")
    ax.set_ylabel("time: start to last finish (s)")
    ax.set_title("%s, %d hosts, link %s" % (op, hosts, ratelabel))
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    path = os.path.join(outdir, "%s-%dh-%s.png" % (op, hosts, ratelabel))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="TSV files from baselines.sh")
    ap.add_argument("-o", "--outdir", help="directory for the PNGs")
    ap.add_argument("--rate", help="link rate of every row, e.g. 1gbit (overrides comments)")
    args = ap.parse_args()
    outdir = args.outdir or os.path.dirname(os.path.abspath(args.files[0]))
    os.makedirs(outdir, exist_ok=True)
    groups = {}
    for r in read_rows(args.files, args.rate):
        groups.setdefault((r["op"], r["hosts"], r["ratelabel"]), []).append(r)
    if not groups:
        print("plot.py: no plottable rows", file=sys.stderr)
        return 1
    for key in sorted(groups):
        print(plot_group(key, groups[key], outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
