#!/usr/bin/env python3
"""ha_failover.py - how long a cluster with standby directories is without a
directory when the leader dies, at many objects (issue 43's figures).

    /usr/bin/python3 bench/ha_failover.py [--build build] [--objects 10000,1000000]
                                          [--large 16] [--lease-ms 1000] [--reps 3]

For each object count: a one-member etcd (Debian's /usr/bin/etcd), two
hoplite-directory processes (--etcd, --lease-ms), two stores given both
addresses. Store A is loaded with N objects of 100 B (put_many, 1000 at a
time) and --large objects of 1 MiB. Then, per repetition, the leader is
killed with SIGKILL at T0, and the script times:

  first new get  T0 -> the first object put after T0 on store B got on
                 store A (a put is tried every 20 ms with a 200 ms timeout);
  leader         T0 -> the standby holds the lease and listens;
  re-populated   T0 -> store A has re-reported everything it holds (its log's
                 "re-reported N objects to the directory in X ms" line after
                 its new registration), and the last loaded object is listed
                 with a complete copy;
  old get        T0 -> a get on store B of a loaded small object succeeds.

The killed directory is started again (a standby) before the next
repetition, so the leadership alternates. Prints one row per repetition
and the medians. Everything started is killed by pid at the end.
"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

procs = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def listening(port):
    s = socket.socket()
    s.settimeout(0.2)
    try:
        s.connect(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def start(argv, log):
    p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def etcd_leader(port, prefix):
    key = base64.b64encode((prefix + "/leader").encode()).decode()
    try:
        req = urllib.request.Request("http://127.0.0.1:%d/v3/kv/range" % port,
                                     data=json.dumps({"key": key}).encode())
        with urllib.request.urlopen(req, timeout=1) as r:
            kvs = json.loads(r.read()).get("kvs") or []
    except OSError:
        return None
    return int(base64.b64decode(kvs[0]["value"]).decode().rsplit(":", 1)[1]) if kvs else None


def rereports(log):
    """The store log's re-report lines, as (objects, ms)."""
    out = []
    with open(log) as f:
        for line in f:
            i = line.find("re-reported ")
            if i >= 0:
                w = line[i:].split()
                try:
                    out.append((int(w[1]), int(w[-2])))
                except (ValueError, IndexError):
                    pass
    return out


def one_count(a, n, top, hoplite):
    etcd_port, peer = free_port(), free_port()
    start(["/usr/bin/etcd", "--data-dir", os.path.join(top, "etcd"),
           "--listen-client-urls", "http://127.0.0.1:%d" % etcd_port,
           "--advertise-client-urls", "http://127.0.0.1:%d" % etcd_port,
           "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
           "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
           "--initial-cluster", "default=http://127.0.0.1:%d" % peer,
           "--election-timeout", "200", "--heartbeat-interval", "20"], os.path.join(top, "etcd.log"))
    prefix = "/hoplite/bench-%d-%d" % (os.getpid(), n)
    dports = [free_port(), free_port()]
    dirs = {}

    def start_dir(port):
        dirs[port] = start([os.path.join(a.build, "hoplite-directory"), "--listen",
                            "127.0.0.1:%d" % port, "--etcd", "http://127.0.0.1:%d" % etcd_port,
                            "--lease-ms", str(a.lease_ms), "--ha-prefix", prefix],
                           os.path.join(top, "dir-%d.log" % port))

    for p in dports:
        start_dir(p)
        time.sleep(0.5)
    socks = []
    for i in range(2):
        d = os.path.join(top, "s%d" % i)
        os.mkdir(d, 0o700)
        socks.append(os.path.join(d, "s.sock"))
        start([os.path.join(a.build, "hoplite-store"), "--directory",
               ",".join("127.0.0.1:%d" % p for p in dports), "--socket", socks[i],
               "--memory", "2G" if n > 100000 else "256M", "--name", "n%d" % i],
              os.path.join(top, "store-%d.log" % i))
    time.sleep(1.0)
    ca = hoplite.Client(socket=socks[0], timeout=60)
    cb = hoplite.Client(socket=socks[1], timeout=60)
    small = os.urandom(100)
    t = time.time()
    for lo in range(0, n, 1000):
        ca.put_many([("o/%08d" % i, small) for i in range(lo, min(n, lo + 1000))])
    big = os.urandom(1 << 20)
    for i in range(a.large):
        ca.put("L/%d" % i, big)
    last = "o/%08d" % (n - 1)
    print("loaded %d objects of 100 B and %d of 1 MiB in %.1f s" % (n, a.large, time.time() - t),
          flush=True)
    rows = []
    for rep in range(a.reps):
        lead = etcd_leader(etcd_port, prefix)
        if lead is None:
            sys.exit("no leader before repetition %d" % rep)
        before = len(rereports(os.path.join(top, "store-0.log")))
        dirs[lead].kill()
        t0 = time.time()
        t_new = t_leader = t_old = t_repop = None
        k = 0
        while t_new is None and time.time() - t0 < 60:
            oid = "new/%d/%d/%d" % (n, rep, k)
            k += 1
            try:
                cb.put(oid, small, timeout=0.2)
                ca.get(oid, timeout=5)
                t_new = time.time() - t0
            except hoplite.HopliteError:
                time.sleep(0.02)
        while time.time() - t0 < 600 and (t_leader is None or t_old is None or t_repop is None):
            now = time.time() - t0
            if t_leader is None:
                other = [p for p in dports if p != lead][0]
                if listening(other):
                    t_leader = now
            if t_old is None:
                try:
                    cb.get("o/%08d" % (rep * 7919 % n), timeout=1)
                    t_old = time.time() - t0
                except hoplite.HopliteError:
                    pass
            if t_repop is None and len(rereports(os.path.join(top, "store-0.log"))) > before:
                try:
                    st = ca.stat(last, timeout=1)
                    if st.complete > 0:
                        t_repop = time.time() - t0
                except (hoplite.HopliteError, AttributeError):
                    pass
            time.sleep(0.01)
        rr = rereports(os.path.join(top, "store-0.log"))
        rr_n, rr_ms = rr[-1] if len(rr) > before else (0, -1)
        rows.append((t_new, t_leader, t_repop, t_old, rr_n, rr_ms))
        print("objects %d rep %d: first new get %.2f s, leader %.2f s, re-populated %.2f s "
              "(store A re-reported %d objects in %d ms), old get %.2f s"
              % (n, rep, t_new or -1, t_leader or -1, t_repop or -1, rr_n, rr_ms, t_old or -1),
              flush=True)
        start_dir(lead)  # a standby again
        time.sleep(1.5)
    med = [statistics.median([r[i] for r in rows if r[i] is not None] or [-1]) for i in range(4)]
    print("objects %d, lease %d ms, median of %d: first new get %.2f s, leader %.2f s, "
          "re-populated %.2f s, old get %.2f s"
          % (n, a.lease_ms, len(rows), med[0], med[1], med[2], med[3]), flush=True)
    ca.close()
    cb.close()
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    procs.clear()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--objects", default="10000,1000000")
    ap.add_argument("--large", type=int, default=16)
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "python"))
    os.environ.setdefault("HOPLITE_BUILD_DIR", os.path.abspath(a.build))
    import hoplite
    for n in [int(x) for x in a.objects.split(",")]:
        top = tempfile.mkdtemp(prefix="hpl-hafo-")
        try:
            one_count(a, n, top, hoplite)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGKILL)
                    p.wait()
            procs.clear()
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
