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
import collections
import ctypes
import json
import math
import os
import threading
import time
import weakref

from . import _lib
from .errors import AlreadyExists, BatchError, ConnectionFailed, InvalidArgument, error_for

# Sentinel: "use the client's default timeout".
DEFAULT = object()

Stat = collections.namedtuple("Stat", "size copies complete inline")
ObjectInfo = collections.namedtuple("ObjectInfo", "id size copies complete inline")
Transfer = collections.namedtuple("Transfer", "seq t_us kind receiver sender id")

# Writes of a created object are made in chunks of this size, each followed
# by a progress note, so that receivers pulling the object can forward the
# first bytes before the last are written (what hpl_put does in C).
_FILL_CHUNK = 8 << 20
_INLINE_MAX = 64 << 10

_OPS = {"sum": _lib.OP_SUM, "min": _lib.OP_MIN, "max": _lib.OP_MAX, "prod": _lib.OP_PROD,
        "product": _lib.OP_PROD}
# Hoplite's own dtype names (note: "u8" is uint8 here, not numpy's uint64),
# plus numpy's unambiguous long names.
_DTYPE_NAMES = {
    "u8": _lib.DT_U8, "i8": _lib.DT_I8, "i32": _lib.DT_I32, "u32": _lib.DT_U32,
    "i64": _lib.DT_I64, "u64": _lib.DT_U64, "f32": _lib.DT_F32, "f64": _lib.DT_F64,
    "uint8": _lib.DT_U8, "int8": _lib.DT_I8, "int32": _lib.DT_I32, "uint32": _lib.DT_U32,
    "int64": _lib.DT_I64, "uint64": _lib.DT_U64, "float32": _lib.DT_F32,
    "float64": _lib.DT_F64,
}
# (numpy kind, itemsize) -> hoplite dtype
_NP_KIND = {("u", 1): _lib.DT_U8, ("i", 1): _lib.DT_I8, ("i", 4): _lib.DT_I32,
            ("u", 4): _lib.DT_U32, ("i", 8): _lib.DT_I64, ("u", 8): _lib.DT_U64,
            ("f", 4): _lib.DT_F32, ("f", 8): _lib.DT_F64}
HPL_TO_NUMPY = {_lib.DT_U8: "uint8", _lib.DT_I8: "int8", _lib.DT_I32: "int32",
                _lib.DT_U32: "uint32", _lib.DT_I64: "int64", _lib.DT_U64: "uint64",
                _lib.DT_F32: "float32", _lib.DT_F64: "float64"}


# ------------------------------------------------------------------ helpers

def encode_id(obj_id):
    """Object id (str or bytes) -> bytes, validated like the C library:
    1..255 bytes, no control characters (0x00-0x1f, 0x7f)."""
    if isinstance(obj_id, str):
        b = obj_id.encode("utf-8", "surrogateescape")
    elif isinstance(obj_id, (bytes, bytearray, memoryview)):
        b = bytes(obj_id)
    else:
        raise InvalidArgument("object id must be str or bytes, not %s" % type(obj_id).__name__)
    if not 1 <= len(b) <= _lib.HPL_ID_MAX:
        raise InvalidArgument("invalid object id %r: must be 1..%d bytes long, is %d"
                              % (obj_id, _lib.HPL_ID_MAX, len(b)))
    for ch in b:
        if ch < 0x20 or ch == 0x7F:
            raise InvalidArgument("invalid object id %r: control character 0x%02x"
                                  % (obj_id, ch))
    return b


def decode_id(b):
    return b.decode("utf-8", "surrogateescape")


def timeout_ms(timeout):
    """Seconds (None: no limit) -> the library's milliseconds (-1: no limit)."""
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidArgument("timeout must be a number of seconds or None, not %r" % (timeout,))
    if timeout < 0 or math.isnan(timeout):
        raise InvalidArgument("timeout must be >= 0 seconds or None (no limit), not %r"
                              % (timeout,))
    if math.isinf(timeout):
        return -1
    return min(int(math.ceil(timeout * 1000.0)), 2 ** 62)


def op_code(op):
    """'sum' | 'min' | 'max' | 'prod' (or the HPL_OP_* integer) -> int."""
    if isinstance(op, int) and not isinstance(op, bool) and op in _OPS.values():
        return op
    if isinstance(op, str) and op.lower() in _OPS:
        return _OPS[op.lower()]
    raise InvalidArgument("unknown reduce op %r (use sum, min, max or prod)" % (op,))


