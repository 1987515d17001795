#!/usr/bin/python3
"""test_ha_cli.py BUILD_DIR - `hoplite cluster up --ha` (issue 43), with real
processes and a real etcd (Debian's etcd-server, started by the command).

- The command starts etcd and two directories, says which one leads and
  which stands by, and the stores come up on both addresses.
- `hoplite status --json` shows the lease: term > 0, the leader's address,
  one standby (the other directory), lease time left; the text form
  prints the "directory: leader ..." line.
- The directory's counters (through --admin) carry dir_term (= the
  status's term) and dir_lease_renewals > 0, and the other dir_lease_*.
- SIGKILL of the leading directory: the command names the other one as
  leading, `hoplite status` shows a higher term within 5 s of the kill,
  the killed one is started again and listed as the standby, and a put on
  one store and a get on the other work.
- Ctrl-C (SIGINT) stops everything it started: etcd and the directories
  are gone and the work directory is removed.
- Without --ha the status has no "directory" member (nothing changes),
  and with no etcd binary ($HOPLITE_ETCD pointing nowhere) the command
  fails naming the etcd-server package.
"""
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("HOPLITE_BUILD_DIR", "build")
HOPLITE = os.path.join(BUILD, "hoplite")
SCALE = float(os.environ.get("HPL_TEST_TIMEOUT_SCALE", "1"))


def check(cond, what):
    if not cond:
        raise AssertionError(what)


