"""cluster.py - start a hoplite cluster of real processes from Python.

LocalCluster starts one hoplite-directory and N hoplite-store processes, as
src/cli/localcluster.c does: the directory listens on port 0 and writes the
port it got to a file (by rename), each store registers and then writes its
ready file. Waiting is event-driven (inotify on the work directory plus a
pidfd of the process, so a server that dies is noticed at once), bounded by
a timeout. Servers log to files in the work directory. Every process gets
PR_SET_PDEATHSIG, so none outlives the Python process that started it.

    with LocalCluster(nodes=3, memory="256M") as lc:
        c = hoplite.Client(lc.socket(0))

For emulated hosts (bench/cluster.sh) pass hosts=[(netns, addr), ...]:
the directory runs in hosts[0], store i in hosts[i], each bound to its
address and started through `ip netns exec`.
"""
import ctypes
import ctypes.util
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time

from . import _lib

_IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_CREATE = 0x8, 0x80, 0x100
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_PR_SET_PDEATHSIG = 1

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.inotify_init1.argtypes = [ctypes.c_int]
_libc.inotify_init1.restype = ctypes.c_int
_libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_libc.inotify_add_watch.restype = ctypes.c_int
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                        ctypes.c_ulong]
_libc.prctl.restype = ctypes.c_int


class ClusterError(RuntimeError):
    """A server did not start (died or did not come up in time)."""


