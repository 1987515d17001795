"""client.py - the Python face of libhoplite: Client, views, creations.

Lifetime rules (see python/README.md, "Views and their lifetime"):
  - get() returns a read-only memoryview straight over the store's shared
    memory. The store keeps the object for us (an hpl_get hold) as long as
    any Python object can still reach that memory: the memoryview object
    itself, any slice or cast of it, any numpy array built on it. When the
    last of them is gone the hold is released (hpl_release).
  - memoryview.release() (or leaving `with client.get(x) as mv:`) makes that
    memoryview unusable at once (ValueError on any access). The hold goes
    when the memoryview object is deleted as well and no derived view or
    array remains; in CPython that is immediate at `del` or rebinding.
  - Client.close() stops new calls at once. The connection is closed (and
    the pool unmapped, hpl_close) once calls in progress on other threads
    have returned and no view remains, so a view never outlives the mapping.
"""
import ctypes
import json
import math
import os
import weakref

from . import _lib
from .errors import InvalidArgument, error_for
from .creation import Creation
from .manyops import _ManyOps
from .aio import _AsyncOps
from ._native import (DEFAULT, Stat, Transfer, _FILL_CHUNK, _GetHold, _INLINE_MAX, _Native,
                      _buffer_address, _encode_prefix, _numpy, _numpy_if_loaded, _parse_objects,
                      _put_error, _take_text, _use, _view, decode_id, encode_id, timeout_ms)

# ------------------------------------------------------------------ client

