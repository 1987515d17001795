"""hoplite.connect_admin (hpl_connect_admin): the directory itself as the
admin role, proven with the cluster secret. It deletes what another node
made, which that node's peers may not; a wrong or missing secret fails
with an exception that says so; calls that need a store are refused."""
import os
import time

import pytest

import hoplite


def _wait_known(client, obj_id):
    deadline = time.monotonic() + 10
    while True:
        try:
            return client.stat(obj_id)
        except hoplite.NotFound:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def test_connect_admin_deletes(cluster, clients, uid):
    a, b = clients[0], clients[1]
    x, y = uid("big"), uid("small")
    a.put(x, b"x" * 100000)  # larger than inline: a copy in node-0's pool
    a.put(y, b"y" * 10)
    _wait_known(b, x)
    _wait_known(b, y)
    with pytest.raises(hoplite.NotAllowed) as e:
        b.delete(x)  # node-0 made it and is up
    assert "node-0" in e.value.detail
    with hoplite.connect_admin(cluster.dir_addr, cluster.secret) as adm:
        assert "admin@" in repr(adm)
        assert adm.stat(x).size == 100000
        assert {o.id for o in adm.list(x[:-1])} >= {x}
        assert adm.status()["nodes"]
        adm.delete(x)
        assert adm.delete_many([y]) == [None]
        with pytest.raises(hoplite.NotFound):
            adm.stat(x)
        with pytest.raises(hoplite.InvalidState) as e:
            adm.get(x, timeout=1)
        assert "admin handle" in e.value.detail
        with pytest.raises(hoplite.InvalidState):
            adm.put(uid(), b"z")
    with pytest.raises(hoplite.NotFound):
        a.stat(x)
    with pytest.raises(hoplite.NotFound):
        b.stat(y)
    assert not a.contains(x)


def test_connect_admin_refusals(cluster, tmp_path, monkeypatch):
    wrong = tmp_path / "wrong.secret"
    fd = os.open(wrong, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, b"ab" * 32 + b"\n")
    os.close(fd)
    with pytest.raises(hoplite.AuthFailed) as e:
        hoplite.connect_admin(cluster.dir_addr, wrong)
    assert "another cluster secret" in e.value.detail
    monkeypatch.delenv("HOPLITE_AUTH_FILE", raising=False)
    with pytest.raises(hoplite.InvalidArgument) as e:
        hoplite.connect_admin(cluster.dir_addr)
    assert "no cluster secret" in str(e.value)
    # the environment's defaults
    monkeypatch.setenv("HOPLITE_DIRECTORY", cluster.dir_addr)
    monkeypatch.setenv("HOPLITE_AUTH_FILE", cluster.secret)
    adm = hoplite.connect_admin()
    with pytest.raises(hoplite.NotFound):
        adm.stat("admin-test-never-made")
    adm.close()
