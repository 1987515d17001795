"""The asyncio calls (hoplite/aio.py) against real stores: many gets in
flight on one loop, large objects, per-request deadlines, cancellation
without leaked holds, put/stat/delete/reduce, a client closed with
requests in flight, and the ctypes layout of struct hpl_completion
checked against the C compiler's."""
import asyncio
import ctypes
import os
import shutil
import subprocess
import tempfile
import time

import pytest

import hoplite
from hoplite import _lib

TOP = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def run(coro, limit=60.0):
    """Run coro on a fresh loop, failing (not hanging) after `limit` s."""
    return asyncio.run(asyncio.wait_for(coro, limit))


def idle(c):
    """The store's bytes of copies no client holds (exact object sizes)."""
    return c.counter("idle_bytes")


def wait_idle(c, want, limit=10.0):
    """idle(c) once it reaches `want` (releases travel to the store
    asynchronously), or the last value seen."""
    end = time.monotonic() + limit
    while True:
        v = idle(c)
        if v == want or time.monotonic() > end:
            return v
        time.sleep(0.05)


def test_completion_layout_matches_c():
    """ctypes' hpl_completion has the C compiler's size and offsets."""
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "no C compiler to check the layout with"
    fields = [f for f, _ in _lib.Completion._fields_]
    src = ('#include <stddef.h>\n#include <stdio.h>\n#include "hoplite.h"\n'
           'int main(void) {\n  printf("sizeof %zu\\n", sizeof(hpl_completion));\n' +
           "".join('  printf("%s %%zu\\n", offsetof(hpl_completion, %s));\n' % (f, f)
                   for f in fields) + "  return 0;\n}\n")
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "l.c"), "w") as f:
            f.write(src)
        exe = os.path.join(d, "l")
        subprocess.run([cc, "-I", os.path.join(TOP, "include"), "-o", exe,
                        os.path.join(d, "l.c")], check=True)
        out = subprocess.run([exe], check=True, stdout=subprocess.PIPE).stdout.decode()
    c_layout = dict((k, int(v)) for k, v in (line.split() for line in out.splitlines()))
    py_layout = {f: getattr(_lib.Completion, f).offset for f in fields}
    py_layout["sizeof"] = ctypes.sizeof(_lib.Completion)
    assert py_layout == c_layout


def test_gather_1000_small_gets(clients, uid):
    c0, c1 = clients[0], clients[1]
    ids = [uid() for _ in range(1000)]
    c1.put_many([(oid, ("%s|" % oid).encode() * 7) for oid in ids])  # another store's

    async def main():
        return await asyncio.gather(*[c0.get_async(oid, timeout=30) for oid in ids])

    views = run(main())
    assert [bytes(v) for v in views] == [("%s|" % oid).encode() * 7 for oid in ids]
    assert all(v.readonly for v in views)
    del views
    assert c0.async_count() == 0


def test_large_gets(clients, uid):
    np = pytest.importorskip("numpy")
    ids = [uid() for _ in range(4)]
    arrays = [np.arange(1 << 20, dtype=np.int64) * (i + 1) for i in range(4)]  # 8 MiB each
    for oid, a in zip(ids, arrays):
        clients[2].put(oid, a)

    async def main():
        return await asyncio.gather(*[clients[0].get_async(oid, timeout=60) for oid in ids])

    views = run(main())
    for v, a in zip(views, arrays):
        assert len(v) == 8 << 20
        assert np.array_equal(np.frombuffer(v, dtype=np.int64), a)
    arr = np.frombuffer(views[0], dtype=np.int64)
    del views
    assert arr[5] == 5  # an array keeps its view's object held


def test_deadlines_fire_on_an_idle_loop(clients, uid):
    """Gets of missing ids time out at their own deadlines, in order, with
    nothing else waking the loop (the call_later wake-up does it)."""
    c = clients[0]
    order = []

    async def one(oid, t):
        t0 = time.monotonic()
        with pytest.raises(hoplite.Timeout) as ei:
            await c.get_async(oid, timeout=t)
        order.append(t)
        assert oid in ei.value.detail
        return time.monotonic() - t0

    async def main():
        return await asyncio.gather(*[one(uid("missing"), t) for t in (0.6, 0.2, 0.4)])

    took = run(main(), limit=20)
    assert order == [0.2, 0.4, 0.6]
    for t, dt in zip((0.6, 0.2, 0.4), took):
        assert t - 0.01 <= dt < t + 1.5
    assert c.async_count() == 0


def test_wait_for_cancels_the_request(clients, uid):
    c = clients[0]

    async def main():
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(c.get_async(uid("never")), 0.2)  # no deadline of its own
        return c.async_count()

    assert run(main()) == 0


