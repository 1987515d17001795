#!/usr/bin/env python3
"""fuzz-seeds.py - write the hand-made seeds of the fuzz targets that the
recorded ones (scripts/fuzz-corpus.sh) cannot give: sessions that open
with a version-4 handshake HELLO (src/common/auth.h: roles NODE, READER,
DATA, ADMIN, a node name) followed by untagged frames, which fuzz_dir's
authenticated directory answers and tags (tests/fuzz/fuzz_loop.h,
fuzz_feed_authed), the same HELLOs for fuzz_frame's handshake parsers, and
a store's refusing HELLO (Hello.status, .detail) for fuzz_client and
fuzz_store, and sessions to fuzz_store's data port holding a node
credential (role DATA).
The messages are written by hand from src/common/hoplite.proto.

    scripts/fuzz-seeds.py        (writes tests/fuzz/corpus/*/v4-*)
"""
import os
import struct

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# message types (src/common/proto.h)
REGISTER, HEARTBEAT, LOC_ADD, INLINE_PUT, HELD = 40, 42, 43, 45, 62
DELETE, STATUS, COUNTERS, PEEK, PUBLISH, STAT = 14, 67, 18, 30, 76, 12
NODE, READER, DATA, ADMIN = 1, 2, 3, 4
MAKER_ID = 0x6d616b6572  # fuzz_dir's live node "fuzz-maker"


def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def f_int(num, v):  # uint32/uint64/bool
    return varint(num << 3) + varint(v)


def f_sint(num, v):  # sint32/sint64 (zigzag)
    return varint(num << 3) + varint((v << 1) ^ (v >> 63))


def f_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return varint(num << 3 | 2) + varint(len(b)) + b


def frame(mtype, req, msg, payload=b""):
    hdr = struct.pack("<IHHIIQQ", 0x4C504F48, 1, mtype, 0, len(msg), req, len(payload))
    return hdr + msg + payload


def hello(role, name=b"", version=4, flags=0, pad=True):
    if isinstance(name, str):
        name = name.encode()
    field = name + (b"\0" * (64 - len(name)) if pad else b"")
    return b"HPLA" + bytes([version, role, flags, 0]) + bytes(range(32)) + field[:64]


def held(oid, size, origin=True, complete=True):
    return f_bytes(1, oid) + f_int(2, size) + f_int(3, int(complete)) + f_int(71, int(origin))


def register(node_id, name, held_objs=()):
    m = f_int(1, node_id) + f_bytes(2, "fuzz") + f_int(3, 9) + f_bytes(5, name)
    for h in held_objs:
        m += f_bytes(6, h)
    return m + f_int(7, 0x5EED)


def idreq(oid):
    return f_bytes(1, oid) + f_sint(2, 100)


def inline(oid, size, node=0):
    return f_bytes(1, oid) + f_int(2, size) + (f_int(3, node) if node else b"")


def loc_add(oid, size):
    return f_bytes(1, oid) + f_int(2, size) + f_int(3, 1) + f_int(4, 1)


def dir_seeds():
    n1 = 0x6E31
    s = {}
    # a node: its registration names another node (bound to the proven
    # name), it re-reports copies it made (HeldObject.origin), deletes its
    # own (allowed) and the live maker's (HPL_EPERM)
    s["node"] = hello(NODE, "fuzz-n1") + b"".join([
        frame(REGISTER, 1, register(n1, "not-my-name", [held("fz/n1-held", 10)])),
        frame(HELD, 2, f_bytes(1, held("fz/n1-held2", 20)) + f_bytes(1, held("fz/copy", 30, False))
              + f_int(2, 1)),
        frame(LOC_ADD, 3, loc_add("fz/n1-put", 100)),
        frame(INLINE_PUT, 4, inline("fz/n1-inline", 3), b"abc"),
        frame(DELETE, 5, idreq("fz/n1-put")),
        frame(DELETE, 6, idreq("fuzz/made")),
        frame(DELETE, 7, idreq("fuzz/made-inline")),
        frame(HEARTBEAT, 0, f_int(1, n1)),
        frame(STATUS, 8, f_sint(1, 100)),
        frame(COUNTERS, 9, f_sint(1, 100)),
    ])
    # a second connection under the live maker's name: refused (HPL_EEXIST)
    s["takeover"] = hello(NODE, "fuzz-maker") + frame(REGISTER, 1, register(0x7777, "fuzz-maker")) \
        + frame(DELETE, 2, idreq("fuzz/made"))
    # the maker's reader publishes for its node; for another node, refused
    s["reader"] = hello(READER, "fuzz-maker") + b"".join([
        frame(PUBLISH, 1, inline("fz/pub", 4, MAKER_ID), b"PUB!"),
        frame(PUBLISH, 2, inline("fz/pub2", 4, 0x6E31), b"PUB?"),
        frame(PEEK, 3, f_bytes(1, "fz/pub") + f_sint(2, 10)),
        frame(PEEK, 4, f_bytes(1, "fuzz/made-inline")),
        frame(DELETE, 5, idreq("fz/pub")),  # a reader may not: cut
    ])
    s["reader-other"] = hello(READER, "fuzz-n1") + frame(PUBLISH, 1, inline("fz/pub3", 2, MAKER_ID),
                                                         b"no")
    # an admin deletes anything, sees everything
    s["admin"] = hello(ADMIN) + b"".join([
        frame(STATUS, 1, f_sint(1, 100)),
        frame(COUNTERS, 2, f_sint(1, 100)),
        frame(STAT, 3, idreq("fuzz/made")),
        frame(DELETE, 4, idreq("fuzz/made")),
        frame(DELETE, 5, idreq("fz/pub")),
    ])
    # refused handshakes: DATA at the directory, names where none belong,
    # bad names, no NUL, bytes after the NUL, version 3, unknown flags
    bad = {
        "data": hello(DATA),
        "admin-named": hello(ADMIN, "x"),
        "node-noname": hello(NODE),
        "node-badchar": hello(NODE, "bad name!"),
        "node-nonul": hello(NODE, "a" * 64, pad=False),
        "node-trailing": hello(NODE, b"n1\0junk"),
        "v3": hello(NODE, "fuzz-n1", version=3),
        "flags": hello(READER, "fuzz-maker", flags=0x80),
        "sealed": hello(NODE, "fuzz-n1", flags=1),
    }
    for k, h in bad.items():
        s["refused-" + k] = h + frame(COUNTERS, 1, f_sint(1, 100))
    return s


