"""hoplite.dask.scatter (the drop-in for client.scatter) and the worker
plugin, under a real Dask scheduler: distributed.LocalCluster with three
worker processes, each connected by the plugin to its own store of a
4-store hoplite cluster (the driver, this process, uses store 0).

What Dask moves is read from the workers' own records: each entry of
Worker.transfer_outgoing_log is one get_data answer, with the keys in it
and "compressed", the bytes that answer put on the wire. The control test
(test_client_scatter_moves_the_bytes) shows the same measure sees Dask's own
client.scatter moving the arrays; with hoplite.dask.scatter it sees nothing,
or refs of a few hundred bytes."""
import gc
import os

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
import dask  # noqa: E402

import hoplite  # noqa: E402
import hoplite.dask as hd  # noqa: E402
from conftest import start_cluster  # noqa: E402

N = 1 << 20            # float64 elements: 8 MiB per array
REF_MAX = 4096         # wire bytes of a get_data answer carrying only a ref


@pytest.fixture(scope="module")
def cluster():
    lc = start_cluster(4, memory="128M")
    try:
        yield lc
        assert not lc.alive()
    finally:
        lc.stop()


@pytest.fixture(scope="module")
def dc(cluster):
    """A Dask client of 3 worker processes (names 0, 1, 2) without
    HOPLITE_SOCKET; the plugin connects worker i to store i+1. The Active
    Memory Manager does not run by itself (tests run it when they mean to)."""
    drv = hd.use(cluster.socket(0))
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        lc = distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=True,
                                      host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                                      env={"HOPLITE_SOCKET": ""})
    c = distributed.Client(lc)
    try:
        hd.register(c, sockets=sockets_by_name(cluster))
        yield c
    finally:
        c.close()
        lc.close()
        hd._forget(drv)


def sockets_by_name(cluster):
    return {i: cluster.socket(i + 1) for i in range(3)}


def workers(dc):
    """Worker addresses, in name order (worker i uses store i+1)."""
    info = dc.scheduler_info()["workers"]
    return [a for a, _ in sorted(info.items(), key=lambda kv: kv[1]["name"])]


def _sent(key, peers, dask_worker=None):
    """[(to, wire bytes)] of this worker's get_data answers to other workers
    that carried `key`."""
    return [(e["who"], e["compressed"]) for e in dask_worker.transfer_outgoing_log
            if key in e["keys"] and e["who"] in peers]


def dask_moves(dc, key):
    """{sender: [(receiver, wire bytes)]} of every move of `key` between workers."""
    ws = workers(dc)
    return {w: v for w, v in dc.run(_sent, key, ws).items() if v}


def counters(cluster, name):
    out = []
    for s in cluster.sockets:
        with hoplite.Client(s) as c:
            out.append(c.counter(name))
    return out


def data(seed):
    # random doubles: Dask's lz4 cannot shrink them, so bytes moved show in full
    return np.random.default_rng(seed).random(N)


# unchanged task functions: they take the array and know nothing of hoplite
def total(a):
    return a.sum()


def scale(a, k):
    return a * k


def score(batch, w):
    return float(w[batch] * 2)


def describe(a):
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return {"type": type(a).__name__, "writeable": a.flags.writeable,
            "base": type(base).__name__, "socket": hd._connected_socket()}


def _store_socket(dask_worker=None):
    return dask_worker.hoplite.socket, hd.client().socket, os.environ.get("HOPLITE_SOCKET")


def _plugin_client(dask_worker=None):
    c = getattr(dask_worker, "hoplite", None)
    return None if c is None else (c.socket, c.closed)


def test_plugin_connects_each_worker_to_its_store(cluster, dc):
    ws = workers(dc)
    got = dc.run(_store_socket)
    want = sockets_by_name(cluster)
    assert {w: got[w] for w in ws} == {w: (want[i], want[i], "") for i, w in enumerate(ws)}
    assert hd.worker_sockets(dc) == {w: want[i] for i, w in enumerate(ws)}
    # each worker has one client connected to its store (and nothing else: 1 per store)
    assert counters(cluster, "clients")[1:] == [2, 2, 2]  # the worker's and ours
    # teardown closes it; registering again connects again
    dc.unregister_worker_plugin(hd.PLUGIN_NAME)
    assert set(hd.worker_sockets(dc).values()) == {None}
    assert set(dc.run(_plugin_client).values()) == {None}
    hd.register(dc, sockets=want)
    assert hd.worker_sockets(dc) == {w: want[i] for i, w in enumerate(ws)}