class Client(_ManyOps, _AsyncOps):
    """A connection to the hoplite store on this node.

    Client(socket=None, timeout=30.0, connect_timeout=10.0)
      socket           the store's Unix socket (default: $HOPLITE_SOCKET)
      timeout          default timeout in seconds of calls that take one and
                       get none (None: no limit). get() waits without limit
                       by default.
      connect_timeout  seconds to wait for the store's greeting

    Thread-safe: one Client may be used by several threads at once; blocking
    calls release the GIL.
    """

    def __init__(self, socket=None, timeout=30.0, connect_timeout=10.0):
        lib = _lib.load()
        path = socket if socket is not None else os.environ.get("HOPLITE_SOCKET")
        if not path:
            raise InvalidArgument("no store socket: pass socket=... or set HOPLITE_SOCKET", -1)
        path = os.fspath(path)
        timeout_ms(timeout)  # validate
        h = _lib.ClientP()
        rc = lib.hpl_connect(os.fsencode(path), timeout_ms(connect_timeout), ctypes.byref(h))
        if rc:
            base = (lib.hpl_strerror(rc) or b"").decode()
            raise error_for(rc, "%s (store socket %s)" % (base, path), "store socket %s" % path)
        self._adopt(lib, h, path, None, timeout)

    def _adopt(self, lib, h, socket, directory, timeout):
        """Take over a connected hpl_client handle."""
        self._n = _Native(lib, h)
        self._lib = lib
        self.socket = socket        # the store's socket; None for an admin client
        self.directory = directory  # the directory's HOST:PORT of an admin client, else None
        self.default_timeout = timeout
        self._fin = weakref.finalize(self, self._n.request_close)
        self._fin.atexit = False

    @classmethod
    def admin(cls, directory=None, secret_path=None, timeout=30.0, connect_timeout=10.0):
        """An admin client (hpl_connect_admin): the directory itself at
        `directory` ("HOST:PORT"; None: $HOPLITE_DIRECTORY), as the admin
        role proven with the cluster secret in `secret_path` (None:
        $HOPLITE_AUTH_FILE). It may delete any object, whichever node made
        it; delete, delete_many, stat, stat_many, list, list_page, status,
        counters, counter and transfers work, every other call raises
        InvalidState. Raises InvalidArgument (no secret, no directory, a
        node's credential), AuthFailed (another cluster's secret),
        Unavailable (a directory run with --encrypt), ConnectionFailed,
        Timeout."""
        lib = _lib.load()
        timeout_ms(timeout)  # validate
        d = os.fspath(directory) if directory is not None else None
        s = os.fspath(secret_path) if secret_path is not None else None
        h = _lib.ClientP()
        rc = lib.hpl_connect_admin(os.fsencode(d) if d else None, os.fsencode(s) if s else None,
                                   timeout_ms(connect_timeout), ctypes.byref(h))
        if rc:  # no handle: the detail is the thread's failed connect's
            detail = (lib.hpl_errdetail(None) or b"").decode("utf-8", "replace")
            base = (lib.hpl_strerror(rc) or b"").decode()
            raise error_for(rc, "%s: %s" % (base, detail) if detail else base, detail)
        self = cls.__new__(cls)
        self._adopt(lib, h, None, d or os.environ.get("HOPLITE_DIRECTORY"), timeout)
        return self

    # -------------------------------------------------------------- basics
    def close(self):
        """Stop using the client. New calls raise ConnectionFailed at once;
        the connection is closed when calls in progress in other threads
        have returned and no view of its memory remains."""
        self._n.request_close()

    @property
    def closed(self):
        """True once close() was called."""
        return self._n.closing

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        where = self.socket if self.socket is not None else "admin@%s" % self.directory
        return "<hoplite.Client %s%s>" % (where, " closed" if self.closed else "")

    def _ms(self, timeout):
        return timeout_ms(self.default_timeout if timeout is DEFAULT else timeout)

    def _check(self, rc):
        if rc:
            raise self._n.error(rc)

    def _view_of_buf(self, bufp):
        """Wrap a held hpl_buf (from get/allreduce) into a read-only view.
        Runs inside the call's _use() bracket so close() cannot slip in."""
        lib = self._lib
        hold = _GetHold(self._n, bufp)
        return _view(hold, lib.hpl_buf_data(bufp), lib.hpl_buf_size(bufp), readonly=True)

    # -------------------------------------------------------------- put / create
    def set_lifetime(self, owned=False, ttl=None):
        """The lifetime of the objects this client puts from now on (put,
        create, put_many; the setting when the put or create starts counts).

          owned  True: each object is deleted in the whole cluster when this
                 client's connection to the store closes (close() - which
                 waits for calls in progress and views, see the module's
                 notes - or the process exits or dies).
          ttl    seconds after the seal at which each object is deleted in
                 the whole cluster (None or 0: no TTL). At most 30 days:
                 longer TTLs make every put fail with InvalidArgument.

        The store that sealed an object deletes it; views still alive stay
        readable. Calling it again changes the setting for later puts."""
        if ttl is None:
            ms = 0
        elif isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or math.isnan(ttl) \
                or ttl < 0:
            raise InvalidArgument("ttl must be a number of seconds >= 0 or None, not %r"
                                  % (ttl,))
        elif math.isinf(ttl):
            raise InvalidArgument("ttl must be finite (None: no ttl)")
        else:
            ms = int(math.ceil(ttl * 1000.0))
        with _use(self._n) as h:
            self._check(self._lib.hpl_set_lifetime(h, 1 if owned else 0, min(ms, 2 ** 62)))

    def put(self, obj_id, data, timeout=DEFAULT):
        """Store `data` (any object with the buffer protocol: bytes,
        bytearray, memoryview, numpy array, mmap...) as object `obj_id`.
        The bytes are copied once, by the store, straight from `data` into
        its shared memory (which no process but the store can write).
        Raises AlreadyExists if the id is in use, OutOfMemory if the pool is
        full."""
        idb = encode_id(obj_id)
        ms = self._ms(timeout)
        np = _numpy_if_loaded()
        if np is not None and isinstance(data, np.ndarray):
            if not data.flags.c_contiguous:
                self._put_via_create(idb, data, data.nbytes, ms)
                return
            nbytes, addr, keep = data.nbytes, data.__array_interface__["data"][0], data
        else:
            mv = memoryview(data)
            if not mv.c_contiguous:
                self._put_via_create(idb, mv, mv.nbytes, ms)
                return
            nbytes = mv.nbytes
            addr, keep = _buffer_address(mv, data)
        if addr is None and nbytes:
            self._put_via_create(idb, mv, nbytes, ms)
            return
        with _use(self._n) as h:
            rc = self._lib.hpl_put(h, idb, addr, nbytes, ms)
            if rc:
                raise _put_error(self._n.error(rc))
        del keep

    def _put_via_create(self, idb, src, nbytes, ms):
        c = self.create(idb, nbytes, timeout=None if ms < 0 else ms / 1000.0)
        try:
            self._copy_into(c._ptr, nbytes, src, progress=c if nbytes > _INLINE_MAX else None)
        except BaseException:
            c.abort()
            raise
        c.seal(timeout=None if ms < 0 else ms / 1000.0)

    def _copy_into(self, dst, room, src, progress=None):
        """Copy buffer `src` to address `dst` (at most `room` bytes), in
        chunks, with progress notes on `progress` (a Creation) if given."""
        np = _numpy_if_loaded()
        if np is not None and isinstance(src, np.ndarray):
            if src.nbytes > room:
                raise InvalidArgument("%d bytes do not fit in %d" % (src.nbytes, room))
            if not src.flags.c_contiguous:
                dst_arr = np.ndarray(src.shape, src.dtype,
                                     buffer=(ctypes.c_ubyte * src.nbytes).from_address(dst))
                np.copyto(dst_arr, src, casting="no")
                return
            n, addr, keep = src.nbytes, src.__array_interface__["data"][0], src
        else:
            mv = memoryview(src)
            if not mv.c_contiguous:
                np = _numpy()
                self._copy_into(dst, room, np.asarray(mv), progress)
                return
            n = mv.nbytes
            if n > room:
                raise InvalidArgument("%d bytes do not fit in %d" % (n, room))
            addr, keep = _buffer_address(mv, src)
        if addr is None:
            # read-only buffer whose address we cannot take without numpy:
            # one memoryview-to-memoryview copy (holds the GIL)
            dstv = memoryview((ctypes.c_ubyte * n).from_address(dst)).cast("B")
            dstv[:] = mv.cast("B")
            return
        off = 0
        while off < n:
            k = min(_FILL_CHUNK, n - off)
            ctypes.memmove(dst + off, addr + off, k)  # releases the GIL
            off += k
            if progress is not None and off < n:
                progress.progress(off)
        del keep

    def create(self, obj_id, size, timeout=DEFAULT):
        """Reserve room for a new object of `size` bytes; returns a Creation
        to fill (its .view is writable, this process's own memory) and then
        seal()."""
        idb = encode_id(obj_id)
        if size < 0:
            raise InvalidArgument("size must be >= 0")
        out = _lib.BufP()
        with _use(self._n) as h:
            rc = self._lib.hpl_create(h, idb, size, self._ms(timeout), ctypes.byref(out))
            if rc:
                raise _put_error(self._n.error(rc))
            return Creation(self, self._n, obj_id, out)

    # -------------------------------------------------------------- get
    def get(self, obj_id, timeout=None):
        """Wait up to `timeout` seconds (None: no limit) for object `obj_id`
        to exist and arrive on this node; return a read-only memoryview
        straight over the store's shared memory (no copy)."""
        idb = encode_id(obj_id)
        out = _lib.BufP()
        with _use(self._n) as h:
            rc = self._lib.hpl_get(h, idb, timeout_ms(timeout), ctypes.byref(out))
            if rc:
                raise self._n.error(rc)
            return self._view_of_buf(out)

    # -------------------------------------------------------------- metadata
    def contains(self, obj_id, timeout=DEFAULT):
        """True if this node's store holds a complete copy of the object."""
        idb = encode_id(obj_id)
        out = ctypes.c_int()
        with _use(self._n) as h:
            self._check(self._lib.hpl_contains(h, idb, self._ms(timeout), ctypes.byref(out)))
        return bool(out.value)

    def stat(self, obj_id, timeout=DEFAULT):
        """Cluster-wide facts about an object: Stat(size, copies, complete,
        inline). NotFound if it does not exist."""
        idb = encode_id(obj_id)
        size, copies, complete, inl = (ctypes.c_uint64(), ctypes.c_uint32(), ctypes.c_uint32(),
                                       ctypes.c_int())
        with _use(self._n) as h:
            self._check(self._lib.hpl_stat(h, idb, self._ms(timeout), ctypes.byref(size),
                                           ctypes.byref(copies), ctypes.byref(complete),
                                           ctypes.byref(inl)))
        return Stat(size.value, copies.value, complete.value, bool(inl.value))

    def delete(self, obj_id, timeout=DEFAULT):
        """Delete the object in the whole cluster (views still alive stay
        readable). NotFound if it does not exist."""
        idb = encode_id(obj_id)
        with _use(self._n) as h:
            self._check(self._lib.hpl_delete(h, idb, self._ms(timeout)))

    def list_page(self, prefix="", after=None, max=0, timeout=DEFAULT):
        """One page of the listing: objects whose id starts with `prefix`
        and sorts after `after` (None: from the first), at most `max` of
        them (0: the directory's page size, 1000), in id order (ids compare
        as bytes). Returns (list of ObjectInfo, next): pass `next` as
        `after` to get the following page; it is None after the last one.
        Paging this way sees every object that exists throughout exactly
        once."""
        pb = _encode_prefix(prefix)
        ab = None if after is None or after == "" or after == b"" else encode_id(after)
        if isinstance(max, bool) or not isinstance(max, int) or max < 0:
            raise InvalidArgument("max must be an int >= 0, not %r" % (max,))
        out, nxt = ctypes.c_void_p(), ctypes.c_void_p()
        with _use(self._n) as h:
            self._check(self._lib.hpl_list_page(h, pb, ab, max, self._ms(timeout),
                                                ctypes.byref(out), ctypes.byref(nxt)))
        objs = _parse_objects(_take_text(self._lib, out))
        return objs, (decode_id(_take_text(self._lib, nxt)) if nxt.value else None)

    def iter_list(self, prefix="", timeout=DEFAULT):
        """Objects whose id starts with `prefix`, in id order, fetched page
        by page as the iteration goes (memory for one page; `timeout`
        bounds each page)."""
        after = None
        while True:
            objs, after = self.list_page(prefix, after, 0, timeout)
            yield from objs
            if after is None:
                return

    def list(self, prefix="", timeout=DEFAULT):
        """Objects whose id starts with `prefix`: a list of ObjectInfo(id,
        size, copies, complete, inline) in id order, fetched page by page
        (see iter_list; `timeout` bounds each page)."""
        return list(self.iter_list(prefix, timeout))

    def counters(self, timeout=DEFAULT):
        """The local store's counters as a dict name -> int."""
        out = ctypes.c_void_p()
        with _use(self._n) as h:
            self._check(self._lib.hpl_counters(h, self._ms(timeout), ctypes.byref(out)))
        res = {}
        for line in _take_text(self._lib, out).decode().splitlines():
            name, _, value = line.rpartition(" ")
            if name:
                res[name] = int(value)
        return res

    def counter(self, name, timeout=DEFAULT):
        """One counter of the local store (NotFound if there is none)."""
        out = ctypes.c_uint64()
        with _use(self._n) as h:
            self._check(self._lib.hpl_counter(h, name.encode(), self._ms(timeout),
                                              ctypes.byref(out)))
        return out.value

    def transfers(self, since=0, timeout=DEFAULT):
        """The directory's transfer record from sequence `since` on:
        (list of Transfer(seq, t_us, kind, receiver, sender, id), next_since)."""
        out = ctypes.c_void_p()
        nxt = ctypes.c_uint64()
        with _use(self._n) as h:
            self._check(self._lib.hpl_transfers(h, since, self._ms(timeout), ctypes.byref(out),
                                                ctypes.byref(nxt)))
        res = []
        for line in _take_text(self._lib, out).split(b"\n"):
            if line:
                f = line.split(b" ", 5)
                res.append(Transfer(int(f[0]), int(f[1]), f[2].decode(), f[3].decode(),
                                    f[4].decode(), decode_id(f[5])))
        return res, nxt.value

    def status(self, timeout=DEFAULT):
        """The whole cluster as the directory sees it now (what `hoplite
        status --json` prints): a dict with "nodes" (liveness, heartbeat
        age, pool use, objects, bytes moved), "transfers" in flight (id,
        from, to, held, size, rate in bytes/s), "reduces" running and the
        directory's totals; node ids are 16-digit hex strings, object ids
        str as ids are elsewhere (bytes that are not UTF-8 as surrogates).
        See hpl_status in hoplite.h for every field."""
        out = ctypes.c_void_p()
        with _use(self._n) as h:
            self._check(self._lib.hpl_status(h, 1, self._ms(timeout), ctypes.byref(out)))
        return json.loads(_take_text(self._lib, out).decode("utf-8"))

    def held_bytes(self, obj_id, timeout=DEFAULT):
        """How much of the object this node's store holds now: (held, size).
        A copy still arriving counts the bytes arrived so far; (0, 0) if
        there is none here (size 0 also while the size is not known)."""
        idb = encode_id(obj_id)
        held, size = ctypes.c_uint64(), ctypes.c_uint64()
        with _use(self._n) as h:
            self._check(self._lib.hpl_held_bytes(h, idb, self._ms(timeout), ctypes.byref(held),
                                                 ctypes.byref(size)))
        return held.value, size.value


def connect(socket=None, **kw):
    """Client(socket, **kw): connect to the local store ($HOPLITE_SOCKET)."""
    return Client(socket, **kw)


def connect_admin(directory=None, secret_path=None, **kw):
    """Client.admin(directory, secret_path, **kw): the directory itself as
    the admin role ($HOPLITE_DIRECTORY, $HOPLITE_AUTH_FILE); deletes any
    object, stats and lists. timeout= and connect_timeout= are seconds, as
    for Client."""
    return Client.admin(directory, secret_path, **kw)