def test_cancel_half_of_200_pending_gets(clients, uid):
    """200 gets wait for objects that do not exist yet; 100 of the tasks are
    cancelled; another store puts the 200 objects; the other 100 complete
    with the right bytes, the cancelled ones raise CancelledError, and
    every hold is let go: every copy the store made for these gets is idle
    again (no client holds it) and nothing is left in the handle."""
    c0, c1 = clients[0], clients[1]
    ids = [uid() for _ in range(200)]
    def body(oid):  # ~100 KiB: in the pool, not inline
        return (oid.encode() + b"#") * ((100 << 10) // (len(oid) + 1))
    base = idle(c0)

    async def main():
        tasks = [asyncio.ensure_future(c0.get_async(oid, timeout=60)) for oid in ids]
        await asyncio.sleep(0.3)  # every get is at the store, waiting
        for t in tasks[::2]:
            t.cancel()
        await asyncio.sleep(0)
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: c1.put_many([(oid, body(oid)) for oid in ids]))
        return await asyncio.gather(*tasks, return_exceptions=True)

    res = run(main())
    for i, (oid, r) in enumerate(zip(ids, res)):
        if i % 2 == 0:
            assert isinstance(r, asyncio.CancelledError), (oid, r)
        else:
            assert bytes(r) == body(oid), oid
    here = sum(len(body(oid)) for oid in ids if c0.contains(oid))
    assert here >= 100 * len(body(ids[1]))  # copies for the completed gets at least
    assert idle(c0) - base < here  # the completed gets' views hold theirs
    del r, res
    assert c0.async_count() == 0
    assert wait_idle(c0, base + here) == base + here


def test_put_stat_delete(clients, uid):
    np = pytest.importorskip("numpy")
    c0, c1 = clients[0], clients[1]
    small, big = uid(), uid()
    data = bytearray(b"abc" * 1000)
    arr = np.arange(3 << 20, dtype=np.uint8)  # not inline: the store copies from our memory

    async def main():
        await asyncio.gather(c0.put_async(small, data), c0.put_async(big, arr[::1]))
        data[:3] = b"zzz"  # after completion the buffer is ours again
        st = await c1.stat_async(big)
        assert st == c1.stat(big)  # the blocking call's answer, at the same moment
        with pytest.raises(hoplite.AlreadyExists):
            await c0.put_async(small, b"other")
        got = await c1.get_async(big, timeout=30)
        await c0.delete_async(small)
        with pytest.raises(hoplite.NotFound) as ei:
            await c0.delete_async(small)
        with pytest.raises(hoplite.NotFound):
            await c0.stat_async(small)
        with pytest.raises(hoplite.InvalidArgument):
            await c0.get_async("bad\nid")
        return st, ei.value, got

    st, nf, got = run(main())
    assert st.size == 3 << 20 and not st.inline and st.copies == 1
    assert np.array_equal(np.frombuffer(got, dtype=np.uint8), arr)
    assert small in nf.detail and nf.code == -4 and str(nf).startswith("no such object")


def test_reduce_and_allreduce(clients, uid):
    np = pytest.importorskip("numpy")
    srcs = [uid("s") for _ in range(3)]
    vals = [np.full(1000, i + 1, dtype=np.float32) for i in range(3)]
    for c, oid, v in zip(clients, srcs, vals):
        c.put(oid, v)
    t1, t2 = uid("r"), uid("a")

    async def main():
        await clients[0].reduce_async(t1, srcs, dtype="f32")
        r = await clients[0].get_async(t1, timeout=30)
        a = await clients[1].allreduce_async(t2, srcs, dtype=np.float32, op="max", timeout=30)
        with pytest.raises(hoplite.InvalidArgument):
            await clients[0].reduce_async(t1, [], dtype="f32")
        return r, a

    r, a = run(main())
    assert np.array_equal(np.frombuffer(r, dtype=np.float32), np.full(1000, 6, np.float32))
    assert np.array_equal(np.frombuffer(a, dtype=np.float32), np.full(1000, 3, np.float32))


def test_close_with_requests_in_flight(cluster, uid):
    """close() completes what is in flight with ConnectionFailed (gets with
    no deadline included), later calls fail at once, and the handle is
    closed once nothing is in flight."""
    c = hoplite.Client(cluster.socket(0))

    async def main():
        tasks = [asyncio.ensure_future(c.get_async(uid("never"))) for _ in range(20)]
        await asyncio.sleep(0.2)
        t0 = time.monotonic()
        c.close()
        res = await asyncio.gather(*tasks, return_exceptions=True)
        took = time.monotonic() - t0
        with pytest.raises(hoplite.ConnectionFailed):
            await c.get_async(uid())
        return res, took

    res, took = run(main(), limit=20)
    assert all(isinstance(r, hoplite.ConnectionFailed) for r in res), res
    assert "closed" in str(res[0])
    assert took < 5
    assert c._n.closed  # hpl_close ran: no request, reader or view left


def test_views_keep_a_closed_client_open(cluster, uid):
    c = hoplite.Client(cluster.socket(1))
    oid = uid()
    c.put(oid, b"kept")

    async def main():
        return await c.get_async(oid, timeout=10)

    v = run(main())
    c.close()
    assert not c._n.closed and bytes(v) == b"kept"
    del v
    assert c._n.closed


def test_two_loops_in_two_threads(clients, uid):
    """One client driven from two event loops at once (two readers on one
    descriptor): every completion reaches its own loop."""
    import threading
    c0 = clients[0]
    ids = [uid() for _ in range(400)]
    clients[2].put_many([(oid, oid.encode()) for oid in ids])
    out = {}

    def worker(k):
        async def main():
            return await asyncio.gather(*[c0.get_async(oid, timeout=30) for oid in ids[k::2]])
        out[k] = [bytes(v) for v in run(main())]

    ts = [threading.Thread(target=worker, args=(k,)) for k in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert out[0] == [oid.encode() for oid in ids[0::2]]
    assert out[1] == [oid.encode() for oid in ids[1::2]]
    assert c0.async_count() == 0