def test_broadcast_to_unchanged_tasks(cluster, dc):
    x = data(1)
    ws = workers(dc)
    pulls0 = counters(cluster, "pulls_made")
    recv0 = counters(cluster, "data_bytes_received")
    fut = hd.scatter(dc, x, broadcast=True)
    assert isinstance(fut, distributed.Future) and fut.status == "finished"
    assert set(dc.who_has(fut)[fut.key]) == set(ws)
    # one task per worker, pinned, plus an unpinned graph on top
    sums = dc.gather([dc.submit(total, fut, workers=[w], allow_other_workers=False, pure=False)
                      for w in ws])
    assert sums == [x.sum()] * 3 and all(type(s) is np.float64 for s in sums)
    assert dc.gather(dc.map(score, [0, 5, N - 1], w=fut)) == [x[0] * 2, x[5] * 2, x[-1] * 2]
    doubled = dc.submit(scale, fut, 2.0)
    assert dc.submit(total, doubled).result() == (x * 2.0).sum()
    assert np.array_equal(doubled.result(), x * 2.0)
    # Dask moved nothing between the workers...
    assert dask_moves(dc, fut.key) == {}
    # ...every worker's store pulled the array through hoplite
    pulls = counters(cluster, "pulls_made")
    recv = counters(cluster, "data_bytes_received")
    assert [pulls[i] - pulls0[i] for i in (1, 2, 3)] == [1, 1, 1]
    assert all(recv[i] - recv0[i] >= x.nbytes for i in (1, 2, 3))
    d = dc.submit(describe, fut, workers=[ws[2]], pure=False).result()
    assert d == {"type": "HopliteArray", "writeable": False, "base": "memoryview",
                 "socket": cluster.socket(3)}  # zero-copy over worker 2's own store
    # the driver reads it back (from its own store)
    assert np.array_equal(fut.result(), x)


def test_dask_moves_only_refs(cluster, dc):
    """When Dask does move a scattered array (a task on a worker that was
    not given it; the Active Memory Manager dropping and re-making
    replicas), the wire carries a ref; the receiver reads from hoplite."""
    ws = workers(dc)
    x = data(2)
    fut = hd.scatter(dc, x, workers=[ws[0]])          # on worker 0 only
    assert dc.who_has(fut)[fut.key] == (ws[0],)
    pulls0 = counters(cluster, "pulls_made")
    s = dc.submit(total, fut, workers=[ws[1]], allow_other_workers=False, pure=False)
    assert s.result() == x.sum()
    moves = dask_moves(dc, fut.key)
    assert list(moves) == [ws[0]] and [m[0] for m in moves[ws[0]]] == [ws[1]]
    assert all(b < REF_MAX for _, b in moves[ws[0]]), moves
    assert counters(cluster, "pulls_made")[2] == pulls0[2] + 1   # worker 1's store pulled
    st = dc.run(hd.stats)
    assert st[ws[0]]["ref_sends"] >= 1 and st[ws[0]]["byte_sends"] == 0
    assert st[ws[1]]["ref_gets"] >= 1

    # broadcast, then let the AMM drop the replicas nobody waits for
    y = data(3)
    b = hd.scatter(dc, y, broadcast=True)
    dc.amm.run_once()
    assert len(dc.who_has(b)[b.key]) == 1
    sums = dc.gather([dc.submit(total, b, workers=[w], allow_other_workers=False, pure=False)
                      for w in ws])
    assert sums == [y.sum()] * 3
    moves = dask_moves(dc, b.key)
    assert sum(len(v) for v in moves.values()) == 2, moves     # re-made on the 2 others
    assert all(n < REF_MAX for v in moves.values() for _, n in v), moves


def test_client_scatter_moves_the_bytes(dc):
    """Control: the same measure on Dask's own scatter (what the drop-in
    replaces) sees whole arrays on the wire, so the asserts above can fail."""
    ws = workers(dc)
    x = data(4)
    fut = dc.scatter(x, workers=[ws[0]], hash=False)
    assert dc.submit(total, fut, workers=[ws[1]], allow_other_workers=False,
                     pure=False).result() == x.sum()
    moves = dask_moves(dc, fut.key)
    assert [b >= x.nbytes for v in moves.values() for _, b in v] == [True]
    y = data(5)
    b = dc.scatter(y, broadcast=True, hash=False)
    moved = [n for v in dask_moves(dc, b.key).values() for _, n in v]
    assert len(moved) == 2 and min(moved) >= y.nbytes     # replicate copied it twice


