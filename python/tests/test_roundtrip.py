"""Round trips: bytes-like objects and numpy arrays, metadata calls, ids."""
import array
import mmap
import struct

import numpy as np
import pytest

import hoplite
from hoplite import arrays

SIZES = [0, 1, 1000, 64 * 1024, 64 * 1024 + 1, 3 * 1024 * 1024 + 5]


def pattern(n, seed=0):
    return np.random.default_rng(seed + n).integers(0, 256, n, dtype=np.uint8).tobytes()


@pytest.mark.parametrize("size", SIZES)
def test_bytes_roundtrip_same_and_other_node(clients, uid, size):
    oid = uid()
    data = pattern(size)
    clients[0].put(oid, data)
    for c in (clients[0], clients[1]):
        mv = c.get(oid, timeout=20)
        assert isinstance(mv, memoryview) and mv.readonly
        assert mv.nbytes == size and mv.format == "B"
        assert bytes(mv) == data
    assert clients[2].stat(oid).size == size


def test_buffer_kinds(clients, uid):
    src = pattern(200000, 1)
    cases = {
        "bytearray": bytearray(src),
        "memoryview-slice": memoryview(src)[1000:150000],   # read-only, offset into bytes
        "array.array": array.array("d", range(5000)),       # writable, non-byte format
        "readonly-numpy": np.frombuffer(src, dtype=np.uint32),
        "2d-numpy": np.arange(600, dtype=np.int16).reshape(20, 30),
    }
    m = mmap.mmap(-1, 70000)
    m.write(src[:70000])
    cases["mmap"] = m
    for name, obj in cases.items():
        oid = uid(name)
        clients[0].put(oid, obj)
        expect = memoryview(obj).tobytes()
        assert bytes(clients[1].get(oid, timeout=20)) == expect, name
    m.close()


def test_non_contiguous_sources(clients, uid):
    base = np.arange(100000, dtype=np.float64).reshape(250, 400)
    for name, obj in {"sliced": base[::3, 1::7], "fortran": np.asfortranarray(base),
                      "mv-strided": memoryview(pattern(10001))[::2]}.items():
        oid = uid(name)
        clients[0].put(oid, obj)
        assert bytes(clients[1].get(oid, timeout=20)) == memoryview(obj).tobytes(order="C"), name


DTYPES = [np.uint8, np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64, np.complex64, np.complex128, np.bool_, ">i4",
          "<M8[ns]", "S5"]
SHAPES = [(), (0,), (7,), (3, 4), (2, 3, 5), (0, 4), (300, 257)]


def make(dtype, shape, seed):
    dt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    raw = rng.integers(0, 256, n * dt.itemsize, dtype=np.uint8)
    a = raw.view(dt).reshape(shape)
    if dt.kind in "fc":
        a = np.nan_to_num(a)  # NaN != NaN would spoil the comparison
    return a


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_array_roundtrip(clients, uid, dtype, shape):
    a = make(dtype, shape, hash((str(dtype), shape)) & 0xFFFF)
    oid = uid()
    clients[0].put_array(oid, a)
    for c in (clients[0], clients[2]):
        b = c.get_array(oid, timeout=20)
        assert b.dtype == a.dtype and b.shape == a.shape
        assert not b.flags.writeable
        assert np.array_equal(a, b)


def test_array_layouts_kept_logically(clients, uid):
    base = make(np.float32, (64, 96), 3)
    for name, a in {"F": np.asfortranarray(base), "T": base.T, "slice": base[5:50:2, ::-3]}.items():
        oid = uid(name)
        clients[1].put_array(oid, a)
        b = clients[0].get_array(oid, timeout=20)
        assert b.shape == a.shape and b.flags.c_contiguous and np.array_equal(a, b), name


def test_raw_object_as_array(clients, uid):
    a = np.arange(24, dtype=np.int64)
    oid = uid()
    clients[0].put(oid, a)
    b = clients[1].get_array(oid, dtype=np.int64, shape=(4, 6), timeout=20)
    assert b.shape == (4, 6) and np.array_equal(b.ravel(), a)
    with pytest.raises(hoplite.InvalidArgument):
        clients[1].get_array(oid, dtype=np.complex128, shape=(5, 5), timeout=20)
    with pytest.raises(hoplite.InvalidArgument, match="HPLA"):
        clients[1].get_array(oid, timeout=20)  # no header: not an array object


def test_header_format(clients, uid):
    a = np.zeros((3, 5, 7), dtype="<f8")
    hdr = arrays.encode_header(a.dtype, a.shape)
    assert hdr[:4] == b"HPLA" and hdr[4] == 1 and hdr[5] == 3
    dlen, d = struct.unpack_from("<HQ", hdr, 6)
    assert dlen == 3 and d == len(hdr) == 64
    assert struct.unpack_from("<3Q", hdr, 16) == (3, 5, 7)
    assert hdr[40:43] == b"<f8" and hdr[43:] == bytes(64 - 43)
    oid = uid()
    clients[0].put_array(oid, a)
    assert clients[0].stat(oid).size == 64 + a.nbytes
    raw = clients[0].get(oid)
    assert bytes(raw[:64]) == hdr
    # a 32-dimensional array needs a header longer than 64 bytes, still 64-aligned
    big = arrays.encode_header(np.uint8, (1,) * 32)
    assert len(big) % 64 == 0 and len(big) >= 16 + 8 * 32 + 3


