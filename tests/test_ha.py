#!/usr/bin/env python3
"""test_ha.py BUILD_DIR - standby directories under a leader lease in etcd
(directory/ha.h), on loopback with real processes and a real etcd of three
members (Debian's etcd-server), all started here and killed by pid.

  1. Two directories (--lease-ms 1000), three stores given both addresses.
     Small and large objects are put; the leader is killed with SIGKILL; every
     object must be got intact on another store within 3 s of the kill, and
     new puts and gets work. The new leader's term is larger. A client that
     reads a small object all along reads it straight from the directory
     again after the failover (its store tells it where the leader moved).
  2. Step-down: the killed directory comes back as a standby; the leader gets
     SIGTERM and revokes its lease, so the standby leads well within a lease.
  3. Fencing: the leader's etcd is paused (SIGSTOP on every member): the
     leader must stop listening within its lease. Once etcd runs again, one
     directory leads and gets work again. Then the leader itself is paused
     past its lease: the standby leads, and the old one, resumed, fences
     before serving and stands by.
  4. Losing etcd's leader member (one of three) does not change which
     directory leads (4 s lease, while etcd elects another).
  5. A store refuses a directory whose term is older than one it registered
     with (a deposed leader): it counts it in dir_terms_refused and never
     registers with it.
  6. etcd itself restarted (all three members killed and started again)
     within three quarters of a 4 s lease: the leader keeps its term.
Skips (exit 77) without /usr/bin/etcd.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import base64

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
DIR_BIN = os.path.join(BUILD, "hoplite-directory")
STORE_BIN = os.path.join(BUILD, "hoplite-store")
CLI = os.path.join(BUILD, "hoplite")
ETCD = "/usr/bin/etcd"
LEASE_MS = 1000
procs = []  # every process started here, killed at the end by pid


def fail(msg):
    print("test_ha: FAIL: " + msg, file=sys.stderr)
    raise SystemExit(1)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start(argv, log):
    p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT)
    procs.append(p)
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


class Etcd:
    """Three members on loopback, quick elections."""

    def __init__(self, top):
        self.top = top
        self.names = ["e0", "e1", "e2"]
        self.cport = [free_port() for _ in self.names]
        self.pport = [free_port() for _ in self.names]
        self.procs = [None] * 3
        self.cluster = ",".join("%s=http://127.0.0.1:%d" % (n, p)
                                for n, p in zip(self.names, self.pport))

    def endpoints(self):
        return ",".join("http://127.0.0.1:%d" % p for p in self.cport)

    def start(self, i):
        d = os.path.join(self.top, self.names[i])
        self.procs[i] = start([
            ETCD, "--name", self.names[i], "--data-dir", d,
            "--listen-client-urls", "http://127.0.0.1:%d" % self.cport[i],
            "--advertise-client-urls", "http://127.0.0.1:%d" % self.cport[i],
            "--listen-peer-urls", "http://127.0.0.1:%d" % self.pport[i],
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.pport[i],
            "--initial-cluster", self.cluster, "--initial-cluster-state", "new",
            "--election-timeout", "200", "--heartbeat-interval", "20"],
            os.path.join(self.top, self.names[i] + ".log"))

    def call(self, path, body, port=None):
        for p in ([port] if port else self.cport):
            try:
                req = urllib.request.Request("http://127.0.0.1:%d%s" % (p, path),
                                             data=json.dumps(body).encode())
                with urllib.request.urlopen(req, timeout=1) as r:
                    return json.loads(r.read())
            except OSError:
                continue
        return None

    def raft_leader(self):
        """Index of the member etcd's raft currently follows."""
        for i, p in enumerate(self.cport):
            st = self.call("/v3/maintenance/status", {}, port=p)
            if st and st.get("leader") == st.get("header", {}).get("member_id"):
                return i
        fail("no etcd member says it leads")

    def wait_ready(self):
        t = time.time()
        while time.time() - t < 20:
            if self.call("/v3/kv/range", {"key": "eA=="}) is not None:
                return
            time.sleep(0.1)
        fail("etcd did not come up")

    def leader(self, prefix):
        """(address, term) of PREFIX/leader, or (None, 0)."""
        key = base64.b64encode((prefix + "/leader").encode()).decode()
        r = self.call("/v3/kv/range", {"key": key})
        kvs = (r or {}).get("kvs") or []
        if not kvs:
            return None, 0
        return base64.b64decode(kvs[0]["value"]).decode(), int(kvs[0]["create_revision"])


