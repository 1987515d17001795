"""hoplite.dask.conn - this process's hoplite clients for Dask (the one
tasks and the deserializer use, the owned-lifetime one scatter puts
through), ArrayRef and the lower-level put/get/delete/hoplite_task.
"""
import logging
import os
import threading
import uuid

import numpy as np

from ..arrays import view_array
from ..client import Client

try:
    import distributed
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
except ImportError:  # hoplite.dask without Dask: put/get/ArrayRef still work
    distributed = None
    _PluginBase = object

logger = logging.getLogger("hoplite.dask")

#: results of at least this many bytes are put into hoplite by hoplite_task;
#: arrays of at least this many bytes go through hoplite in scatter
DEFAULT_MIN_BYTES = 1 << 20

_lock = threading.Lock()
_client = None
_client_pid = None
_scatter_cl = None          # owned-lifetime client for scatter's objects
_scatter_cl_key = None      # (pid, socket) it was made for


class NotConnected(RuntimeError):
    """A process that needs hoplite (a worker receiving a scattered array,
    the driver putting one) has no store to talk to."""


def _timeout_default():
    return float(os.environ.get("HOPLITE_TIMEOUT", "60"))


def client():
    """This process's hoplite Client (one per process, created on first use,
    connected to $HOPLITE_SOCKET unless use() or the worker plugin chose a
    socket; recreated after a fork)."""
    global _client, _client_pid
    c = _client
    if c is not None and _client_pid == os.getpid():
        return c
    with _lock:
        if _client is None or _client_pid != os.getpid():
            _client = Client(timeout=_timeout_default())
            _client_pid = os.getpid()
        return _client


def use(socket, timeout=None):
    """Connect this process's client (the one client() returns) to the store
    at `socket`, replacing (and closing) the one it had. Returns it."""
    global _client, _client_pid
    c = Client(socket, timeout=_timeout_default() if timeout is None else timeout)
    with _lock:
        old, _client, _client_pid = (_client if _client_pid == os.getpid() else None), c, \
            os.getpid()
    if old is not None and old is not c:
        old.close()
    return c


def _forget(c):
    """Stop using c as this process's client (plugin teardown)."""
    global _client, _client_pid, _scatter_cl, _scatter_cl_key
    with _lock:
        if _client is c:
            _client, _client_pid = None, None
        sc, _scatter_cl, _scatter_cl_key = _scatter_cl, None, None
    c.close()
    if sc is not None:
        sc.close()


def _connected_socket():
    """The socket this process's client uses, or would use, or None."""
    c = _client
    if c is not None and _client_pid == os.getpid() and not c.closed:
        return c.socket
    return os.environ.get("HOPLITE_SOCKET") or None


class ArrayRef:
    """A small, picklable reference to an array held in hoplite."""
    __slots__ = ("id", "dtype", "shape")

    def __init__(self, obj_id, dtype, shape):
        self.id = obj_id
        self.dtype = np.dtype(dtype).str
        self.shape = tuple(shape)

    @property
    def nbytes(self):
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def get(self, timeout=None):
        """The array, read-only, zero-copy (waits for it up to timeout s)."""
        return _array_of(client().get(self.id, timeout=timeout), self)

    def delete(self):
        client().delete(self.id)

    def __getstate__(self):
        return (self.id, self.dtype, self.shape)

    def __setstate__(self, state):
        self.id, self.dtype, self.shape = state

    def __repr__(self):
        return "ArrayRef(%r, %s, %s)" % (self.id, self.dtype, self.shape)

    def __eq__(self, other):
        return isinstance(other, ArrayRef) and self.__getstate__() == other.__getstate__()

    def __hash__(self):
        return hash(self.__getstate__())


def _array_of(mv, ref):
    """The array in view `mv` of ref's object, read-only, zero-copy. The
    object holds either the raw elements (scatter puts those: the object is
    exactly ref.nbytes long) or an array with its header (put(), which is
    at least 64 bytes longer); either is checked against the ref."""
    if len(mv) == ref.nbytes:
        return view_array(mv, ref.dtype, ref.shape)
    a = view_array(mv)
    if a.dtype.str != ref.dtype or a.shape != ref.shape:
        raise ValueError("hoplite object %r holds %s%s, the ref says %s%s"
                         % (ref.id, a.dtype.str, a.shape, ref.dtype, ref.shape))
    return a


def put(array, obj_id=None):
    """Put a numpy array into the local store; return its ArrayRef."""
    a = np.asarray(array)
    obj_id = obj_id or "dask/" + uuid.uuid4().hex
    client().put_array(obj_id, a)
    return ArrayRef(obj_id, a.dtype, a.shape)


def get(ref, timeout=None):
    """ref.get(timeout)."""
    return ref.get(timeout)


def delete(refs):
    """Delete the objects of one ArrayRef or of an iterable of them."""
    if isinstance(refs, ArrayRef):
        refs = [refs]
    for r in refs:
        r.delete()


def _resolve(x):
    if isinstance(x, ArrayRef):
        return x.get()
    if type(x) in (list, tuple):
        return type(x)(_resolve(v) for v in x)
    if type(x) is dict:
        return {k: _resolve(v) for k, v in x.items()}
    return x


def hoplite_task(fn=None, *, min_bytes=DEFAULT_MIN_BYTES):
    """Decorator for Dask task functions: ArrayRef arguments (also inside
    lists, tuples, dicts) become zero-copy arrays; a numpy result of at
    least `min_bytes` bytes is put into hoplite and an ArrayRef returned
    in its place (smaller results travel through Dask as usual)."""
    def wrap(f):
        def task(*args, **kwargs):
            out = f(*_resolve(args), **_resolve(kwargs))
            if isinstance(out, np.ndarray) and out.nbytes >= min_bytes:
                return put(out)
            return out
        task.__name__ = getattr(f, "__name__", "hoplite_task")
        task.__qualname__ = getattr(f, "__qualname__", task.__name__)
        task.__doc__ = f.__doc__
        task.__wrapped__ = f
        return task
    return wrap(fn) if fn is not None else wrap


def _scatter_client():
    """The per-process client scatter puts through: connected to the same
    store as client(), with owned lifetime, so whatever scatter put is
    deleted when this process exits or dies."""
    global _scatter_cl, _scatter_cl_key
    base = client()
    key = (os.getpid(), base.socket)
    old = None
    with _lock:
        if _scatter_cl is None or _scatter_cl_key != key or _scatter_cl.closed:
            c = Client(base.socket, timeout=base.default_timeout)
            c.set_lifetime(owned=True)
            if _scatter_cl_key is not None and _scatter_cl_key[0] == os.getpid():
                old = _scatter_cl  # (one inherited through fork is the parent's)
            _scatter_cl, _scatter_cl_key = c, key
        c = _scatter_cl
    if old is not None:
        old.close()  # use() moved us to another store: its objects (owned) go with it
    return c