def test_object_dtype_refused(clients, uid):
    with pytest.raises(hoplite.InvalidArgument):
        clients[0].put_array(uid(), np.array([object(), 1], dtype=object))


def test_ids_str_and_bytes(clients, uid):
    oid = uid("ü-unicode ")
    clients[0].put(oid, b"x")
    assert bytes(clients[1].get(oid.encode("utf-8"), timeout=20)) == b"x"
    long_id = ("L" * 255)
    clients[0].put(long_id, b"255")
    assert bytes(clients[0].get(long_id)) == b"255"
    clients[0].delete(long_id)


@pytest.mark.parametrize("bad", ["", "x" * 256, b"a\nb", "tab\there", "del\x7f", b"nul\x00",
                                 "\u00e9" * 128, 42, None])
def test_invalid_ids(clients, bad):
    for call in (lambda: clients[0].put(bad, b"x"), lambda: clients[0].get(bad, timeout=1),
                 lambda: clients[0].stat(bad), lambda: clients[0].delete(bad)):
        with pytest.raises(ValueError, match="object id") as ei:
            call()
        assert isinstance(ei.value, hoplite.InvalidArgument)


def test_metadata_calls(clients, uid):
    c0, c1 = clients[0], clients[1]
    prefix = uid("meta") + "/"
    c0.put(prefix + "small", b"s" * 10)
    c0.put(prefix + "big", bytes(200000))
    assert c0.contains(prefix + "big") and not c1.contains(prefix + "big")
    bytes(c1.get(prefix + "big", timeout=20))
    assert c1.contains(prefix + "big")
    st = c1.stat(prefix + "big")
    assert st.size == 200000 and st.copies == 2 and st.complete == 2 and not st.inline
    assert c1.stat(prefix + "small").inline
    listed = {o.id: o for o in c1.list(prefix)}
    assert set(listed) == {prefix + "small", prefix + "big"}
    assert listed[prefix + "big"].size == 200000
    assert c0.list(prefix + "nothing-has-this-prefix") == []
    ctr = c1.counters()
    assert ctr["pool_capacity"] == 256 << 20 and ctr["data_bytes_received"] >= 200000
    assert c1.counter("pool_capacity") == 256 << 20
    with pytest.raises(hoplite.NotFound):
        c1.counter("no_such_counter")
    c0.delete(prefix + "big")
    with pytest.raises(hoplite.NotFound):
        c1.stat(prefix + "big")
    c0.put(prefix + "big", b"reused")  # ids can be reused at once
    assert bytes(c1.get(prefix + "big", timeout=20)) == b"reused"
    events, nxt = c0.transfers()
    assert nxt >= len(events) > 0 and any(e.kind == "assign" for e in events)


def test_create_seal_and_abort(clients, uid):
    oid = uid()
    with clients[0].create(oid, 100000) as cr:
        cr.view[:5] = b"hello"
        cr.write(b"world", offset=99995)
    mv = clients[1].get(oid, timeout=20)
    assert bytes(mv[:5]) == b"hello" and bytes(mv[-5:]) == b"world"
    oid2 = uid()
    cr = clients[0].create(oid2, 1000)
    cr.abort()
    with pytest.raises(hoplite.NotFound):
        clients[0].stat(oid2)
    with pytest.raises(RuntimeError):
        with clients[0].create(oid2, 10):
            raise RuntimeError("boom")  # aborted, not sealed
    with pytest.raises(hoplite.NotFound):
        clients[0].stat(oid2)


def test_socket_from_environment(cluster, uid, monkeypatch):
    monkeypatch.setenv("HOPLITE_SOCKET", cluster.socket(2))
    with hoplite.Client() as c:
        oid = uid()
        c.put(oid, b"env")
        assert c.contains(oid)
    monkeypatch.delenv("HOPLITE_SOCKET")
    with pytest.raises(hoplite.InvalidArgument, match="HOPLITE_SOCKET"):
        hoplite.Client()


def test_closed_client_refuses_calls(cluster, uid):
    c = hoplite.Client(cluster.socket(0))
    c.close()
    assert c.closed
    with pytest.raises(hoplite.ConnectionFailed, match="closed"):
        c.put(uid(), b"x")
    c.close()  # idempotent


def test_timeouts_validated(clients):
    with pytest.raises(ValueError):
        clients[0].get("x", timeout=-1)
    with pytest.raises(ValueError):
        clients[0].get("x", timeout="soon")
