"""Every error kind raises its own exception class, with the library's message."""
import os
import signal
import tempfile
import time

import numpy as np
import pytest

import hoplite
from conftest import start_cluster


def test_exception_hierarchy():
    kinds = [hoplite.InvalidArgument, hoplite.OutOfMemory, hoplite.Timeout, hoplite.NotFound,
             hoplite.AlreadyExists, hoplite.ObjectLost, hoplite.ConnectionFailed,
             hoplite.ProtocolError, hoplite.SystemCallError, hoplite.TooBig, hoplite.Mismatch,
             hoplite.Canceled, hoplite.Unavailable, hoplite.InvalidState]
    assert len({k.code for k in kinds}) == len(kinds)
    for k in kinds:
        assert issubclass(k, hoplite.HopliteError) and k.name.startswith("HPL_E")
    assert issubclass(hoplite.Timeout, TimeoutError)
    assert issubclass(hoplite.InvalidArgument, ValueError)
    assert issubclass(hoplite.ConnectionFailed, ConnectionError)
    assert issubclass(hoplite.NotFound, LookupError)


def test_timeout(clients, uid):
    t0 = time.monotonic()
    with pytest.raises(hoplite.Timeout) as ei:
        clients[0].get(uid(), timeout=0.3)
    took = time.monotonic() - t0
    assert 0.25 <= took < 5
    assert ei.value.code == -3 and str(ei.value).startswith("timed out")
    assert "not available" in ei.value.detail  # hpl_errdetail reached Python
    with pytest.raises(TimeoutError):
        clients[0].get(uid(), timeout=0)


def test_not_found(clients, uid):
    with pytest.raises(hoplite.NotFound, match="no such object") as ei:
        clients[0].stat(uid())
    assert ei.value.code == -4
    with pytest.raises(hoplite.NotFound):
        clients[1].delete(uid())
    with pytest.raises(hoplite.NotFound):
        clients[1].reduce_sources(uid(), timeout=5)


def test_exists(clients, uid):
    oid = uid()
    clients[0].put(oid, b"first")
    with pytest.raises(hoplite.AlreadyExists, match="already exists"):
        clients[0].put(oid, b"second")
    with pytest.raises(hoplite.AlreadyExists):
        clients[1].put(oid, bytes(100000))  # also from another node
    assert bytes(clients[2].get(oid, timeout=20)) == b"first"


def test_invalid_argument_from_the_library(clients, uid):
    srcs = [uid(), uid()]
    with pytest.raises(hoplite.InvalidArgument, match="num_objects"):
        clients[0].reduce(uid(), srcs, dtype="f32", num_objects=3)
    with pytest.raises(hoplite.InvalidArgument):
        clients[0].reduce(uid(), srcs, dtype="complex64")
    with pytest.raises(hoplite.InvalidArgument):
        clients[0].reduce(uid(), srcs, dtype="f32", op="mean")
    t = uid()
    with pytest.raises(hoplite.InvalidArgument) as ei:  # target among the sources: C side says no
        clients[0].reduce(t, [t, srcs[0]], dtype="f32")
    assert ei.value.code == -1


def test_mismatch(clients, uid):
    a, b = uid(), uid()
    clients[0].put(a, np.ones(1000, dtype=np.float32))
    clients[1].put(b, np.ones(2000, dtype=np.float32))
    with pytest.raises(hoplite.Mismatch, match="differ in size") as ei:
        clients[2].reduce(t := uid(), [a, b], dtype="f32")
        clients[2].get(t, timeout=20)
    assert ei.value.code == -11
    c = uid()  # a size that is no multiple of the dtype
    clients[0].put(c, b"12345")
    clients[1].put(d := uid(), b"12345")
    with pytest.raises(hoplite.Mismatch):
        clients[2].allreduce(uid(), [c, d], dtype="f64", timeout=20)


def test_connection_error():
    missing = os.path.join(tempfile.gettempdir(), "hoplite-no-such-dir", "store.sock")
    with pytest.raises(hoplite.ConnectionFailed) as ei:
        hoplite.Client(missing, connect_timeout=2)
    assert missing in str(ei.value) and ei.value.code == -7


def test_connection_closed_by_store(uid):
    lc = start_cluster(1)
    try:
        c = hoplite.Client(lc.socket(0))
        c.put(oid := uid(), b"x")
        lc.kill(0, signal.SIGKILL)
        with pytest.raises(hoplite.ConnectionFailed):
            c.get(oid, timeout=5)
        c.close()
    finally:
        lc.stop()


def test_out_of_memory(uid):
    lc = start_cluster(1, memory="16M")
    try:
        with hoplite.Client(lc.socket(0)) as c:
            with pytest.raises(hoplite.OutOfMemory, match="out of memory") as ei:
                c.put(uid(), bytes(32 << 20))
            assert ei.value.code == -2
            # fill the pool with live objects until it refuses
            with pytest.raises(hoplite.OutOfMemory):
                for i in range(10):
                    c.put(uid("fill"), bytes(4 << 20))
            with pytest.raises(hoplite.OutOfMemory):
                c.put_array(uid(), np.zeros(5 << 20, dtype=np.uint8))
    finally:
        lc.stop()


def test_object_lost(uid):
    """kill -9 the only holder of an object, then get it on another node."""
    lc = start_cluster(2)
    try:
        holder = hoplite.Client(lc.socket(0))
        other = hoplite.Client(lc.socket(1))
        oid = uid()
        holder.put(oid, bytes(2 << 20))  # > 64 KiB: not kept inline by the directory
        assert other.stat(oid).copies == 1
        holder.close()
        lc.kill(0, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(hoplite.ObjectLost, match="lost") as ei:
            other.get(oid, timeout=30)
        assert time.monotonic() - t0 < 20
        assert ei.value.code == -6
        other.close()
    finally:
        lc.stop()


def test_library_not_found_is_clear():
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, HOPLITE_LIB="/nonexistent/libhoplite.so",
               PYTHONPATH=os.path.join(here, ".."))
    code = ("import hoplite\n"
            "try:\n"
            "    hoplite.Client('/tmp/x.sock')\n"
            "except hoplite.LibraryNotFound as e:\n"
            "    assert isinstance(e, ImportError)\n"
            "    print('LNF', e)\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 0, p.stdout
    assert p.stdout.startswith("LNF libhoplite.so not found")
    assert "/nonexistent/libhoplite.so" in p.stdout and "cmake --build build" in p.stdout
