#!/usr/bin/python3
"""bench_aio.py - asyncio.gather of many small gets: the asyncio calls
(Client.get_async, one thread, the handle's completion descriptor) versus
the blocking call in the loop's default executor (run_in_executor(None,
client.get), a thread hop per get).

    /usr/bin/python3 python/bench_aio.py                  # 1000 gets of 1 KiB, 7 reps
    /usr/bin/python3 python/bench_aio.py --n 1000 --size 1K --reps 7

One directory and one store on 127.0.0.1 (hoplite.cluster.LocalCluster,
servers from $HOPLITE_BUILD_DIR or the checkout's build/). The objects are
put once; each repetition, after one untimed warm-up of each, runs both
ways alternately on a fresh event loop and checks every object's bytes.
Prints the median, min and max seconds of each and gets/s at the median.
"""
import argparse
import asyncio
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hoplite  # noqa: E402
from hoplite.cluster import LocalCluster  # noqa: E402


def parse_size(s):
    s = str(s).strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KM" else s) * mult)


async def via_async(c, ids):
    return await asyncio.gather(*[c.get_async(i, timeout=30) for i in ids])


async def via_executor(c, ids):
    loop = asyncio.get_running_loop()
    return await asyncio.gather(*[loop.run_in_executor(None, c.get, i, 30) for i in ids])


def timed(fn, c, ids, want):
    t0 = time.perf_counter()
    views = asyncio.run(fn(c, ids))
    dt = time.perf_counter() - t0
    assert [bytes(v) for v in views] == want, "wrong bytes"
    return dt


def main():
    ap = argparse.ArgumentParser(description="get_async vs run_in_executor(client.get)")
    ap.add_argument("--n", type=int, default=1000, help="gets per gather")
    ap.add_argument("--size", default="1K", help="bytes per object")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    size = parse_size(args.size)
    lc = LocalCluster(nodes=1, memory="256M").start()
    try:
        c = hoplite.Client(lc.socket(0))
        ids = ["bench-aio-%d" % i for i in range(args.n)]
        want = [(i.encode() + b".") * (size // (len(i) + 1)) + b"x" * (size % (len(i) + 1))
                for i in ids]
        c.put_many(list(zip(ids, want)))
        ways = (("get_async", via_async), ("run_in_executor", via_executor))
        samples = {name: [] for name, _ in ways}
        for name, fn in ways:  # warm-up (the executor's threads, the descriptor)
            timed(fn, c, ids, want)
        for _ in range(args.reps):
            for name, fn in ways:
                samples[name].append(timed(fn, c, ids, want))
        print("asyncio.gather of %d gets of %d B, one store on 127.0.0.1, %d reps "
              "(default executor: %d threads)" % (args.n, size, args.reps,
                                                    min(32, (os.cpu_count() or 1) + 4)))
        print("%-16s %9s %9s %9s %10s" % ("way", "median_s", "min_s", "max_s", "gets/s"))
        for name, s in samples.items():
            med = statistics.median(s)
            print("%-16s %9.4f %9.4f %9.4f %10.0f" % (name, med, min(s), max(s), args.n / med))
        ratio = statistics.median(samples["run_in_executor"]) / \
            statistics.median(samples["get_async"])
        print("run_in_executor / get_async = %.2fx" % ratio)
        c.close()
    finally:
        lc.stop()


if __name__ == "__main__":
    main()
