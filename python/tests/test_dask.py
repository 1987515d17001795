"""hoplite.dask under a real Dask scheduler (distributed.LocalCluster, worker
processes on 127.0.0.1) with each worker on its own hoplite store."""
import os

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")

import hoplite  # noqa: E402
import hoplite.dask as hd  # noqa: E402


def double(a):
    return a * 2


def total(a):
    return float(a.sum())


def inspect(ref):
    """Runs in a worker: where the array came from and how."""
    a = ref.get(timeout=30)
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return {"socket": os.environ.get("HOPLITE_SOCKET"), "writeable": a.flags.writeable,
            "base": type(base).__name__, "sum": float(a.sum()), "pid": os.getpid()}


@pytest.fixture(scope="module")
def cluster():
    """Three stores; the driver deletes refs its workers put, which the
    directory allows only with --delete-any (docs: "Who may delete")."""
    from conftest import start_cluster
    lc = start_cluster(3, dir_args=["--delete-any"])
    try:
        yield lc
    finally:
        lc.stop()


@pytest.fixture(scope="module")
def dask_env(cluster, monkeypatch_module):
    # the driver uses node 0, the workers node 1 (spawned with that socket)
    monkeypatch_module.setenv("HOPLITE_SOCKET", cluster.socket(0))
    lc = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                                  env={"HOPLITE_SOCKET": cluster.socket(1)})
    dc = distributed.Client(lc)
    try:
        yield dc
    finally:
        dc.close()
        lc.close()


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def test_workers_use_their_store(cluster, dask_env):
    socks = hd.worker_sockets(dask_env)
    assert len(socks) == 2 and set(socks.values()) == {cluster.socket(1)}


def test_refs_through_dask(cluster, dask_env, clients):
    x = np.arange(2_000_000, dtype=np.float64)   # 16 MB
    ref = hd.put(x)                               # driver: store 0
    assert ref.shape == x.shape and ref.nbytes == x.nbytes
    info = dask_env.submit(inspect, ref, pure=False).result(timeout=60)
    assert info["socket"] == cluster.socket(1) and info["pid"] != os.getpid()
    assert info["writeable"] is False and info["base"] == "memoryview"  # zero-copy view
    assert info["sum"] == float(x.sum())
    # a chain of tasks: the intermediate 16 MB array never passes through Dask
    doubled = dask_env.submit(hd.hoplite_task(double), ref, pure=False)
    r2 = doubled.result(timeout=60)
    assert isinstance(r2, hd.ArrayRef) and r2.shape == x.shape
    s = dask_env.submit(hd.hoplite_task(total), doubled, pure=False).result(timeout=60)
    assert s == float((x * 2).sum())
    # the worker's store holds the doubled array; the driver can read it too
    assert clients[1].contains(r2.id)
    assert np.array_equal(r2.get(timeout=30), x * 2)
    # small results are returned through Dask as they are
    small = dask_env.submit(hd.hoplite_task(double), np.ones(4), pure=False).result(timeout=60)
    assert isinstance(small, np.ndarray) and small.tolist() == [2.0] * 4
    hd.delete([ref, r2])
    with pytest.raises(hoplite.NotFound):
        clients[0].stat(ref.id)