def dtype_code(dtype):
    """Hoplite dtype for a name ('f32', 'u8', ..., 'float32', ...), a numpy
    dtype or scalar type (native byte order), or an HPL_DT_* integer.

    Strings are hoplite names first: 'u8' means uint8 (numpy's 'u8' is
    uint64; pass numpy.uint64 or 'u64' for that)."""
    if isinstance(dtype, int) and not isinstance(dtype, bool) and dtype in HPL_TO_NUMPY:
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPE_NAMES:
        return _DTYPE_NAMES[dtype.lower()]
    try:
        import numpy as np
        dt = np.dtype(dtype)
    except Exception:
        raise InvalidArgument("unknown reduce dtype %r (use u8 i8 i32 u32 i64 u64 f32 f64)"
                              % (dtype,)) from None
    code = _NP_KIND.get((dt.kind, dt.itemsize))
    if code is None or not dt.isnative:
        raise InvalidArgument("dtype %s cannot be reduced (use native u8 i8 i32 u32 i64 u64 "
                              "f32 f64)" % dt)
    return code


def _take_text(lib, ptr):
    """Copy a NUL-terminated string the library allocated, then hpl_free it."""
    try:
        return ctypes.string_at(ptr.value) if ptr.value else b""
    finally:
        if ptr.value:
            lib.hpl_free(ptr)


# ------------------------------------------------------------------ native handle

class _Native:
    """The hpl_client handle and the bookkeeping that decides when it may be
    closed: `active` calls in progress and `carriers` live memory carriers
    (views of got or created buffers). Shared by the Client and every view,
    so that views keep the mapping alive after the Client is gone."""

    def __init__(self, lib, handle):
        self.lib = lib
        self.h = handle
        # RLock: a finalizer may run (and drop a carrier) in a thread that
        # already holds the lock.
        self.cv = threading.Condition(threading.RLock())
        self.active = 0
        self.carriers = 0
        self.closing = False
        self.closed = False

    def enter(self):
        with self.cv:
            if self.closing:
                raise ConnectionFailed("the hoplite client is closed", -7)
            self.active += 1
            return self.h

    def leave(self):
        with self.cv:
            self.active -= 1
            self._maybe_close()

    def carrier_added(self):
        with self.cv:
            self.carriers += 1

    def carrier_gone(self):
        with self.cv:
            self.carriers -= 1
            self._maybe_close()

    def request_close(self):
        with self.cv:
            self.closing = True
            self._maybe_close()

    def _maybe_close(self):
        if self.closing and not self.closed and self.active == 0 and self.carriers == 0:
            self.closed = True
            self.lib.hpl_close(self.h)
            self.cv.notify_all()

    def error(self, rc):
        """The exception for a failed call; must run in the calling thread
        right after the call (hpl_errdetail is per thread)."""
        lib = self.lib
        detail = (lib.hpl_errdetail(self.h) or b"").decode("utf-8", "replace")
        base = (lib.hpl_strerror(rc) or b"").decode("utf-8", "replace")
        msg = base if not detail or detail == base else "%s: %s" % (base, detail)
        return error_for(rc, msg, detail)


class _use:
    """`with _use(native) as h:` brackets one library call."""
    __slots__ = ("n",)

    def __init__(self, native):
        self.n = native

    def __enter__(self):
        return self.n.enter()

    def __exit__(self, *exc):
        self.n.leave()
        return False


class _GetHold:
    """Owns one hpl_buf from hpl_get/hpl_allreduce. Referenced by the ctypes
    array the views are built on and (through a finalizer) by the memoryview
    object handed out; released when the last reference goes."""
    __slots__ = ("n", "b", "__weakref__")

    def __init__(self, native, bufp):
        self.n = native
        self.b = bufp
        native.carrier_added()

    def __del__(self):
        try:
            n, self.n = self.n, None
            if n is not None:
                n.lib.hpl_release(n.h, self.b)
                n.carrier_gone()
        except Exception:  # interpreter shutdown: the process is going away
            pass


def _keep(_obj):
    """Finalizer body: does nothing; its argument stays alive until it runs."""