def test_keys_and_containers(dc):
    ws = workers(dc)
    x, y = data(6), data(7)
    # hash=True names keys as client.scatter does, deterministically
    f1 = hd.scatter(dc, x)
    assert f1.key == "ndarray-" + dask.base.tokenize(x)
    assert hd.scatter(dc, x).key == f1.key
    assert hd.scatter(dc, x, hash=False).key != f1.key
    small = np.arange(10.0)                               # below min_bytes: Dask's scatter
    lst = hd.scatter(dc, [y, x + 1, small, "text"], broadcast=2)
    assert type(lst) is list and [f.key for f in lst[:3]] == [
        "ndarray-" + dask.base.tokenize(v) for v in (y, x + 1, small)]
    assert [len(dc.who_has(f)[f.key]) for f in lst] == [2, 2, 2, 2]
    got = dc.gather(dc.submit(lambda a, b, c, d: [a.sum(), b.sum(), type(c).__name__, d],
                              *lst, pure=False))
    assert got == [y.sum(), (x + 1).sum(), "ndarray", "text"]
    tup = hd.scatter(dc, (x, y))
    assert type(tup) is tuple and len(tup) == 2
    dct = hd.scatter(dc, {"weights": x, 3: y, "n": 7}, workers=ws[1:])
    assert list(dct) == ["weights", 3, "n"] and dct["weights"].key == "weights"
    assert set(dc.who_has(dct["weights"])["weights"]) <= set(ws[1:])
    assert dc.submit(total, dct[3]).result() == y.sum()


def _staged_count():
    return len(hd._staged)


def test_failures_are_clear_and_leave_nothing(cluster, dc, monkeypatch):
    ws = workers(dc)
    # a plugin that gives worker 2 no socket: its registration fails, naming it
    with pytest.raises(hd.NotConnected, match=r"no store socket for worker 2 .*HOPLITE_SOCKET"):
        hd.register(dc, sockets={0: cluster.socket(1), 1: cluster.socket(2)})
    assert hd.worker_sockets(dc)[ws[2]] is None
    # a scatter that needs worker 2 fails the same way, and leaves nothing behind
    x = data(8)
    gc.collect()
    hd.wait_deletes(dc)
    before = hd.client().list("dask/scatter/")
    with pytest.raises(hd.NotConnected, match=r"worker 2 .* has no hoplite store"):
        hd.scatter(dc, x, broadcast=True)
    hd.wait_deletes(dc)
    assert set(dc.run(_staged_count).values()) == {0}     # workers 0, 1 dropped theirs
    assert hd.client().list("dask/scatter/") == before    # the object was deleted
    assert "ndarray-" + dask.base.tokenize(x) not in dc.who_has()   # no key made
    # a store socket that does not exist: the registration says so
    with pytest.raises(hd.NotConnected, match=r"worker \d .*cannot connect.*missing\.sock"):
        hd.register(dc, socket=cluster.workdir + "/missing.sock")
    # the driver without a store
    drv = hd.client()
    monkeypatch.setattr(hd.conn, "_client", None)  # the process client (hoplite/dask/conn.py)
    monkeypatch.delenv("HOPLITE_SOCKET", raising=False)
    with pytest.raises(hd.NotConnected, match="this process has no hoplite store"):
        hd.scatter(dc, x)
    monkeypatch.setattr(hd.conn, "_client", drv)
    # back to a working plugin
    assert sorted(hd.register(dc, sockets=sockets_by_name(cluster)).values()) == \
        cluster.sockets[1:]
    assert dc.submit(total, hd.scatter(dc, x, broadcast=True)).result() == x.sum()


def test_objects_deleted_when_futures_released(cluster, dc):
    c = hd.client()
    gc.collect()
    hd.wait_deletes(dc)
    assert c.list("dask/scatter/") == []                  # earlier tests' are gone
    x = data(9)
    a = hd.scatter(dc, x, broadcast=True)
    a2 = hd.scatter(dc, x, broadcast=True)                # same key (hash): a 2nd object
    assert a2.key == a.key
    objs = c.list("dask/scatter/")
    assert len(objs) == 2
    r = dc.submit(total, a)
    del a
    gc.collect()
    hd.wait_deletes(dc)
    assert len(c.list("dask/scatter/")) == len(objs)      # a2 still holds the key
    assert r.result() == x.sum()
    del a2, r
    gc.collect()
    hd.wait_deletes(dc)
    assert c.list("dask/scatter/") == []
    assert counters(cluster, "objects")[0] == 0
