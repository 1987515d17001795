"""Many requests at once (put_many, get_many, stat_many, delete_many) and
paged listing (list_page, iter_list, list)."""
import numpy as np
import pytest

import hoplite


def test_batch_roundtrip(clients, uid):
    a, b = clients[0], clients[1]
    tag = uid()
    items = {"%s/%03d" % (tag, i): bytes([i]) * (i * 37) for i in range(50)}
    items["%s/big" % tag] = np.arange(40000, dtype=np.float32)  # 160 000 B: create + seal
    items["%s/strided" % tag] = np.arange(100, dtype=np.int64)[::2]  # copied once
    assert a.put_many(items) == [None] * len(items)
    ids = list(items)
    views = b.get_many(ids, timeout=10)  # another node: small ones from the directory
    for oid, mv in zip(ids, views):
        want = items[oid]
        want = want.tobytes() if isinstance(want, np.ndarray) else want
        assert bytes(mv) == want, oid
    del views
    sizes = a.stat_many(ids)
    assert sizes == [len(v) if isinstance(v, bytes) else v.nbytes for v in items.values()]
    assert a.delete_many(ids) == [None] * len(ids)
    with pytest.raises(hoplite.NotFound):
        a.stat(ids[0])


def test_batch_pairs_and_empty(clients, uid):
    c = clients[0]
    oid = uid()
    assert c.put_many([(oid, b"x"), (oid + "-2", bytearray(b"yz"))]) == [None, None]
    assert c.put_many({}) == []
    assert c.get_many([]) == []
    assert [bytes(v) for v in c.get_many([oid + "-2", oid])] == [b"yz", b"x"]
    with pytest.raises(hoplite.InvalidArgument):
        c.get_many(oid)  # a single id, not a list
    with pytest.raises(hoplite.InvalidArgument):
        c.stat_many(["ok", "bad\n"])  # invalid ids are refused before anything is sent


def test_batch_one_missing_among_many(clients, uid):
    c = clients[0]
    tag = uid()
    ids = ["%s/%d" % (tag, i) for i in range(20)]
    c.put_many({i: i.encode() for i in ids})
    asked = ids[:7] + [tag + "/missing"] + ids[7:]
    with pytest.raises(hoplite.BatchError) as ei:
        c.stat_many(asked)
    e = ei.value
    assert list(e.errors) == [tag + "/missing"]
    assert isinstance(e.errors[tag + "/missing"], hoplite.NotFound)
    assert e.code == hoplite.NotFound.code
    assert "missing" in e.detail
    assert e.results[:7] == [len(i) for i in ids[:7]]
    assert isinstance(e.results[7], hoplite.NotFound)
    # the same, without raising
    res = c.delete_many(asked, return_exceptions=True)
    assert [r is None for r in res] == [True] * 7 + [False] + [True] * 13
    assert isinstance(res[7], hoplite.NotFound)
    # gets: the missing one times out, the others arrive
    c.put_many({i: b"again" for i in ids[:3]})
    res = c.get_many(ids[:3] + [tag + "/missing"], timeout=0.3, return_exceptions=True)
    assert [bytes(v) for v in res[:3]] == [b"again"] * 3
    assert isinstance(res[3], hoplite.Timeout)


def test_put_many_existing_id(clients, uid):
    c = clients[0]
    oid = uid()
    c.put(oid, b"first")
    res = c.put_many({oid: b"other", oid + "-new": b"fine"}, return_exceptions=True)
    assert isinstance(res[0], hoplite.AlreadyExists)
    assert res[1] is None
    assert bytes(c.get(oid, timeout=5)) == b"first"


def test_batch_longer_than_one_call(clients, uid):
    c = clients[0]
    tag = uid()
    n = hoplite._lib.BATCH_MAX + 10  # two calls into the library
    ids = ["%s/%05d" % (tag, i) for i in range(n)]
    c.put_many({i: b"v" for i in ids})
    assert c.stat_many(ids) == [1] * n
    assert sum(1 for _ in c.iter_list(tag + "/")) == n
    c.delete_many(ids)


def test_list_pages(clients, uid):
    c = clients[0]
    tag = uid()
    # ids sharing prefixes: a page boundary must not drop or repeat any
    ids = sorted("%s/%s" % (tag, s) for s in
                 ["a", "a0", "a00", "a01", "a1", "ab", "b", "b/", "b/c", "ba", "z" * 30, "\u00fc"])
    c.put_many({i: b"." for i in ids})
    c.put(tag + "-other", b".")  # same start, outside the prefix "tag/"
    pages, after = [], None
    while True:
        objs, after = c.list_page(tag + "/", after=after, max=5)
        assert len(objs) <= 5
        pages.append([o.id for o in objs])
        if after is None:
            break
    got = [i for p in pages for i in p]
    assert got == sorted(ids, key=lambda s: s.encode())
    assert len(pages) >= 3
    one = c.list_page(tag + "/", max=1)
    assert [o.id for o in one[0]] == [got[0]] and one[1] == got[0]
    assert [o.id for o in c.list(tag + "/")] == got
    info = c.list(tag + "/a0")[0]
    assert (info.id, info.size, info.inline) == (tag + "/a0", 1, True)
    with pytest.raises(hoplite.InvalidArgument):
        c.list_page(max=-1)