def _view(hold, ptr, size, readonly):
    """A memoryview of `size` bytes at `ptr` whose lifetime keeps `hold`."""
    arr = (ctypes.c_ubyte * size).from_address(ptr or 0)
    arr._hoplite_hold = hold          # every view derived from the buffer
    mv = memoryview(arr).cast("B")
    if readonly:
        mv = mv.toreadonly()
    f = weakref.finalize(mv, _keep, hold)  # numpy.frombuffer keeps only mv
    f.atexit = False
    return mv


# ------------------------------------------------------------------ creation

class Creation:
    """An object being created (Client.create): write into .view (a
    writable memoryview over memory of this process's own, which the store
    copies into its pool as progress() and seal() say the bytes are final),
    then seal() it, or abort(). After seal() that memory is gone: a write
    through an address kept from .view or .address faults.

    As a context manager it seals on normal exit and aborts on an exception.
    seal()/abort() release .view first (BufferError if an export of it, e.g.
    numpy.asarray(view), is still alive: delete those first). Arrays made
    with numpy.frombuffer(view) are not seen by that check; they must not
    be written after seal()."""

    def __init__(self, client, native, obj_id, bufp):
        self._client = client
        self._n = native
        self._b = bufp
        self.id = obj_id
        self.size = native.lib.hpl_buf_size(bufp)
        self._ptr = native.lib.hpl_buf_data(bufp) or 0
        native.carrier_added()  # the open hpl_buf itself
        self._carrier = _CreateCarrier(native)
        self.view = _view(self._carrier, self._ptr, self.size, readonly=False)
        self._done = False

    @property
    def address(self):
        """Address of the writable region (for ctypes.memmove and the like)."""
        self._check_open()
        return self._ptr

    def _check_open(self):
        if self._done:
            raise InvalidArgument("object %r was already sealed or aborted" % (self.id,))

    def write(self, src, offset=0):
        """Copy a buffer into the region at `offset` (one copy, GIL released
        for contiguous sources)."""
        self._check_open()
        if not 0 <= offset <= self.size:
            raise InvalidArgument("offset %d outside the object's %d bytes" % (offset, self.size))
        self._client._copy_into(self._ptr + offset, self.size - offset, src)

    def progress(self, nbytes):
        """Tell the store the first `nbytes` bytes are final (optional)."""
        self._check_open()
        with _use(self._n) as h:
            rc = self._n.lib.hpl_buf_progress(h, self._b, nbytes)
            if rc:
                raise self._n.error(rc)

    def _finish(self):
        self._check_open()
        self.view.release()  # BufferError while exported: nothing done yet
        self.view = None
        self._done = True

    def seal(self, timeout=DEFAULT):
        """Make the object immutable and visible in the whole cluster."""
        self._finish()
        ms = timeout_ms(self._client.default_timeout if timeout is DEFAULT else timeout)
        try:
            with _use(self._n) as h:
                rc = self._n.lib.hpl_seal(h, self._b, ms)
                if rc:
                    raise self._n.error(rc)
        finally:
            self._n.carrier_gone()  # hpl_seal took the buffer either way

    def abort(self):
        """Discard the object (waits until the cluster forgot it)."""
        if self._done:
            return
        self._finish()
        try:
            self._n.lib.hpl_abort(self._n.h, self._b)  # allowed while closing
        finally:
            self._n.carrier_gone()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._done:
            return False
        if exc_type is None:
            self.seal()
        else:
            try:
                self.abort()
            except BufferError:
                pass
        return False

    def __del__(self):
        try:
            if not self._done:
                self._done = True
                self._n.lib.hpl_abort(self._n.h, self._b)
                self._n.carrier_gone()
        except Exception:
            pass


class _CreateCarrier:
    """Keeps the mapping alive while a view of a created region exists."""
    __slots__ = ("n", "__weakref__")

    def __init__(self, native):
        self.n = native
        native.carrier_added()

    def __del__(self):
        try:
            self.n.carrier_gone()
        except Exception:
            pass


# ------------------------------------------------------------------ client