def refusal_seeds():
    """fuzz_client: a store's HELLO refusing the client (Hello 61/62);
    fuzz_store: the store full for the client (first byte 0x02: its user's
    limit, 0x06: all clients), then a request."""
    c = {}
    for name, st, why in (("eauth", -15, "uid 65534 (pid 7) is not this store's user"),
                          ("eperm", -18, "not a refusal a store sends"),
                          ("positive", 3, "x"),
                          ("toomany-all", -17, "this store has 4096 clients, the most "
                                               "--max-connections allows")):
        c["refused-" + name] = frame(1, 0, f_sint(61, st) + f_bytes(62, why))
    s = {"refused-uid": b"\x02" + frame(COUNTERS, 1, f_sint(1, 100)),
         "refused-all": b"\x06" + frame(COUNTERS, 1, f_sint(1, 100))}
    return c, s


def data_seeds():
    """fuzz_store: sessions to the data port of its store holding a node
    credential: DATA is taken (PULLs after it), the other roles are not."""
    PULL = 60
    pulls = frame(PULL, 1, f_bytes(1, "fz/none") + f_int(3, 0x77)) \
        + frame(PULL, 2, f_bytes(1, "fz/none") + f_int(2, 4096) + f_int(40, 1)) \
        + frame(PULL, 3, f_bytes(1, "fz/stream") + f_int(4, 1) + f_int(5, 2))
    return {"data": hello(DATA) + pulls,
            "data-sealed": hello(DATA, flags=1) + pulls,
            "data-named": hello(DATA, "fuzz-store") + pulls,
            "node": hello(NODE, "fuzz-store") + pulls,
            "reader": hello(READER, "fuzz-store") + pulls,
            "admin": hello(ADMIN) + pulls}


def write(target, name, data):
    with open(os.path.join(TOP, "tests/fuzz/corpus", target, "v4-" + name), "wb") as f:
        f.write(data)


def main():
    client, store = refusal_seeds()
    for name, data in client.items():
        write("fuzz_client", name, data)
    store.update(data_seeds())
    for name, data in store.items():
        write("fuzz_store", name, data)
    seeds = dir_seeds()
    for name, data in seeds.items():
        d = os.path.join(TOP, "tests/fuzz/corpus/fuzz_dir")
        with open(os.path.join(d, "v4-" + name), "wb") as f:
            f.write(data)
        # fuzz_frame: a piece-size byte (0x0f; 0x8f: the acceptor holds a
        # node credential) before the same bytes; the HELLO is parsed as one
        d = os.path.join(TOP, "tests/fuzz/corpus/fuzz_frame")
        for lead in (b"\x0f", b"\x8f"):
            with open(os.path.join(d, "v4-%s-%02x" % (name, lead[0])), "wb") as f:
                f.write(lead + data[:104] + bytes(32) + data[104:] + bytes([0, 4, NODE]))
    print("fuzz-seeds.py: %d seeds for fuzz_dir, %d for fuzz_frame, %d for fuzz_client, %d for "
          "fuzz_store" % (len(seeds), 2 * len(seeds), len(client), len(store)))


if __name__ == "__main__":
    main()
