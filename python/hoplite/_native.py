"""_native.py - what the Client's modules share: the native handle and its
close rules, views over shared memory, ids, timeouts, dtype and op codes,
and the addresses of buffers to put (client.py, creation.py, manyops.py).
"""
import collections
import ctypes
import math
import threading
import weakref

from . import _lib
from .errors import AlreadyExists, ConnectionFailed, InvalidArgument, error_for

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
        # called (under cv) when close is requested: the async requests
        # in flight are completed with an error (aio.py)
        self.on_close = []
        self.aio = None  # the async requests' driver (aio._Driver), made on first use

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
            if not self.closing:
                self.closing = True
                for hook in self.on_close:
                    hook()
            self._maybe_close()

    def _maybe_close(self):
        if self.closing and not self.closed and self.active == 0 and self.carriers == 0:
            self.closed = True
            self.lib.hpl_close(self.h)
            self.cv.notify_all()

    def error(self, rc):
        """The exception for a failed call; must run in the calling thread
        right after the call (hpl_errdetail is per thread)."""
        return error_of(self.lib, rc, self.lib.hpl_errdetail(self.h))


def error_of(lib, rc, detail):
    """The exception for code rc with the library's detail (bytes or None):
    the message is hpl_strerror(rc), then the detail if it says more."""
    detail = (detail or b"").decode("utf-8", "replace")
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
