"""reduce / allreduce / subset reduce from Python on a 4-store cluster."""
import threading

import numpy as np
import pytest

import hoplite
from conftest import start_cluster

NODES = 4
DTYPES = {"u8": np.uint8, "i8": np.int8, "i32": np.int32, "u32": np.uint32, "i64": np.int64,
          "u64": np.uint64, "f32": np.float32, "f64": np.float64}
NP_OPS = {"sum": np.add, "min": np.minimum, "max": np.maximum, "prod": np.multiply}


@pytest.fixture(scope="module")
def cluster():
    lc = start_cluster(NODES)
    try:
        yield lc
        assert not lc.alive()
    finally:
        lc.stop()


def sources(dt, n, count, op, seed):
    rng = np.random.default_rng(seed)
    if op == "prod":   # stay far from overflow: elements in 1..3
        lo, hi = 1, 4
    elif np.dtype(dt).kind == "u":
        lo, hi = 0, 60
    else:
        lo, hi = -60, 60
    return [rng.integers(lo, hi, n).astype(dt) for _ in range(count)]


@pytest.mark.parametrize("name", list(DTYPES))
@pytest.mark.parametrize("op", list(NP_OPS))
def test_reduce_matches_numpy(clients, uid, name, op):
    dt = DTYPES[name]
    n = 50000  # 50-400 KB: reduced by the stores, not inline at the directory
    arrs = sources(dt, n, NODES, op, hash((name, op)) & 0xFFFF)
    ids = [uid("src") for _ in range(NODES)]
    for c, oid, a in zip(clients, ids, arrs):
        c.put(oid, a)
    target = uid("t")
    clients[0].reduce(target, ids, op=op, dtype=name)
    got = clients[0].get_array(target, dtype=dt, timeout=30)
    want = NP_OPS[op].reduce(np.stack(arrs), axis=0, dtype=dt)
    assert got.dtype == dt and np.array_equal(got, want)
    assert sorted(clients[0].reduce_sources(target, timeout=30)) == sorted(ids)


@pytest.mark.parametrize("dt", [np.float32, np.int64, "f64", "u8"])
def test_numpy_dtype_objects_and_names(clients, uid, dt):
    npdt = np.dtype(DTYPES.get(dt, dt))
    arrs = [np.arange(1000, dtype=npdt) % 7 for _ in range(2)]
    ids = [uid(), uid()]
    clients[1].put(ids[0], arrs[0])
    clients[2].put(ids[1], arrs[1])
    r = clients[3].allreduce_array(uid("t"), ids, dtype=dt, timeout=30)
    assert r.dtype == npdt and np.array_equal(r, arrs[0] + arrs[1])


def test_small_sources_reduced_at_the_directory(clients, uid):
    arrs = [np.full(16, i + 1, dtype=np.float64) for i in range(NODES)]
    ids = [uid() for _ in arrs]
    for c, oid, a in zip(clients, ids, arrs):
        c.put(oid, a)
    mv = clients[2].allreduce(uid("t"), ids, op="max", dtype=np.float64, timeout=30)
    assert np.array_equal(np.frombuffer(mv, np.float64), np.full(16, float(NODES)))


def test_allreduce_every_node(clients, uid):
    n = 1 << 20  # 4 MiB of f32 per node
    arrs = [np.arange(n, dtype=np.float32) % 97 + i for i in range(NODES)]
    ids = [uid("src") for _ in range(NODES)]
    target = uid("allreduce")
    results, errors = {}, []

    def participant(i):
        try:
            clients[i].put(ids[i], arrs[i])
            results[i] = np.array(clients[i].allreduce_array(target, ids, dtype=np.float32,
                                                             timeout=60, shape=(n,)))
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=participant, args=(i,)) for i in range(NODES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not errors, errors
    want = np.sum(np.stack(arrs), axis=0, dtype=np.float32)
    assert sorted(results) == list(range(NODES))
    for i in range(NODES):
        assert np.array_equal(results[i], want), i


def test_subset_reduce_first_k(clients, uid):
    """num_objects=k: the first k sources to be ready are reduced;
    reduce_sources() names them. Two sources are never put."""
    k = 3
    ids = [uid("g") for _ in range(NODES + 1)]
    vals = {}
    target = uid("t")
    clients[0].reduce(target, ids, dtype="i64", num_objects=k)
    for i in range(k):  # only k of the 5 ever become ready
        vals[ids[i]] = np.full(20000, 10 ** i, dtype=np.int64)
        clients[(i + 1) % NODES].put(ids[i], vals[ids[i]])
    used = clients[0].reduce_sources(target, timeout=30)
    assert len(used) == k and set(used) <= set(vals)
    got = clients[0].get_array(target, dtype=np.int64, timeout=30)
    assert np.array_equal(got, sum(vals[s] for s in used))


def test_reduce_starts_before_sources_exist(clients, uid):
    ids = [uid() for _ in range(2)]
    t = uid("t")
    clients[3].reduce(t, ids, op="min", dtype="i32")
    with pytest.raises(hoplite.Timeout):
        clients[3].get(t, timeout=0.3)
    clients[0].put(ids[0], np.array([5, -1, 7], dtype=np.int32))
    clients[1].put(ids[1], np.array([2, 4, 9], dtype=np.int32))
    assert clients[3].get_array(t, dtype=np.int32, timeout=30).tolist() == [2, -1, 7]


def test_reduce_range(clients, uid):
    n = 300000  # 1.2 MB of f32 per source: reduced by the stores
    arrs = [np.arange(n, dtype=np.float32) % 1009 + 1000 * i for i in range(NODES)]
    ids = [uid("src") for _ in range(NODES)]
    for c, oid, a in zip(clients, ids, arrs):
        c.put(oid, a)
    want = np.sum(np.stack(arrs), axis=0, dtype=np.float32)
    q = n // NODES
    targets = [uid("t") for _ in range(NODES)]
    for i, c in enumerate(clients):  # the slices of an allreduce, one per node
        c.reduce_range(targets[i], ids, offset=i * q * 4, length=q * 4, dtype="f32")
    for i, c in enumerate(clients):
        got = c.get_array(targets[i], dtype=np.float32, timeout=30)
        assert np.array_equal(got, want[i * q:(i + 1) * q]), i
    # small sources: reduced at the directory, from the offset; length 0: to the end
    small = [np.arange(100, dtype=np.int64) * (i + 1) for i in range(2)]
    sids = [uid(), uid()]
    clients[0].put(sids[0], small[0])
    clients[1].put(sids[1], small[1])
    t = uid("t")
    clients[2].reduce_range(t, sids, offset=10 * 8, length=0, dtype="i64")
    assert np.array_equal(clients[2].get_array(t, dtype=np.int64, timeout=30),
                          (small[0] + small[1])[10:])
    with pytest.raises(hoplite.InvalidArgument):
        clients[0].reduce_range(uid("t"), ids, offset=2, length=8, dtype="f32")
    with pytest.raises(hoplite.InvalidArgument):
        clients[0].reduce_range(uid("t"), ids, offset=n * 4 - 4, length=8, dtype="f32")
