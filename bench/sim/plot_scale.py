#!/usr/bin/python3
"""plot_scale.py - hpsim's scale table (`hpsim scale`) as a plot, next to
Kraken's and Dragonfly's published broadcast figures converted to the same
terms (time over S/B, the object's size over one host's link rate).

    /usr/bin/python3 bench/sim/plot_scale.py SCALE.txt [-o OUT.png]

SCALE.txt: the table `hpsim scale` prints (one row per run; rows marked
UNFINISHED or with a failure are left out). Output: one PNG (default: the
table's name with .png): time_s over S/B against the number of nodes.

The published figures, and how they are converted (see the results page):
  - Kraken (Uber): 3 GB to 2 600 hosts, p50 10 s, each host capped at
    300 MB/s: S/B = 3e9 / 300e6 = 10 s, so p50 = 1.0 x S/B (a median, not
    the slowest host: hpsim's time_s is the slowest).
  - Dragonfly (CNCF): 1 GB to 990 nodes in 28.5 s, link rate not given:
    28.5 s is 3.4 x S/B on 1 Gbit/s links, 34 x on 10 Gbit/s (drawn as a
    bar between the two).
"""
import argparse
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(path):
    out = []
    for line in open(path):
        f = line.split()
        if len(f) < 19 or not f[0].isdigit() or "UNFINISHED" in line:
            continue
        out.append({"nodes": int(f[0]), "gbit": float(f[1]), "size": f[2],
                    "arrive": float(f[3]), "fail": f[4], "t": float(f[5]),
                    "bound": float(f[6]), "eff": 0.956})
    return out


def sbg(r):
    size = {"G": 1 << 30, "M": 1 << 20}[r["size"][-1]] * float(r["size"][:-1])
    return size / (r["gbit"] * 1e9 * r["eff"] / 8)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("-o", "--out", default=None)
    a = ap.parse_args()
    rs = [r for r in rows(a.table) if r["fail"] == "-"]
    if not rs:
        sys.exit("plot_scale.py: no finished no-failure rows in " + a.table)
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    styles = {(10, 0): ("o-", "hpsim 10 Gbit/s, all at once"),
              (25, 0): ("s-", "hpsim 25 Gbit/s, all at once"),
              (10, 10): ("o--", "hpsim 10 Gbit/s, arriving over 10 s (slowest get)"),
              (25, 10): ("s--", "hpsim 25 Gbit/s, arriving over 10 s (slowest get)")}
    for (g, arr), (st, label) in styles.items():
        pts = sorted((r["nodes"], r["t"] / sbg(r)) for r in rs
                     if r["gbit"] == g and r["arrive"] == arr)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], st, label=label)
    ax.plot([2600], [1.0], "r*", markersize=14,
            label="Kraken: 3 GB to 2 600 hosts, p50 10 s at 300 MB/s (= 1.0 x S/B)")
    ax.plot([990, 990], [28.5 / (8e9 / 1e9), 28.5 / (8e9 / 10e9)], "g-", linewidth=6,
            alpha=0.5, label="Dragonfly: 1 GB to 990 nodes, 28.5 s (3.4x at 1 Gbit/s .. 34x at 10)")
    ax.axhline(1.0, color="k", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes")
    ax.set_ylabel("time / (S/B)   (S/B: object size over one link's goodput)")
    ax.set_title("1 GiB broadcast: hpsim (real directory decisions) vs published figures")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="both", alpha=0.3)
    out = a.out or a.table.rsplit(".", 1)[0] + ".png"
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("wrote", out)


if __name__ == "__main__":
    main()