class Client:
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

    # -------------------------------------------------------------- many at once
    # Each call sends all its requests before it waits for any answer (one
    # round trip for the lot), at most _lib.BATCH_MAX per call into the
    # library: longer batches go in several calls within one timeout. A
    # request that fails does not stop the others. Without
    # return_exceptions a failure raises BatchError after all requests are
    # done; with return_exceptions=True the exception takes the failed
    # request's place in the returned list instead.

    def _many(self, ids, ms, run, return_exceptions, wrap=None):
        """Drive run(h, lo, hi, ms_left, rcs) -> (rc, results of lo..hi)
        over slices of at most BATCH_MAX requests. Returns the per-request
        results, failures replaced by their exceptions (passed through
        `wrap` if given), or raises BatchError."""
        deadline = None if ms < 0 else time.monotonic() + ms / 1000.0
        results, errors, first = [], {}, None
        for lo in range(0, len(ids), _lib.BATCH_MAX):
            hi = min(lo + _lib.BATCH_MAX, len(ids))
            left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            rcs = (ctypes.c_int * (hi - lo))()
            with _use(self._n) as h:
                rc, vals = run(h, lo, hi, left, rcs)
                head = self._n.error(rc) if rc else None  # the library's detail: this slice's first failure
            if rc and not any(rcs):
                raise head  # the call itself was refused
            for k, r in enumerate(rcs):
                if not r:
                    results.append(vals[k])
                    continue
                if head is not None:
                    e, head = head, None
                else:
                    e = error_for(r, "%s (object %r)" % (
                        (self._lib.hpl_strerror(r) or b"").decode(), ids[lo + k]))
                e = wrap(e) if wrap else e
                results.append(e)
                errors[ids[lo + k]] = e
                if first is None:
                    first = e
        if errors and not return_exceptions:
            raise BatchError("%d of %d requests failed; the first: %s"
                             % (len(errors), len(ids), first), results, errors, first)
        return results

    @staticmethod
    def _ids(ids):
        if isinstance(ids, (str, bytes)):
            raise InvalidArgument("ids must be a list of ids, not a single id")
        ids = list(ids)
        return ids, [encode_id(i) for i in ids]

    def put_many(self, items, timeout=DEFAULT, return_exceptions=False):
        """Put many objects at once: `items` is a dict {id: data} or an
        iterable of (id, data) pairs (data: any buffer, as for put()).
        Small objects (at most the inline limit) are one request each.
        Returns a list with None per object (or its exception, see above)."""
        pairs = list(items.items()) if isinstance(items, dict) else [tuple(p) for p in items]
        ids, idbs = self._ids(p[0] for p in pairs)
        srcs = [_put_source(p[1]) for p in pairs]  # (nbytes, address, keep-alive)

        def put(h, lo, hi, ms, rcs):
            n = hi - lo
            rc = self._lib.hpl_put_many(
                h, (ctypes.c_char_p * n)(*idbs[lo:hi]),
                (ctypes.c_void_p * n)(*[s[1] for s in srcs[lo:hi]]),
                (ctypes.c_uint64 * n)(*[s[0] for s in srcs[lo:hi]]), n, ms, rcs)
            return rc, [None] * n

        res = self._many(ids, self._ms(timeout), put, return_exceptions, _put_error)
        del srcs
        return res

    def get_many(self, ids, timeout=None, return_exceptions=False):
        """Get many objects at once (as get(), waiting up to `timeout`
        seconds in all): a list of read-only memoryviews in the order of
        `ids` (or exceptions, see above)."""
        ids, idbs = self._ids(ids)

        def get(h, lo, hi, ms, rcs):
            n = hi - lo
            bufs = (_lib.BufP * n)()
            rc = self._lib.hpl_get_many(h, (ctypes.c_char_p * n)(*idbs[lo:hi]), n, ms, bufs, rcs)
            # inside the call's bracket: close() cannot slip in before the views hold
            return rc, [None if rcs[k] else self._view_of_buf(bufs[k]) for k in range(n)]

        return self._many(ids, timeout_ms(timeout), get, return_exceptions)

    def stat_many(self, ids, timeout=DEFAULT, return_exceptions=False):
        """Sizes of many objects at once (the cluster's, as stat().size): a
        list of ints in the order of `ids` (or exceptions: NotFound for an
        id that does not exist)."""
        ids, idbs = self._ids(ids)

        def stat(h, lo, hi, ms, rcs):
            n = hi - lo
            sizes = (ctypes.c_uint64 * n)()
            rc = self._lib.hpl_stat_many(h, (ctypes.c_char_p * n)(*idbs[lo:hi]), n, ms, sizes,
                                         rcs)
            return rc, list(sizes)

        return self._many(ids, self._ms(timeout), stat, return_exceptions)

    def delete_many(self, ids, timeout=DEFAULT, return_exceptions=False):
        """Delete many objects at once: a list with None per id (or its
        exception: NotFound for an id that does not exist)."""
        ids, idbs = self._ids(ids)

        def delete(h, lo, hi, ms, rcs):
            n = hi - lo
            rc = self._lib.hpl_delete_many(h, (ctypes.c_char_p * n)(*idbs[lo:hi]), n, ms, rcs)
            return rc, [None] * n

        return self._many(ids, self._ms(timeout), delete, return_exceptions)

    # -------------------------------------------------------------- collectives
    @staticmethod
    def _sources(sources):
        if isinstance(sources, (str, bytes)):
            raise InvalidArgument("sources must be a list of ids, not a single id")
        ids = [encode_id(s) for s in sources]
        if not ids:
            raise InvalidArgument("no sources")
        return (ctypes.c_char_p * len(ids))(*ids), len(ids)

    def _reduce_args(self, target, sources, num_objects, op, dtype):
        """The encoded arguments every reduce call shares: (target, sources
        array, their number, op code, dtype code)."""
        tb = encode_id(target)
        arr, n = self._sources(sources)
        if num_objects < 0 or num_objects > n:
            raise InvalidArgument("num_objects must be 0..%d, not %d" % (n, num_objects))
        return tb, arr, n, op_code(op), dtype_code(dtype)

    def reduce(self, target, sources, *, dtype, op="sum", num_objects=0, timeout=DEFAULT):
        """Start a reduce: object `target` becomes, on this node, the
        element-wise `op` (sum, min, max, prod) over the first `num_objects`
        of `sources` to become ready (0: all), read as `dtype` (u8 i8 i32 u32
        i64 u64 f32 f64, or the numpy dtype). Returns once the directory
        accepted it; get(target) waits for the result, reduce_sources(target)
        tells which sources were included."""
        tb, arr, n, opc, dtc = self._reduce_args(target, sources, num_objects, op, dtype)
        with _use(self._n) as h:
            self._check(self._lib.hpl_reduce(h, tb, arr, n, num_objects, opc, dtc,
                                             self._ms(timeout)))

    def reduce_range(self, target, sources, *, offset, length, dtype, op="sum", num_objects=0,
                     timeout=DEFAULT):
        """A reduce over bytes [offset, offset + length) of each source:
        `target` gets `length` bytes (length 0: up to the sources' end).
        Otherwise as reduce(). offset and length must be multiples of the
        dtype's size (InvalidArgument); a range beyond the sources fails the
        call if their size is known already, else get(target)."""
        tb, arr, n, opc, dtc = self._reduce_args(target, sources, num_objects, op, dtype)
        if offset < 0 or length < 0:
            raise InvalidArgument("offset and length must not be negative")
        with _use(self._n) as h:
            self._check(self._lib.hpl_reduce_range(h, tb, arr, n, num_objects, opc, dtc, offset,
                                                   length, self._ms(timeout)))

    def reduce_sources(self, target, timeout=None):
        """Wait for the reduce into `target` and return the ids of the
        sources it included, in arrival order."""
        tb = encode_id(target)
        out = ctypes.c_void_p()
        with _use(self._n) as h:
            self._check(self._lib.hpl_reduce_sources(h, tb, timeout_ms(timeout),
                                                     ctypes.byref(out)))
        return [decode_id(s) for s in _take_text(self._lib, out).split(b"\n") if s]

    def allreduce(self, target, sources, *, dtype, op="sum", num_objects=0, timeout=None):
        """Start (or join) the reduce into `target` and return its result as
        a read-only memoryview, like get(). Every participant may call it
        with the same arguments."""
        tb, arr, n, opc, dtc = self._reduce_args(target, sources, num_objects, op, dtype)
        out = _lib.BufP()
        with _use(self._n) as h:
            rc = self._lib.hpl_allreduce(h, tb, arr, n, num_objects, opc, dtc,
                                         timeout_ms(timeout), ctypes.byref(out))
            if rc:
                raise self._n.error(rc)
            return self._view_of_buf(out)

    # -------------------------------------------------------------- numpy helpers
    def put_array(self, obj_id, array, timeout=DEFAULT):
        """Store a numpy array with a header recording dtype and shape (see
        hoplite.arrays); one copy, straight into shared memory."""
        from . import arrays
        arrays.put_array(self, obj_id, array, timeout)

    def get_array(self, obj_id, timeout=None, dtype=None, shape=None):
        """Get an array stored by put_array() as a read-only numpy array over
        shared memory (no copy). With `dtype` (and optionally `shape`) the
        object is read as raw elements instead (e.g. a reduce result or a
        put() of raw bytes)."""
        from . import arrays
        return arrays.view_array(self.get(obj_id, timeout), dtype, shape)

    def allreduce_array(self, target, sources, *, dtype, op="sum", num_objects=0,
                        timeout=None, shape=None):
        """allreduce() returning a read-only numpy array of `dtype`."""
        from . import arrays
        mv = self.allreduce(target, sources, dtype=dtype, op=op, num_objects=num_objects,
                            timeout=timeout)
        return arrays.view_array(mv, HPL_TO_NUMPY[dtype_code(dtype)], shape)


