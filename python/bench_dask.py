#!/usr/bin/python3
"""bench_dask.py - broadcast a large numpy array to every Dask worker:
through hoplite versus Dask's own client.scatter(..., broadcast=True).

    sudo /usr/bin/python3 python/bench_dask.py                 # 8 hosts, 1gbit, 256 MiB
    sudo /usr/bin/python3 python/bench_dask.py --reps 5 --size 256M --rate 1gbit
    /usr/bin/python3 python/bench_dask.py --local --size 16M --reps 1 --workers 2 --pool 128M
                                                   # quick smoke run on 127.0.0.1

Not part of the test suite (needs root, takes minutes). What it does:
  1. waits while another benchmark (bench/run_coll.sh) runs, so that the two
     do not disturb each other's timings (checks every 3 minutes, up to 60);
  2. HPL_NS_PREFIX=hpld bench/cluster.sh up 8 RATE: emulated hosts
     hpld-h0..h7, one switch, every host shaped to RATE both ways;
  3. hoplite: the directory in h0, one store per host (pool 1 GiB, prefaulted,
     as bench/run_coll.sh does), sockets in a work directory on the shared
     file system;
  4. Dask: dask-scheduler in h0, one dask-worker in each of h1..h7
     (the scheduler runs with its Active Memory Manager off: with it on, as
     distributed 2022.12 has by default, its ReduceReplicas policy drops the
     copies that scatter(broadcast=True) is making every 2 s, and a 256 MiB
     broadcast at 1gbit never finishes - measured: replicas went 1, 3, 2, 1,
     2, 1 ... for minutes while ~1.4 Gbit/s moved between workers)
     (--nthreads 1 --no-nanny --host ADDR), each with HOPLITE_SOCKET naming
     its host's store;
  5. the driver: a separate /usr/bin/python3 (this file with --driver) in h0,
     the Dask client, with HOPLITE_SOCKET = h0's store; it registers
     hoplite.dask's worker plugin (each worker connects to the store named
     by its HOPLITE_SOCKET). Per repetition, after one untimed warm-up of
     each, alternating, the same code but for the scatter call:
       hoplite: t0; fut = hoplite.dask.scatter(client, array, broadcast=True,
                hash=False) (put into h0's store once, every worker reads it
                through its own store); one task per worker summing it;
       dask:    t0; fut = client.scatter(array, broadcast=True, hash=False);
                the same per-worker sum task on fut;
     sample = (latest task end, CLOCK_MONOTONIC, shared by the namespaces) - t0.
     Every sum is checked against the driver's;
  6. prints a table, writes bench/results/dask-bcast-RATE.tsv
     (impl size workers median_s min_s max_s), tears everything down (also on
     failure or Ctrl-C): processes by pid, then bench/cluster.sh down --kill.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
sys.path.insert(0, HERE)
PREFIX = "hpld"


def parse_size(s):
    s = str(s).strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(float(s[:-1] if s[-1:] in "KMG" else s) * mult)


def cpu_times():
    """(busy, total) jiffies of all cores, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


# ---------------------------------------------------------------- driver (host 0)

def sum_task(a):
    """Runs on a worker: a is the array, scattered by Dask or by hoplite."""
    s = a.sum().item()
    return s, time.monotonic(), os.environ.get("HOPLITE_SOCKET")


