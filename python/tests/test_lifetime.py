"""Object lifetimes: Client.set_lifetime(owned=..., ttl=...)."""
import time

import numpy as np
import pytest

import hoplite


def _gone(client, oid):
    try:
        client.stat(oid)
    except hoplite.NotFound:
        return True
    return False


def _wait_gone(client, ids, timeout):
    deadline = time.monotonic() + timeout
    while not all(_gone(client, i) for i in ids):
        assert time.monotonic() < deadline, "still there: %s" % [i for i in ids
                                                                 if not _gone(client, i)]
        time.sleep(0.02)


def test_owned_deleted_on_close(cluster, clients, uid):
    other = clients[1]
    owner = hoplite.Client(cluster.sockets[0])
    kept = uid("kept")
    owner.put(kept, b"k" * 100)  # before set_lifetime: not owned
    owner.set_lifetime(owned=True)
    small, large = uid("small"), uid("large")
    owner.put(small, b"s" * 1000)
    owner.put(large, np.arange(1 << 18, dtype=np.float64))  # 2 MiB: create + seal
    with owner.create(uid("created"), 4096) as c:
        c.write(b"c" * 4096)
    created = c.id
    del c  # a Creation keeps the connection (see Client.close)
    many = [uid("m"), uid("m")]
    assert owner.put_many({many[0]: b"a", many[1]: np.zeros(100000, np.uint8)}) == [None] * 2
    assert bytes(other.get(large, timeout=10)[:8]) == np.arange(1, dtype=np.float64).tobytes()
    assert other.contains(large)  # a copy on node 1
    owner.close()
    _wait_gone(other, [small, large, created] + many, 5.0)
    assert not other.contains(large)
    assert bytes(other.get(kept, timeout=10)) == b"k" * 100
    assert other.counter("owned_deletes") == 0  # node 0 did the deleting
    assert clients[0].counter("owned_deletes") >= 5


def test_ttl(clients, uid):
    c, other = clients[2], clients[1]
    c.set_lifetime(ttl=0.8)
    a, b = uid("a"), uid("b")
    t0 = time.monotonic()
    c.put(a, b"x" * 10)
    c.put(b, np.ones(1 << 18, np.float32))
    c.set_lifetime()  # back to: not owned, no ttl
    keep = uid("keep")
    c.put(keep, b"y")
    assert bytes(other.get(a, timeout=5)) == b"x" * 10
    assert time.monotonic() - t0 < 0.8
    _wait_gone(other, [a, b], 4.0)
    assert time.monotonic() - t0 >= 0.8
    assert bytes(other.get(keep, timeout=5)) == b"y"
    with pytest.raises(hoplite.Timeout):
        other.get(b, timeout=0.2)


def test_lifetime_errors(clients, uid):
    c = clients[0]
    for bad in (-1, float("nan"), float("inf"), "1", True):
        with pytest.raises(hoplite.InvalidArgument):
            c.set_lifetime(ttl=bad)
    c.set_lifetime(ttl=31 * 24 * 3600)  # longer than 30 days: the store refuses each put
    try:
        with pytest.raises(hoplite.InvalidArgument, match="ttl"):
            c.put(uid(), b"z")
    finally:
        c.set_lifetime()
    oid = uid()
    c.put(oid, b"z")
    assert c.stat(oid).size == 1