# A client process: with "put", puts 2000 small objects ha/r/N; else gets
# them one after another, every 10 ms, for ARGV[2] seconds; exit 1 if a get
# fails (each may wait 3 s: the failover is shorter).
READER = """
import sys, time, hoplite
c = hoplite.Client(socket=sys.argv[1], timeout=10)
if sys.argv[3] == "put":
    c.put_many([("ha/r/%d" % i, b"x" * 100) for i in range(2000)])
    sys.exit(0)
end, i = time.time() + float(sys.argv[2]), 0
while time.time() < end:
    c.get("ha/r/%d" % i, timeout=3)  # each once: its store never holds it
    i += 1
    time.sleep(0.01)
"""


def asan_env():
    """A sanitizer build's libhoplite needs libasan first in a python that
    loads it through ctypes (as python/tests/conftest.py does)."""
    lib = os.path.join(BUILD, "libhoplite.so")
    try:
        with open(lib, "rb") as f:
            if b"libasan.so" not in f.read():
                return {}
    except OSError:
        return {}
    import ctypes.util
    asan = ctypes.util.find_library("asan") or "libasan.so"
    return {"LD_PRELOAD": (asan + " " + os.environ.get("LD_PRELOAD", "")).strip(),
            "ASAN_OPTIONS": (os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")}


def cli(*args, check=True, timeout=20):
    r = subprocess.run([CLI] + list(args), capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        fail("hoplite %s: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r


def main():
    if not os.path.exists(ETCD):
        print("test_ha: skipped: no %s (package etcd-server)" % ETCD)
        return 77
    top = tempfile.mkdtemp(prefix="hpl-ha-")
    try:
        return run(top)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.kill()
                except OSError:
                    pass
                p.wait()
        if os.environ.get("HPL_TEST_KEEP"):
            print("test_ha: logs in " + top)
        else:
            shutil.rmtree(top, ignore_errors=True)


def run(top):
    etcd = Etcd(top)
    for i in range(3):
        etcd.start(i)
    etcd.wait_ready()
    prefix = "/hoplite/test-%d" % os.getpid()
    dports = [free_port(), free_port()]
    dirs = {}

    def start_dir(i, lease=LEASE_MS, pfx=prefix, port=None):
        port = port or dports[i]
        dirs[port] = start([DIR_BIN, "--listen", "127.0.0.1:%d" % port, "--etcd", etcd.endpoints(),
                            "--lease-ms", str(lease), "--ha-prefix", pfx],
                           os.path.join(top, "dir-%d.log" % port))
        return dirs[port]

    def wait_leader(old_term=0, limit=10):
        t = time.time()
        while time.time() - t < limit:
            addr, term = etcd.leader(prefix)
            if addr and term > old_term and listening(int(addr.rsplit(":", 1)[1])):
                return int(addr.rsplit(":", 1)[1]), term
            time.sleep(0.05)
        fail("no directory leads after %d s" % limit)

    start_dir(0)
    time.sleep(0.3)
    start_dir(1)
    lead, term = wait_leader()
    print("test_ha: 127.0.0.1:%d leads, term %d" % (lead, term))
    dir_list = ",".join("127.0.0.1:%d" % p for p in dports)
    socks = []
    for i in range(3):
        d = os.path.join(top, "s%d" % i)
        os.mkdir(d, 0o700)
        socks.append(os.path.join(d, "s.sock"))
        start([STORE_BIN, "--directory", dir_list, "--socket", socks[i], "--memory", "96M",
               "--name", "n%d" % i], os.path.join(top, "store-%d.log" % i))
    files = {}
    for k, size in enumerate([100, 1000, 20000, 3 << 20, 9 << 20]):
        f = os.path.join(top, "obj%d" % k)
        with open(f, "wb") as fh:
            fh.write(os.urandom(size))
        files["ha/%d" % k] = f
    t = time.time()
    while cli("put", "-s", socks[0], "ha/probe", files["ha/0"], check=False).returncode:
        if time.time() - t > 10:
            fail("store 0 did not come up")
        time.sleep(0.1)
    for oid, f in files.items():
        cli("put", "-s", socks[0] if oid != "ha/2" else socks[1], oid, f)

    # a long-lived client on store 2 reading a small object over and over:
    # its direct reads (traced) must follow the new leader
    trace = os.path.join(top, "reader.trace")
    env = dict(os.environ, HOPLITE_TRACE=trace, HOPLITE_BUILD_DIR=os.path.abspath(BUILD),
               PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    env.update(asan_env())
    if subprocess.run(["/usr/bin/python3", "-c", READER, socks[0], "0", "put"],
                      env=dict(env, HOPLITE_TRACE="")).returncode:
        fail("putting the reader's objects failed")
    reader = subprocess.Popen(["/usr/bin/python3", "-c", READER, socks[2], "8", "get"], env=env)
    procs.append(reader)
    time.sleep(1.0)

    # 1. the leader killed: every object on another store within 3 s
    dirs[lead].kill()
    t_kill = time.time()
    t_kill_mono = time.monotonic()
    for oid, f in files.items():
        out = os.path.join(top, "got")
        cli("get", "-t", "3000", "-s", socks[2], oid, out)
        if open(out, "rb").read() != open(f, "rb").read():
            fail("%s came back with other bytes" % oid)
    took = time.time() - t_kill
    print("test_ha: every object got on another store %.2f s after the leader's kill" % took)
    if took > 3.0:
        fail("the gets took %.2f s after the kill (want <= 3 s)" % took)
    lead2, term2 = wait_leader(term)
    if lead2 == lead or term2 <= term:
        fail("leader %d term %d after the kill (was %d, term %d)" % (lead2, term2, lead, term))
    cli("put", "-s", socks[1], "ha/new", files["ha/1"])
    cli("get", "-t", "3000", "-s", socks[2], "ha/new", os.path.join(top, "got"))
    if reader.wait(timeout=30) != 0:
        fail("the long-lived reader's gets failed")
    before = after = 0
    for line in open(trace):
        w = line.split()
        if len(w) == 4 and w[2] == "peek.got":
            if int(w[0]) / 1e9 < t_kill_mono:
                before += 1
            elif int(w[0]) / 1e9 > t_kill_mono + 3.0:
                after += 1
    print("test_ha: a client's direct reads: %d before the kill, %d from 3 s after it"
          % (before, after))
    if before == 0 or after == 0:
        fail("the client's direct reads did not follow the new leader")

    # 2. step down: the killed one stands by, the leader gets SIGTERM
    start_dir(dports.index(lead))
    time.sleep(0.5)
    dirs[lead2].send_signal(signal.SIGTERM)
    t_term = time.time()
    lead3, term3 = wait_leader(term2)
    took = time.time() - t_term
    print("test_ha: after SIGTERM, 127.0.0.1:%d leads (term %d) in %.2f s" % (lead3, term3, took))
    if took > LEASE_MS / 1000.0:
        fail("the standby took %.2f s to lead after a step-down (the lease is %d ms)"
             % (took, LEASE_MS))
    cli("get", "-t", "3000", "-s", socks[1], "ha/4", os.path.join(top, "got"))
    start_dir(dports.index(lead2))  # a standby again

    # 3. fencing: etcd paused, the leader stops listening within its lease
    for p in etcd.procs:
        p.send_signal(signal.SIGSTOP)
    t_stop = time.time()
    while listening(lead3):
        if time.time() - t_stop > 2.0:
            fail("the leader still listens %.2f s after etcd stopped" % (time.time() - t_stop))
        time.sleep(0.02)
    took = time.time() - t_stop
    print("test_ha: etcd paused: the leader stopped listening after %.2f s" % took)
    if took > LEASE_MS / 1000.0:
        fail("the leader stopped listening %.2f s after etcd stopped (lease %d ms)"
             % (took, LEASE_MS))
    for p in etcd.procs:
        p.send_signal(signal.SIGCONT)
    lead4, term4 = wait_leader(term3, limit=15)
    cli("get", "-t", "5000", "-s", socks[0], "ha/3", os.path.join(top, "got"))
    print("test_ha: etcd back: 127.0.0.1:%d leads, term %d" % (lead4, term4))

    # 3b. the leader paused past its lease (a stuck host): the standby leads;
    # resumed, the old one answers nothing and stands by
    for sk in socks:  # every store registered with it first (a stat asks the directory)
        t = time.time()
        while cli("stat", "-s", sk, "ha/1", check=False).returncode:
            if time.time() - t > 10:
                fail("a store did not register with the leader of term %d" % term4)
            time.sleep(0.1)
    dirs[lead4].send_signal(signal.SIGSTOP)
    lead5, term5 = wait_leader(term4, limit=10)
    time.sleep(1.0)  # still paused: the stores find the new leader meanwhile
    dirs[lead4].send_signal(signal.SIGCONT)
    t = time.time()
    while listening(lead4) or "no longer leading" not in open(
            os.path.join(top, "dir-%d.log" % lead4)).read():
        if time.time() - t > 2.0:
            fail("the paused leader still serves 2 s after it resumed")
        time.sleep(0.02)
    print("test_ha: leader paused: 127.0.0.1:%d took over (term %d); the old one fenced on "
          "resuming" % (lead5, term5))
    cli("get", "-t", "3000", "-s", socks[2], "ha/1", os.path.join(top, "got"))
    moves = 0
    for sk in socks:
        for l in cli("counters", "-s", sk).stdout.decode().splitlines():
            if l.startswith("dir_probe_moves"):
                moves += int(l.split()[-1])
    print("test_ha: stores that found the new leader by probing while the old one was "
          "silent: %d of %d" % (moves, len(socks)))
    lead4, term4 = lead5, term5

    # 5. a deposed leader's older term is refused: a directory leading
    # another prefix since before (older term) is named after a newer one
    def lead_alone(pfx):  # a directory alone under prefix pfx: it leads
        port = free_port()
        start_dir(0, pfx=pfx, port=port)
        t = time.time()
        while not listening(port):
            if time.time() - t > 10:
                fail("the directory of prefix %s does not lead" % pfx)
            time.sleep(0.05)
        return port

    old_port = lead_alone(prefix + "-old")
    new_port = lead_alone(prefix + "-new")
    d = os.path.join(top, "s9")
    os.mkdir(d, 0o700)
    sock9 = os.path.join(d, "s.sock")
    start([STORE_BIN, "--directory", "127.0.0.1:%d,127.0.0.1:%d" % (new_port, old_port),
           "--socket", sock9, "--memory", "32M", "--name", "n9"], os.path.join(top, "store-9.log"))
    t = time.time()
    while cli("put", "-s", sock9, "ha9/x", files["ha/0"], check=False).returncode:
        if time.time() - t > 10:
            fail("store 9 did not register with the newer directory")
        time.sleep(0.1)
    dirs[new_port].kill()
    time.sleep(1.5)
    r = cli("counters", "-s", sock9)
    refused = [l for l in r.stdout.decode().splitlines() if "dir_terms_refused" in l]
    n = int(refused[0].split()[-1]) if refused else 0
    print("test_ha: the deposed (older term) directory was refused %d times" % n)
    if n < 1:
        fail("the store did not refuse the directory with the older term")
    log = open(os.path.join(top, "store-9.log")).read()
    if "registered with the directory 127.0.0.1:%d" % old_port in log:
        fail("the store registered with the directory of the older term")
    # 4 and 6 on a pair of directories under a 4 s lease (no stores: what
    # counts is whether the leader keeps its lease and term)
    for p in dirs.values():
        if p.poll() is None:
            p.kill()
            p.wait()
    slow = prefix + "-slow"
    sp = [free_port(), free_port()]
    start_dir(0, lease=4000, pfx=slow, port=sp[0])
    start_dir(1, lease=4000, pfx=slow, port=sp[1])
    t = time.time()
    while True:
        addr, term6 = etcd.leader(slow)
        if addr and listening(int(addr.rsplit(":", 1)[1])):
            break
        if time.time() - t > 10:
            fail("no directory leads with the 4 s lease")
        time.sleep(0.05)
    lead6 = int(addr.rsplit(":", 1)[1])

    # 4. etcd's own leader lost (one of three members): etcd elects another,
    # and the same directory goes on leading with the same term
    victim = etcd.raft_leader()
    etcd.procs[victim].kill()
    etcd.procs[victim].wait()
    time.sleep(5.0)  # past the lease
    # etcd may not answer reads for a moment while its two members elect
    # (under a sanitizer build seen once: no answer at all, read as no key):
    # ask until it answers with a leader key, for at most 10 s; a lost lease
    # shows as a missing key or another term all the same
    t = time.time()
    while True:
        addr, term5 = etcd.leader(slow)
        if addr or time.time() - t > 10:
            break
        time.sleep(0.2)
    if term5 != term6 or not listening(lead6):
        fail("losing etcd's leader member changed the directory leader (term %d -> %d)"
             % (term6, term5))
    print("test_ha: etcd's leader member (%s) lost: term %d still leads"
          % (etcd.names[victim], term5))

    # 6. etcd itself restarted (every member killed and started again on
    # its data) within three quarters of the 4 s lease: the leader keeps its
    # lease and its term, and goes on serving
    for p in etcd.procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    t_down = time.time()
    time.sleep(1.5)  # down for a while: the leader's renewals fail meanwhile
    for i in range(3):
        etcd.start(i)
    etcd.wait_ready()
    print("test_ha: etcd down and back (all members) in %.2f s" % (time.time() - t_down))
    time.sleep(4.0)  # past the lease: the leader must have renewed it
    addr, term7 = etcd.leader(slow)
    if term7 != term6 or not listening(lead6):
        fail("a restart of etcd changed the leader (term %d -> %d, leader listening: %s)"
             % (term6, term7, listening(lead6)))
    print("test_ha: the leader kept term %d across etcd's restart" % term7)
    print("test_ha: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
