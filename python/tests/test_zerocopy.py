"""Zero-copy: gets point into the store's pool (its chunk memfds, mapped
read-only); views' lifetime."""
import gc
import re

import numpy as np
import pytest

import hoplite


def addr_of(mv):
    return np.frombuffer(mv, dtype=np.uint8).__array_interface__["data"][0] if len(mv) else None


def pool_mappings():
    """(start, end, name) of every memfd mapping of this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s+(.*)$", line.rstrip("\n"))
            if m and "memfd:" in m.group(3):
                out.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3)))
    return out


def test_get_points_into_the_pool_mapping(clients, uid):
    c = clients[1]
    oid = uid()
    clients[0].put(oid, bytes(range(256)) * 4096)  # 1 MiB, pulled to node 1
    mv = c.get(oid, timeout=20)
    a = addr_of(mv)
    cap = c.counter("pool_capacity")
    # the pool is a row of chunk memfds, mapped (read-only) where the pool's
    # range has them: the view lies in memfd mappings, one after the other
    maps = sorted(m for m in pool_mappings() if m[1] > a and m[0] < a + len(mv))
    assert maps and maps[0][0] <= a and maps[-1][1] >= a + len(mv), (hex(a), pool_mappings())
    assert all(x[1] == y[0] for x, y in zip(maps, maps[1:])), maps
    assert all(m[1] - m[0] <= cap for m in maps)
    mv2 = c.get(oid, timeout=20)
    assert addr_of(mv2) == a  # two gets see the same shared memory


def test_numpy_view_is_not_a_copy(clients, uid):
    c = clients[0]
    oid = uid()
    x = np.linspace(0, 1, 500000, dtype=np.float64).reshape(500, 1000)
    c.put_array(oid, x)
    mv = c.get(oid)
    y = c.get_array(oid)
    raw = np.frombuffer(mv, dtype=np.uint8)
    assert np.shares_memory(y, raw)
    data_off = len(mv) - x.nbytes
    assert y.__array_interface__["data"][0] == addr_of(mv) + data_off
    # the array's base chain ends at a memoryview over the pool
    base = y
    while isinstance(base, np.ndarray):
        base = base.base
    assert isinstance(base, memoryview) and base.readonly
    assert np.frombuffer(base, np.uint8).__array_interface__["data"][0] == addr_of(mv)


def test_views_are_read_only(clients, uid):
    oid = uid()
    clients[0].put(oid, b"immutable")
    mv = clients[0].get(oid)
    with pytest.raises(TypeError):
        mv[0] = 1
    arr = np.frombuffer(mv, np.uint8)
    with pytest.raises(ValueError):
        arr[0] = 1
    with pytest.raises(ValueError):
        arr.flags.writeable = True


def test_release_makes_view_unusable_and_frees_the_hold(clients, uid):
    c = clients[2]
    oid = uid()
    size = 8 << 20
    clients[0].put(oid, bytes(size))
    with c.get(oid, timeout=20) as mv:
        assert len(mv) == size
    with pytest.raises(ValueError, match="released"):
        mv[0]
    with pytest.raises(ValueError, match="released"):
        bytes(mv)
    del mv
    # the object is deleted; the copy on node 2 is freed once no hold remains
    used_before = c.counter("pool_used")
    keep = c.get(oid, timeout=20)
    clients[0].delete(oid)
    assert c.counter("pool_used") == used_before  # still held: not freed
    assert bytes(keep[:4]) == b"\0\0\0\0"        # and still readable
    del keep
    gc.collect()
    assert c.counter("pool_used") <= used_before - size


def test_derived_views_keep_the_hold(clients, uid):
    c = clients[1]
    oid = uid()
    clients[0].put(oid, b"abcdefgh" * 100000)
    mv = c.get(oid, timeout=20)
    sl = mv[8:16]
    arr = np.frombuffer(mv, dtype=np.uint8)   # numpy keeps a reference to mv only
    mv.release()                                # mv unusable, arr and sl still valid
    used = c.counter("pool_used")
    clients[0].delete(oid)
    assert c.counter("pool_used") == used      # held copy not freed
    c.put(oid, b"ZZZZZZZZ" * 100000)            # same id and size, on the same node
    assert bytes(c.get(oid)[:8]) == b"ZZZZZZZZ"
    assert bytes(sl) == b"abcdefgh"
    assert bytes(arr[:8]) == b"abcdefgh"


def test_close_waits_for_views(cluster, uid):
    c = hoplite.Client(cluster.socket(0))
    oid = uid()
    c.put(oid, b"still mapped after close" * 1000)
    mv = c.get(oid)
    arr = c.get_array(oid, dtype=np.uint8)
    c.close()
    with pytest.raises(hoplite.ConnectionFailed):
        c.get(oid)
    # the mapping stays until the last view is gone
    assert bytes(mv[:5]) == b"still" and bytes(arr[:5]) == b"still"
    del mv, arr
    gc.collect()
    assert c._n.closed  # now hpl_close has run


def test_put_makes_no_extra_copy(clients, uid):
    """put()/put_array() copy straight into shared memory: no temporary
    copy of the data shows up in Python's (or numpy's) heap."""
    import tracemalloc
    n = 32 << 20
    raw = bytes(n)
    sources = {"bytes": raw, "bytearray": bytearray(n), "ro-memoryview": memoryview(raw)[1:],
               "numpy": np.zeros(n // 8), "numpy-2d": np.zeros((1024, n // 8192))}
    tracemalloc.start()
    try:
        for name, src in sources.items():
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            oid = uid(name)
            clients[0].put(oid, src)
            peak = tracemalloc.get_traced_memory()[1]
            assert peak - before < (1 << 20), (name, peak - before)
            clients[0].delete(oid)  # keep the 256 MiB pool free
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        clients[0].put_array(uid("arr"), sources["numpy-2d"])
        assert tracemalloc.get_traced_memory()[1] - before < (1 << 20)
        # a non-contiguous array is copied once, into the created object
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        clients[0].put(uid("strided"), sources["numpy-2d"][:, ::2])
        assert tracemalloc.get_traced_memory()[1] - before < (1 << 20)
    finally:
        tracemalloc.stop()
    for o in clients[0].list("test_put_makes_no_extra_copy"):
        clients[0].delete(o.id)
