"""Blocking calls release the GIL: other threads run during a long get."""
import threading
import time

import numpy as np

import hoplite


def test_other_thread_runs_during_blocking_get(cluster, uid):
    reader = hoplite.Client(cluster.socket(1))
    writer = hoplite.Client(cluster.socket(0))
    oid = uid()
    count = [0]
    stop = threading.Event()
    samples = {}
    get_started = threading.Event()

    def counter():
        while not stop.is_set():
            count[0] += 1

    def putter():
        get_started.wait(10)
        time.sleep(0.3)          # the reader is blocked in hpl_get by now
        samples["a"] = count[0]
        time.sleep(0.7)
        samples["b"] = count[0]
        writer.put(oid, np.full(1 << 20, 7, dtype=np.uint8))

    threads = [threading.Thread(target=counter), threading.Thread(target=putter)]
    for t in threads:
        t.start()
    try:
        t0 = time.monotonic()
        get_started.set()
        mv = reader.get(oid, timeout=20)   # blocks about 1 s, GIL released
        waited = time.monotonic() - t0
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert waited >= 0.9
    assert bytes(mv[:3]) == b"\x07\x07\x07" and len(mv) == 1 << 20
    # the counter thread made progress while the main thread was in get()
    assert samples["b"] - samples["a"] > 10000, samples
    del mv
    reader.close()
    writer.close()


def test_concurrent_gets_on_one_client(clients, uid):
    """One handle shared by several threads, each waiting for its own object."""
    c = clients[2]
    ids = [uid() for _ in range(6)]
    results = {}

    def get(i):
        results[i] = bytes(c.get(ids[i], timeout=20))

    threads = [threading.Thread(target=get, args=(i,)) for i in range(len(ids))]
    for t in threads:
        t.start()
    time.sleep(0.2)
    for i, oid in enumerate(reversed(ids)):
        clients[i % 2].put(oid, oid.encode() * 1000)
    for t in threads:
        t.join(30)
    assert results == {i: ids[i].encode() * 1000 for i in range(len(ids))}
