#!/usr/bin/python3
"""param_server.py - the Hoplite paper's asynchronous parameter server.

A toy linear regression (y = X w*, X random) is split across W worker
processes, each attached to its own hoplite store (its own "node"). The
server, on node 0, runs R rounds. In each round:

  1. it starts a subset reduce over the next pending gradient of every
     worker, keeping only the first k to arrive:
         reduce(sum/t, [g/0/s0, g/1/s1, ...], num_objects=k, op=sum, dtype=f32)
  2. reduce_sources(sum/t) tells which k gradients were included;
  3. it applies w <- w - lr * sum, puts the new weights w/t (a numpy array
     with header, put_array), and tells each included worker j which
     version to use next by putting a tiny object next/j/s = t.

Each worker loops: get the weights it was told to use (gets of one weights
object by several workers become a hoplite broadcast), compute its
gradient, put it as g/j/s (raw float32, a reduce source), wait for
next/j/s. Workers whose gradient was not included keep it pending; it is
among the sources of the next round (asynchronous SGD with staleness).

The training loss over all workers' data is printed every round; the run
exits 0 if it fell below --target times its initial value, else 1.

    PYTHONPATH=python /usr/bin/python3 python/examples/param_server.py
    PYTHONPATH=python /usr/bin/python3 python/examples/param_server.py \
        --workers 6 --k 3 --rounds 80 --dim 65536

Without --sockets it starts its own local cluster (W+1 stores on
127.0.0.1, via hoplite.cluster.LocalCluster) and stops it at the end. With
--sockets S0,S1,... the server uses S0 and worker j uses S[(j+1) % n];
that cluster's directory needs --delete-any, since the server deletes the
gradients the workers put (by default only an object's maker may).
"""
import argparse
import multiprocessing as mp
import os
import sys
import time

import numpy as np

try:
    import hoplite
except ImportError:  # run from a source checkout without PYTHONPATH
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import hoplite
from hoplite.cluster import LocalCluster

WAIT = 300.0  # seconds any single wait may take before the run is declared stuck


def shard(seed, j, n, d):
    """Worker j's data: X (n x d, rows of norm ~1) and y = X w*."""
    w_true = np.random.default_rng(seed).standard_normal(d).astype(np.float32)
    rng = np.random.default_rng(seed * 1000 + j + 1)
    X = (rng.standard_normal((n, d), dtype=np.float32) / np.float32(np.sqrt(d)))
    return X, X @ w_true


def worker(j, socket, run, seed, n, d, delay):
    c = hoplite.Client(socket, timeout=WAIT)
    X, y = shard(seed, j, n, d)
    version, s = 0, 0
    try:
        while True:
            w = c.get_array("%s/w/%d" % (run, version), timeout=WAIT)
            g = X.T @ (X @ w - y)                  # gradient of 0.5 * ||X w - y||^2
            del w                                  # release the weights' hold
            if delay:
                time.sleep(delay * (1 + j % 3))    # heterogeneous worker speeds
            c.put("%s/g/%d/%d" % (run, j, s), g.astype(np.float32, copy=False))
            with c.get("%s/next/%d/%d" % (run, j, s), timeout=WAIT) as nxt:
                version = int(np.frombuffer(nxt, dtype=np.int64)[0])
            if version < 0:
                return
            s += 1
    finally:
        c.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--k", type=int, default=2, help="gradients reduced per round")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--dim", type=int, default=32768, help="model size (float32)")
    ap.add_argument("--samples", type=int, default=256, help="samples per worker")
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--delay", type=float, default=0.01,
                    help="extra seconds per gradient, times 1..3 by worker")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--target", type=float, default=0.01,
                    help="success: final loss < target * initial loss")
    ap.add_argument("--sockets", help="comma-separated store sockets (default: own cluster)")
    args = ap.parse_args()
    if not 1 <= args.k <= args.workers:
        ap.error("need 1 <= k <= workers")

    lc = None
    if args.sockets:
        socks = args.sockets.split(",")
    else:
        # the server deletes the gradients the workers put: any node may
        # delete (by default only the node that made an object)
        lc = LocalCluster(nodes=args.workers + 1, memory="256M",
                          dir_args=["--delete-any"]).start()
        socks = lc.sockets
        print("started a local cluster: %d stores in %s" % (len(socks), lc.workdir), flush=True)
    run = "ps-%d-%d" % (os.getpid(), int(time.time()))
    ctx = mp.get_context("spawn")
    procs = []
    c = None
    try:
        c = hoplite.Client(socks[0], timeout=WAIT)
        d, n, W = args.dim, args.samples, args.workers
        data = [shard(args.seed, j, n, d) for j in range(W)]

        def loss(w):
            return sum(0.5 * float(np.sum((X @ w - y) ** 2)) for X, y in data) / (n * W)

        w = np.zeros(d, dtype=np.float32)
        c.put_array("%s/w/0" % run, w)
        for j in range(W):
            p = ctx.Process(target=worker, args=(j, socks[(j + 1) % len(socks)], run, args.seed,
                                                 n, d, args.delay), daemon=True)
            p.start()
            procs.append(p)
        loss0 = loss(w)
        print("%d workers, model %d floats (%d KiB), %d samples each; reduce the first %d "
              "of %d gradients per round" % (W, d, d * 4 // 1024, n, args.k, W), flush=True)
        print("round   0  loss %.3e" % loss0, flush=True)
        pending = [0] * W
        included = [0] * W
        t_start = time.monotonic()
        for t in range(1, args.rounds + 1):
            sources = ["%s/g/%d/%d" % (run, j, pending[j]) for j in range(W)]
            target = "%s/sum/%d" % (run, t)
            c.reduce(target, sources, op="sum", dtype="f32", num_objects=args.k)
            used = c.reduce_sources(target, timeout=WAIT)
            assert len(used) == args.k, used
            gsum = c.get_array(target, dtype=np.float32, timeout=WAIT)
            w = w - np.float32(args.lr) * gsum
            del gsum
            c.delete(target)
            c.put_array("%s/w/%d" % (run, t), w)
            workers_used = []
            for sid in used:
                j = int(sid.split("/")[-2])
                workers_used.append(j)
                c.put("%s/next/%d/%d" % (run, j, pending[j]), np.array([t], dtype=np.int64))
                c.delete(sid)
                pending[j] += 1
                included[j] += 1
            cur = loss(w)
            print("round %3d  loss %.3e  gradients from workers %s" %
                  (t, cur, sorted(workers_used)), flush=True)
        elapsed = time.monotonic() - t_start
        for j in range(W):  # the instruction after each pending gradient: stop
            c.put("%s/next/%d/%d" % (run, j, pending[j]), np.array([-1], dtype=np.int64))
        for p in procs:
            p.join(WAIT)
        bad = [p.exitcode for p in procs if p.exitcode != 0]
        final = loss(w)
        print("%d rounds in %.2f s; gradients used per worker: %s" %
              (args.rounds, elapsed, included), flush=True)
        print("loss %.3e -> %.3e (%.2e of the initial loss)" % (loss0, final, final / loss0),
              flush=True)
        for o in c.list(run + "/"):
            try:
                c.delete(o.id)
            except hoplite.NotFound:
                pass
        if bad:
            print("FAILED: workers exited with %s" % bad, flush=True)
            return 1
        if not final < args.target * loss0:
            print("FAILED: did not converge below %g of the initial loss" % args.target,
                  flush=True)
            return 1
        print("converged", flush=True)
        return 0
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(10)
        if c is not None:
            c.close()
        if lc is not None:
            lc.stop()


if __name__ == "__main__":
    sys.exit(main())