class Cluster:
    """`hoplite cluster up ARGS` as a child; its stdout read line by line."""

    def __init__(self, work, args, env=None):
        self.work = work
        self.out = []
        self.buf = b""
        self.p = subprocess.Popen([HOPLITE, "cluster", "up", "--dir", work] + args,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        self.sel = selectors.DefaultSelector()
        self.sel.register(self.p.stdout, selectors.EVENT_READ)

    def line_with(self, text, timeout):
        """The next line of output containing text (the lines before it are
        kept in self.out); fails after timeout seconds or at EOF."""
        deadline = time.monotonic() + timeout * SCALE
        while True:
            left = deadline - time.monotonic()
            check(left > 0, "no line with %r within %.1f s; output so far:\n%s"
                  % (text, timeout * SCALE, "".join(self.out)))
            if b"\n" not in self.buf:
                if not self.sel.select(left):
                    continue
                more = os.read(self.p.stdout.fileno(), 65536)  # (no buffering in between)
                check(more, "the command ended before a line with %r:\n%s"
                      % (text, "".join(self.out)))
                self.buf += more
                continue
            raw, self.buf = self.buf.split(b"\n", 1)
            line = raw.decode(errors="replace") + "\n"
            self.out.append(line)
            if text in line:
                return line

    def cli(self, *args, node=0, timeout=30):
        sock = os.path.join(self.work, "node-%d.sock" % node)
        r = subprocess.run([HOPLITE, "-s", sock] + list(args), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, universal_newlines=True,
                           timeout=timeout * SCALE)
        check(r.returncode == 0, "hoplite %s: %s" % (" ".join(args), r.stdout))
        return r.stdout

    def status(self, node=0):
        return json.loads(self.cli("-t", str(int(5000 * SCALE)), "status", "--json", node=node))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(30 * SCALE)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        rest = self.buf + self.p.stdout.read()
        self.out.append(rest.decode(errors="replace"))
        self.p.stdout.close()
        return self.p.returncode


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie of the command (not reaped yet) counts as gone
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_ha(tmp):
    work = os.path.join(tmp, "ha")
    c = Cluster(work, ["--ha", "--nodes", "2", "--memory", "64M"])
    try:
        head = c.line_with("directories under a leader lease", 20)
        etcd_pid = int(head.split("pid ")[1].split(")")[0])
        d0 = c.line_with("directory-0", 5).split()
        d1 = c.line_with("directory-1", 5).split()
        c.line_with("Stop it", 20)
        check(d0[-1] == "leads" and d1[-2:] == ["stands", "by"], "who leads: %r %r" % (d0, d1))
        lead_addr, lead_pid = d0[1], int(d0[3])
        standby_addr, standby_pid = d1[1], int(d1[3])

        # the lease in status; the standby is listed once the leader has
        # re-read etcd's member list (every lease, 1 s here)
        deadline = time.monotonic() + 5 * SCALE
        while True:
            st = c.status()
            d = st.get("directory")
            check(d is not None, "no \"directory\" in the status: %r" % st)
            if d["standbys"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(d["term"] > 0, "term %r" % d)
        check(d["leader"] == lead_addr, "leader %r, expected %s" % (d, lead_addr))
        check(d["standbys"] == [standby_addr], "standbys %r, expected [%s]" % (d, standby_addr))
        check(0 < d["lease_left_ms"] <= 1000, "lease left %r" % d)
        check(d["renew_last_us"] > 0 and d["etcd"].startswith("http://127.0.0.1:"), repr(d))
        text = c.cli("status")
        want = "directory: leader %s, term %d, lease " % (lead_addr, d["term"])
        check(want in text and "standbys: %s" % standby_addr in text,
              "no %r line in:\n%s" % (want, text))
        term0 = d["term"]

        # the lease's metrics, from the leading directory itself
        secret = os.path.join(work, "cluster.secret")
        r = subprocess.run([HOPLITE, "--admin", "--directory", lead_addr, "--auth-file", secret,
                            "counters"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           universal_newlines=True, timeout=30 * SCALE)
        check(r.returncode == 0, r.stdout)
        ctr = dict(l.rsplit(" ", 1) for l in r.stdout.splitlines() if " " in l)
        for name in ("dir_term", "dir_lease_renewals", "dir_lease_renew_failures",
                     "dir_lease_renew_last_us", "dir_lease_renew_max_us", "dir_lease_left_ms"):
            check(name in ctr, "no %s among the directory's counters:\n%s" % (name, r.stdout))
        check(int(ctr["dir_term"]) == term0, "dir_term %s, status term %d" % (ctr["dir_term"],
                                                                                term0))
        check(int(ctr["dir_lease_renewals"]) > 0, "no renewal counted")
        check(int(ctr["dir_lease_renew_max_us"]) >= int(ctr["dir_lease_renew_last_us"]) > 0,
              repr(ctr))

        # an object before the failover
        src = os.path.join(tmp, "obj")
        with open(src, "wb") as f:
            f.write(os.urandom(300000))
        c.cli("put", "before", src)

        # the leader dies
        t0 = time.monotonic()
        os.kill(lead_pid, signal.SIGKILL)
        c.line_with("directory-1 (%s) leads" % standby_addr, 5)
        st = c.status(node=1)
        took = time.monotonic() - t0
        d = st.get("directory")
        check(d is not None and d["term"] > term0, "term after the failover: %r" % d)
        check(d["leader"] == standby_addr, "leader after the failover: %r" % d)
        check(took <= 5 * SCALE, "status showed the new leader %.2f s after the kill" % took)
        print("failover: new leader (term %d -> %d) in status %.2f s after the kill"
              % (term0, d["term"], took))

        # the killed directory is started again and stands by
        c.line_with("directory-0 restarted: it stands by", 5)
        old_addr = d["leader"]
        deadline = time.monotonic() + 5 * SCALE
        while True:
            d = c.status(node=1).get("directory") or {}
            if d.get("standbys") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        check(len(d.get("standbys", [])) == 1 and d["standbys"][0] != old_addr,
              "standbys after the restart: %r" % d)

        # puts and gets through the stores
        c.cli("put", "after", src, node=0)
        for oid in ("before", "after"):
            dst = os.path.join(tmp, "got-" + oid)
            c.cli("get", oid, dst, node=1)
            with open(src, "rb") as a, open(dst, "rb") as b:
                check(a.read() == b.read(), "%s: other bytes" % oid)
    finally:
        rc = c.stop()
    check(rc == 0, "cluster up exited %r:\n%s" % (rc, "".join(c.out)))
    for pid, what in ((etcd_pid, "etcd"), (standby_pid, "directory-1")):
        check(not alive(pid), "%s (pid %d) still runs after the stop" % (what, pid))
    check(not os.path.exists(work), "work directory left behind")


def test_no_ha(tmp):
    work = os.path.join(tmp, "plain")
    c = Cluster(work, ["--nodes", "1", "--memory", "64M"])
    try:
        c.line_with("Stop it", 20)
        st = c.status()
        check("directory" not in st, "a \"directory\" member without --ha: %r" % st)
        check("directory:" not in c.cli("status"), "a directory line without --ha")
    finally:
        check(c.stop() == 0, "".join(c.out))


def test_no_etcd(tmp):
    env = dict(os.environ, HOPLITE_ETCD=os.path.join(tmp, "no-such-etcd"))
    r = subprocess.run([HOPLITE, "cluster", "up", "--ha", "--dir", os.path.join(tmp, "ne")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       universal_newlines=True, env=env, timeout=30 * SCALE)
    check(r.returncode != 0 and "etcd-server" in r.stdout,
          "without etcd: status %d, %r" % (r.returncode, r.stdout))


def main():
    if not os.access("/usr/bin/etcd", os.X_OK) and not os.environ.get("HOPLITE_ETCD"):
        print("etcd is not installed (Debian's etcd-server; scripts/bootstrap.sh installs it)")
        return 1
    tmp = tempfile.mkdtemp(prefix="hpl-ha-")
    os.chmod(tmp, 0o700)
    try:
        for t in (test_no_etcd, test_no_ha, test_ha):
            t0 = time.monotonic()
            t(tmp)
            print("%s ok (%.1f s)" % (t.__name__, time.monotonic() - t0))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