def _encode_prefix(prefix):
    """A listing prefix (str or bytes, "" for all) -> bytes."""
    if isinstance(prefix, str):
        return prefix.encode("utf-8", "surrogateescape")
    return bytes(prefix)


def _parse_objects(text):
    """hpl_list text ("ID\tSIZE\tCOPIES\tCOMPLETE\tINLINE\n" lines) -> [ObjectInfo]."""
    res = []
    for line in text.split(b"\n"):
        if line:
            f = line.split(b"\t")
            res.append(ObjectInfo(decode_id(f[0]), int(f[1]), int(f[2]), int(f[3]), f[4] == b"1"))
    return res


def _put_source(data):
    """(nbytes, address, object to keep alive) of a buffer to put; a buffer
    whose address cannot be had in place (non-contiguous, read-only without
    numpy) is copied once into bytes first."""
    np = _numpy_if_loaded()
    if np is not None and isinstance(data, np.ndarray):
        if not data.flags.c_contiguous:
            data = np.ascontiguousarray(data)
        return data.nbytes, data.__array_interface__["data"][0] or None, data
    mv = memoryview(data)
    if mv.c_contiguous:
        addr, keep = _buffer_address(mv, data)
        if addr is not None:
            return mv.nbytes, addr or None, keep
    b = mv.tobytes()
    addr, keep = _buffer_address(memoryview(b), b)
    return len(b), addr or None, keep


