"""Sealed means immutable, by the kernel (issue 40): writing through the
address of what get() returns (ctypes.memmove: the read-only memoryview does
not stop that) kills the writer with SIGSEGV, and so does writing through a
creation's address after seal(); every reader still sees the original
bytes."""
import os
import signal
import subprocess
import sys
import textwrap

PYDIR = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

PRELUDE = textwrap.dedent("""
    import ctypes, os, sys
    sys.path.insert(0, %(pydir)r)
    os.environ["HPL_DIRECT_GETS"] = "0"
    import numpy as np
    import hoplite
    c = hoplite.Client(%(sock)r, timeout=30.0)
    def addr_of(mv):
        return np.frombuffer(mv, dtype=np.uint8).__array_interface__["data"][0]
""")


def run_child(sock, body):
    code = PRELUDE % {"pydir": PYDIR, "sock": sock} + textwrap.dedent(body)
    # Under the sanitizer build (libasan preloaded) the child's fault must
    # still reach the kernel's default action, not ASan's own report.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":handle_segv=0:handle_sigbus=0").lstrip(":")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env)


def test_memmove_into_a_get_faults(cluster, clients, uid):
    oid = uid()
    data = bytes(range(256)) * 4096 * 2  # 2 MiB
    clients[0].put(oid, data)
    clients[1].get(oid, timeout=20).release()  # node 1 holds a received copy too
    for node in (0, 1):
        r = run_child(cluster.sockets[node], """
            mv = c.get(%r, timeout=20)
            print("got", len(mv), flush=True)
            ctypes.memmove(addr_of(mv) + 100, b"X" * 16, 16)
            print("wrote", flush=True)
        """ % oid)
        assert r.returncode == -signal.SIGSEGV, (node, r.returncode, r.stdout, r.stderr)
        assert "got" in r.stdout and "wrote" not in r.stdout
    for c in clients:
        with c.get(oid, timeout=20) as mv:
            assert bytes(mv) == data


def test_memmove_after_seal_faults(cluster, clients, uid):
    oid = uid()
    r = run_child(cluster.sockets[2], """
        cr = c.create(%r, 1 << 20)
        addr = cr.address
        ctypes.memmove(addr, b"A" * (1 << 20), 1 << 20)
        cr.seal()
        print("sealed", flush=True)
        ctypes.memmove(addr + 5, b"X" * 16, 16)
        print("wrote", flush=True)
    """ % oid)
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stdout, r.stderr)
    assert "sealed" in r.stdout and "wrote" not in r.stdout
    for c in clients:
        with c.get(oid, timeout=20) as mv:
            assert bytes(mv) == b"A" * (1 << 20)


def test_creation_memfd_written_after_seal_changes_nothing(cluster, clients, uid):
    """create()'s buffer is a memfd of the creating process that the store
    copies from (memcpy through its own read-only mapping). Writing that
    memfd after seal() (os.pwrite on its descriptor: the process's own
    memory) changes nothing any reader sees."""
    oid = uid()
    r = run_child(cluster.sockets[2], """
        cr = c.create(%r, 1 << 20)
        ctypes.memmove(cr.address, b"B" * (1 << 20), 1 << 20)
        fd = next(int(f) for f in os.listdir("/proc/self/fd")
                  if "memfd:hoplite-create" in os.readlink("/proc/self/fd/" + f))
        cr.seal()
        assert os.pwrite(fd, b"X" * 4096, 8192) == 4096
        print("rewrote", flush=True)
        with c.get(%r, timeout=20) as mv:
            print("same" if bytes(mv) == b"B" * (1 << 20) else "changed", flush=True)
    """ % (oid, oid))
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "rewrote" in r.stdout and "same" in r.stdout, r.stdout
    for c in clients:
        with c.get(oid, timeout=20) as mv:
            assert bytes(mv) == b"B" * (1 << 20)