def _die_with_parent():
    # runs in the child between fork and exec
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def wait_for_file(path, proc=None, timeout=15.0):
    """Wait until `path` exists, without polling: inotify on its directory,
    plus the pidfd of `proc` (a Popen) so that its death ends the wait.
    Raises ClusterError if the process exits or the timeout passes."""
    d = os.path.dirname(os.path.abspath(path))
    ifd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if ifd < 0:
        raise OSError(ctypes.get_errno(), "inotify_init1 failed")
    pfd = -1
    try:
        if _libc.inotify_add_watch(ifd, os.fsencode(d),
                                   _IN_CLOSE_WRITE | _IN_MOVED_TO | _IN_CREATE) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch %s failed" % d)
        poller = select.poll()
        poller.register(ifd, select.POLLIN)
        if proc is not None:
            pfd = os.pidfd_open(proc.pid)
            poller.register(pfd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while True:
            if os.path.exists(path):
                return
            if proc is not None and proc.poll() is not None:
                raise ClusterError("process %d (%s) exited with status %s before writing %s"
                                   % (proc.pid, os.path.basename(str(proc.args[0])),
                                      proc.returncode, path))
            left = deadline - time.monotonic()
            if left <= 0:
                raise ClusterError("%s did not appear within %.1f s" % (path, timeout))
            for fd, _ in poller.poll(left * 1000.0):
                if fd == ifd:
                    try:
                        while os.read(ifd, 65536):
                            pass
                    except BlockingIOError:
                        pass
    finally:
        os.close(ifd)
        if pfd >= 0:
            os.close(pfd)


def _read_int(path):
    with open(path) as f:
        return int(f.read().split()[0])


class LocalCluster:
    """One hoplite-directory and `nodes` hoplite-store processes.

    nodes        stores to start
    memory       pool per store ("512M", "1G" or bytes)
    workdir      sockets, port/ready files, logs (default: a new temporary
                 directory, removed at stop unless keep_workdir)
    bin_dir      where the servers are (default: hoplite.build_dir())
    store_args / dir_args   extra command-line arguments (lists)
    hosts        [(netns or None, address)] per store; the directory runs in
                 hosts[0]. Default: every process on 127.0.0.1.
    timeout      seconds a server may take to come up

    Every cluster has a secret of its own (`secret`: workdir/cluster.secret,
    mode 0600) that all its servers are started with.
    """

    def __init__(self, nodes=3, memory="512M", workdir=None, bin_dir=None, store_args=(),
                 dir_args=(), hosts=None, timeout=15.0, log_level="info", keep_workdir=False,
                 env=None):
        self.nodes = nodes
        self.memory = str(memory)
        self.bin_dir = bin_dir or _lib.build_dir()
        self.store_args = list(store_args)
        self.dir_args = list(dir_args)
        self.hosts = hosts or [(None, "127.0.0.1")] * max(nodes, 1)
        if len(self.hosts) < max(nodes, 1):
            raise ValueError("hosts must name one (netns, address) per store")
        self.timeout = timeout
        self.log_level = log_level
        self.env = env
        self._own_workdir = workdir is None
        self.keep_workdir = keep_workdir
        self.workdir = workdir or tempfile.mkdtemp(prefix="hpl-py-")
        # the stores' sockets live here: closed to other users (stores check)
        os.makedirs(self.workdir, mode=0o700, exist_ok=True)
        # every cluster gets a secret of its own (servers may then listen
        # beyond loopback; clients need none)
        self.secret = os.path.join(self.workdir, "cluster.secret")
        if not os.path.exists(self.secret):
            fd = os.open(self.secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(os.urandom(32).hex() + "\n")
        self.dir_proc = None
        self.dir_port = None
        self.stores = [None] * nodes
        self.data_ports = [None] * nodes
        self._logs = []
        self.started = False

    # -------------------------------------------------------------- paths
    @property
    def dir_addr(self):
        return "%s:%d" % (self.hosts[0][1], self.dir_port)

    def socket(self, i):
        """Unix socket of store i."""
        return os.path.join(self.workdir, "node-%d.sock" % i)

    @property
    def sockets(self):
        return [self.socket(i) for i in range(self.nodes)]

    def store_log(self, i):
        return os.path.join(self.workdir, "node-%d.log" % i)

    @property
    def dir_log(self):
        return os.path.join(self.workdir, "directory.log")

    def store_pid(self, i):
        return self.stores[i].pid if self.stores[i] else None

    def _credential(self, i):
        """Store i's node credential (made once from the secret with `hoplite
        secret --node`): a store holds its own node's keys, never the secret."""
        path = os.path.join(self.workdir, "node-%d.cred" % i)
        if not os.path.exists(path):
            r = subprocess.run([self._binary("hoplite"), "secret", "--node", "node-%d" % i,
                                "--secret", self.secret, path], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, env=self.env)
            if r.returncode != 0:
                raise ClusterError("cannot make node-%d's credential: %s"
                                   % (i, r.stderr.decode(errors="replace").strip()))
        return path

    def _binary(self, name):
        p = os.path.join(self.bin_dir, name)
        if not os.access(p, os.X_OK):
            raise ClusterError("%s not found: build the project first (cmake -S . -B build && "
                               "cmake --build build) or set HOPLITE_BUILD_DIR" % p)
        return p

    def _spawn(self, argv, netns, log):
        if netns:
            argv = ["ip", "netns", "exec", netns] + argv
        f = open(log, "ab")
        try:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=f, stderr=f,
                                    preexec_fn=_die_with_parent, env=self.env)
        finally:
            f.close()

    # -------------------------------------------------------------- start / stop
    def start(self):
        try:
            self._start_directory()
            for i in range(self.nodes):
                self.start_store(i, wait=False)
            for i in range(self.nodes):
                self._wait_store(i)
        except BaseException:
            self.stop()
            raise
        self.started = True
        return self

    def _start_directory(self):
        port_file = os.path.join(self.workdir, "directory.port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        argv = [self._binary("hoplite-directory"), "--listen", "%s:0" % self.hosts[0][1],
                "--port-file", port_file, "--log-level", self.log_level,
                "--auth-file", self.secret] + self.dir_args
        self.dir_proc = self._spawn(argv, self.hosts[0][0], self.dir_log)
        wait_for_file(port_file, self.dir_proc, self.timeout)
        self.dir_port = _read_int(port_file)

    def start_store(self, i, wait=True, extra_args=()):
        """(Re)start store i (e.g. after kill(i))."""
        netns, addr = self.hosts[i]
        ready = os.path.join(self.workdir, "node-%d.ready" % i)
        for p in (ready, self.socket(i)):
            if os.path.exists(p):
                os.unlink(p)
        argv = [self._binary("hoplite-store"), "--directory", self.dir_addr,
                "--socket", self.socket(i), "--memory", self.memory, "--name", "node-%d" % i,
                "--ready-file", ready, "--data-listen", "%s:0" % addr, "--data-addr", addr,
                "--log-level", self.log_level, "--auth-file", self._credential(i)] + \
            self.store_args + list(extra_args)
        self.stores[i] = self._spawn(argv, netns, self.store_log(i))
        if wait:
            self._wait_store(i)

    def _wait_store(self, i):
        ready = os.path.join(self.workdir, "node-%d.ready" % i)
        try:
            wait_for_file(ready, self.stores[i], self.timeout)
        except ClusterError as e:
            raise ClusterError("store %d: %s; log %s:\n%s" % (i, e, self.store_log(i),
                                                             self._tail(self.store_log(i))))
        self.data_ports[i] = _read_int(ready)

    @staticmethod
    def _tail(path, n=20):
        try:
            with open(path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def kill(self, i, sig=signal.SIGKILL, timeout=10.0):
        """Send `sig` to store i and reap it (SIGKILL/SIGTERM)."""
        p = self.stores[i]
        if p is None or p.poll() is not None:
            return
        p.send_signal(sig)
        if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def alive(self):
        """Names of servers that are not running any more (empty: all up)."""
        dead = []
        if self.dir_proc is not None and self.dir_proc.poll() is not None:
            dead.append("directory")
        dead += ["node-%d" % i for i, p in enumerate(self.stores)
                 if p is not None and p.poll() is not None]
        return dead

    def stop(self):
        """SIGTERM every server (stores first), SIGKILL what is left after
        a few seconds, reap all, remove the work directory we created."""
        procs = [p for p in self.stores if p is not None]
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(8.0)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.dir_proc is not None:
            if self.dir_proc.poll() is None:
                self.dir_proc.send_signal(signal.SIGTERM)
            try:
                self.dir_proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.dir_proc.kill()
                self.dir_proc.wait()
        self.started = False
        if self._own_workdir and not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        if not self.started:
            self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False