def _put_error(err):
    """A put/create of an id that exists elsewhere in the cluster with a
    different size fails in the directory with HPL_EMISMATCH ("object 'x'
    exists with size A, not B") although hoplite.h documents HPL_EEXIST for
    an id in use. Report it as AlreadyExists (its .code stays -11)."""
    if err.code == -11 and "exists" in err.detail:
        e = AlreadyExists(str(err), err.code, err.detail)
        e.name = err.name
        return e
    return err


def connect(socket=None, **kw):
    """Client(socket, **kw): connect to the local store ($HOPLITE_SOCKET)."""
    return Client(socket, **kw)


def connect_admin(directory=None, secret_path=None, **kw):
    """Client.admin(directory, secret_path, **kw): the directory itself as
    the admin role ($HOPLITE_DIRECTORY, $HOPLITE_AUTH_FILE); deletes any
    object, stats and lists. timeout= and connect_timeout= are seconds, as
    for Client."""
    return Client.admin(directory, secret_path, **kw)


# ------------------------------------------------------------------ buffers

def _numpy_if_loaded():
    import sys
    return sys.modules.get("numpy")


def _numpy():
    try:
        import numpy
    except ImportError:
        raise InvalidArgument("this buffer is not contiguous; copying it needs numpy") from None
    return numpy


def _buffer_address(mv, obj):
    """(address of a C-contiguous buffer's first byte, object to keep alive
    while the address is used), or (None, None) if it cannot be had without
    a copy. Never copies."""
    n = mv.nbytes
    if n == 0:
        return 0, None
    flat = mv.cast("B") if (mv.ndim != 1 or mv.format not in ("B", "b", "c")) else mv
    if not flat.readonly:
        c = (ctypes.c_char * n).from_buffer(flat)
        return ctypes.addressof(c), c
    if type(obj) is bytes:
        p = ctypes.c_char_p(obj)  # points at the bytes object's own storage
        return ctypes.cast(p, ctypes.c_void_p).value, (obj, p)
    np = _numpy_if_loaded()
    if np is None:
        try:
            import numpy as np
        except ImportError:
            return None, None
    a = np.frombuffer(flat, dtype=np.uint8)
    return a.__array_interface__["data"][0], (a, flat)