def driver(args):
    import numpy as np
    import distributed
    import hoplite.dask as hd

    size, nw = parse_size(args.size), args.workers
    client = distributed.Client(scheduler_file=args.scheduler_file, timeout=120)
    client.wait_for_workers(nw, timeout=300)
    workers = sorted(client.scheduler_info()["workers"])
    assert len(workers) == nw, workers
    if args.data == "random":
        # incompressible, like trained weights; int64 sums are exact (wrap-around)
        x = np.random.default_rng(1).integers(-2 ** 62, 2 ** 62, size // 8, dtype=np.int64)
    else:
        # a ramp: lz4 (Dask's default comm compression) shrinks it a lot
        x = np.arange(size // 8, dtype=np.float64) % 1000.0
    expect = x.sum().item()
    hd.client()  # connect before timing
    socks = hd.register(client)  # each worker to the store its HOPLITE_SOCKET names
    if len(set(socks.values())) != nw:
        raise SystemExit("workers are not on %d different stores: %s" % (nw, socks))

    def one(impl, rep):
        c0 = cpu_times()
        t0 = time.monotonic()
        if impl == "hoplite":
            data = hd.scatter(client, x, broadcast=True, hash=False, timeout=600)
        else:
            data = client.scatter(x, broadcast=True, hash=False)
        futs = [client.submit(sum_task, data, pure=False, workers=[w], allow_other_workers=False)
                for w in workers]
        res = client.gather(futs)
        t_gather = time.monotonic() - t0
        c1 = cpu_times()
        # untimed: the broadcast really made a copy per worker
        held = len(client.who_has(data)[data.key])
        if held != nw:
            raise SystemExit("%s scatter(broadcast=True) left %d copies, not %d"
                             % (impl, held, nw))
        sample = max(r[1] for r in res) - t0
        bad = [r for r in res if r[0] != expect]
        if bad:
            raise SystemExit("%s rep %d: wrong sums %s (expected %r)" % (impl, rep, bad, expect))
        if impl == "hoplite":
            socks = {r[2] for r in res}
            if len(socks) != nw:
                raise SystemExit("workers did not use %d different stores: %s" % (nw, socks))
        del futs, data
        if impl == "hoplite":
            hd.wait_deletes(client)  # the futures are gone: so is the object
        cpu = 100.0 * (c1[0] - c0[0]) / max(1, c1[1] - c0[1])
        return sample, t_gather, cpu

    samples = {"hoplite": [], "dask": []}
    cpus = {"hoplite": [], "dask": []}
    for rep in range(args.reps + 1):
        for impl in ("hoplite", "dask"):
            s, g, cpu = one(impl, rep)
            tag = "warm-up" if rep == 0 else "rep %d" % rep
            print("%-8s %-7s %7.3f s (gather returned at %.3f s), CPU %3.0f %%" %
                  (impl, tag, s, g, cpu), flush=True)
            if rep:
                samples[impl].append(s)
                cpus[impl].append(cpu)
            time.sleep(1.0)  # let workers free the previous copies
    client.close()
    out = {impl: {"samples": v, "cpu": cpus[impl]} for impl, v in samples.items()}
    with open(args.result, "w") as f:
        json.dump(out, f)


# ---------------------------------------------------------------- orchestrator (root ns)

def die_with_parent():
    import ctypes
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM, 0, 0, 0)


def sh(*cmd, **kw):
    return subprocess.run(list(cmd), check=True, stdout=subprocess.PIPE, text=True, **kw).stdout


def wait_for_other_benchmark(max_wait_s):
    t0 = time.monotonic()
    while True:
        r = subprocess.run(["pgrep", "-f", "run_coll.sh"], stdout=subprocess.PIPE, text=True)
        pids = [p for p in r.stdout.split() if int(p) != os.getpid()]
        if not pids:
            return
        if time.monotonic() - t0 > max_wait_s:
            raise SystemExit("bench/run_coll.sh (pids %s) still running after %d min; giving up"
                             % (" ".join(pids), max_wait_s // 60))
        print("bench/run_coll.sh is running (pids %s); waiting 3 minutes..." % " ".join(pids),
              flush=True)
        time.sleep(180)


def orchestrate(args):
    from hoplite.cluster import LocalCluster, wait_for_file

    if os.geteuid() != 0 and not args.local:
        raise SystemExit("bench_dask.py needs root (network namespaces)")
    hosts = args.workers + 1
    size = parse_size(args.size)
    env = dict(os.environ, HPL_NS_PREFIX=PREFIX)
    cluster_sh = os.path.join(TOP, "bench", "cluster.sh")
    if not args.local:
        wait_for_other_benchmark(args.max_wait_min * 60)

    procs = []
    lc = None
    work = tempfile.mkdtemp(prefix="hpld-dask-")

    def on_signal(sig, frame):
        raise SystemExit(128 + sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def spawn(host, argv, log, extra_env=None):
        e = dict(os.environ, PYTHONPATH=HERE)
        if extra_env:
            e.update(extra_env)
        f = open(os.path.join(work, log), "ab")
        ns = [] if args.local else ["ip", "netns", "exec", "%s-h%d" % (PREFIX, host)]
        p = subprocess.Popen(ns + argv,
                             stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
                             env=e, cwd=work, preexec_fn=die_with_parent)
        f.close()
        procs.append(p)
        return p

    try:
        if args.local:
            print("== local smoke run: every process on 127.0.0.1, no shaping", flush=True)
            addrs = ["127.0.0.1"] * hosts
            lhosts = [(None, a) for a in addrs]
        else:
            print("== emulated cluster: %d hosts at %s (prefix %s)" % (hosts, args.rate, PREFIX),
                  flush=True)
            subprocess.run([cluster_sh, "up", str(hosts), args.rate], env=env, check=True)
            addrs = [sh(cluster_sh, "addr", str(i), env=env).strip() for i in range(hosts)]
            lhosts = [("%s-h%d" % (PREFIX, i), a) for i, a in enumerate(addrs)]
        lc = LocalCluster(nodes=hosts, memory=args.pool, workdir=os.path.join(work, "hoplite"),
                          hosts=lhosts, store_args=["--prefault"], timeout=180).start()
        print("hoplite: directory %s, %d stores (pool %s, prefaulted)" %
              (lc.dir_addr, hosts, args.pool), flush=True)
        sched_file = os.path.join(work, "scheduler.json")
        sched = spawn(0, ["/usr/bin/dask-scheduler", "--host", addrs[0], "--port", "0",
                          "--no-dashboard", "--scheduler-file", sched_file], "scheduler.log",
                      {"DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START": "False"})
        wait_for_file(sched_file, sched, 120)
        for i in range(1, hosts):
            spawn(i, ["/usr/bin/dask-worker", "--scheduler-file", sched_file, "--nthreads", "1",
                      "--no-nanny", "--host", addrs[i], "--no-dashboard", "--memory-limit", "0",
                      "--name", "h%d" % i, "--local-directory", os.path.join(work, "w%d" % i)],
                  "worker-%d.log" % i, {"HOPLITE_SOCKET": lc.socket(i)})
        result = os.path.join(work, "result.json")
        drv = spawn(0, [sys.executable, os.path.abspath(__file__), "--driver",
                        "--scheduler-file", sched_file, "--result", result,
                        "--size", str(size), "--reps", str(args.reps),
                        "--workers", str(args.workers), "--data", args.data],
                    "driver.log", {"HOPLITE_SOCKET": lc.socket(0)})
        # follow the driver's output while it runs
        with open(os.path.join(work, "driver.log"), "rb") as f:
            while True:
                try:
                    rc = drv.wait(2.0)
                except subprocess.TimeoutExpired:
                    rc = None
                chunk = f.read()
                if chunk:
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
                if rc is not None:
                    break
        if rc != 0:
            raise SystemExit("driver failed (exit %s); logs in %s" % (rc, work))
        dead = lc.alive()
        if dead:
            raise SystemExit("hoplite servers died: %s; logs in %s" % (dead, work))
        with open(result) as f:
            res = json.load(f)
        report(args, size, res)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if lc is not None:
            lc.stop()
        if not args.local:
            subprocess.run([cluster_sh, "down", "--kill"], env=env)
        if args.keep_logs:
            print("logs kept in %s" % work)
        else:
            import shutil
            shutil.rmtree(work, ignore_errors=True)


def report(args, size, res):
    rows = []
    for impl in ("hoplite", "dask"):
        s = res[impl]["samples"]
        rows.append((impl, size, args.workers, statistics.median(s), min(s), max(s),
                     statistics.median(res[impl]["cpu"])))
    ratio = rows[1][3] / rows[0][3]
    sb = size * 8 / (parse_rate(args.rate))
    print()
    where = ("127.0.0.1, unshaped" if args.local else
             "%d hosts at %s (S/B = %.2f s)" % (args.workers + 1, args.rate, sb))
    print("broadcast of %d MiB (%s data) to %d Dask workers, %s, %d reps" %
          (size >> 20, args.data, args.workers, where, args.reps))
    print("%-8s %9s %9s %9s %8s" % ("impl", "median_s", "min_s", "max_s", "cpu_pct"))
    for impl, _, _, med, lo, hi, cpu in rows:
        print("%-8s %9.3f %9.3f %9.3f %8.0f" % (impl, med, lo, hi, cpu))
    print("dask scatter / hoplite = %.2fx" % ratio)
    if args.local and not args.out:
        return
    out = args.out or os.path.join(TOP, "bench", "results", "dask-bcast-%s.tsv" % args.rate)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("# dask-bcast rate=%s hosts=%d reps=%d data=%s date=%s "
                "ratio_dask_over_hoplite=%.2f cpu_pct_hoplite=%.0f cpu_pct_dask=%.0f\n" %
                (args.rate, args.workers + 1, args.reps, args.data,
                 time.strftime("%Y-%m-%dT%H:%M:%S"), ratio, rows[0][6], rows[1][6]))
        f.write("impl\tsize\tworkers\tmedian_s\tmin_s\tmax_s\n")
        for impl, sz, w, med, lo, hi, _ in rows:
            f.write("%s\t%d\t%d\t%.4f\t%.4f\t%.4f\n" % (impl, sz, w, med, lo, hi))
    print("wrote %s" % out)


def parse_rate(r):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1}
    for u, m in units.items():
        if r.endswith(u):
            return float(r[:-len(u)]) * m
    return float("inf")


def main():
    ap = argparse.ArgumentParser(description="hoplite vs Dask scatter broadcast")
    ap.add_argument("--size", default="256M")
    ap.add_argument("--reps", type=int, default=5, help="timed repetitions (after a warm-up)")
    ap.add_argument("--workers", type=int, default=7, help="Dask workers = hosts - 1")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--pool", default="1G", help="hoplite pool per store")
    ap.add_argument("--out", help="TSV (default bench/results/dask-bcast-RATE.tsv)")
    ap.add_argument("--max-wait-min", type=int, default=60)
    ap.add_argument("--data", choices=("random", "ramp"), default="random",
                    help="random int64 (default, incompressible) or a float64 ramp "
                         "(i %% 1000, compressible)")
    ap.add_argument("--keep-logs", action="store_true")
    ap.add_argument("--local", action="store_true",
                    help="smoke run on 127.0.0.1 without namespaces (no figures written "
                         "unless --out is given)")
    ap.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scheduler-file", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        driver(args)
    else:
        orchestrate(args)


if __name__ == "__main__":
    main()
