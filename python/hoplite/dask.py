"""hoplite.dask - hand large numpy arrays between Dask tasks through hoplite.

Every Dask worker uses the hoplite store of its own host: set HOPLITE_SOCKET
in the worker's environment (dask-worker inherits it; with a LocalCluster
pass env={"HOPLITE_SOCKET": ...}). A task that produces a large array puts
it into hoplite and returns only an ArrayRef (id, dtype, shape) through
Dask; a task that receives the ref gets the array zero-copy: a read-only
numpy array over the store's shared memory, pulled from whichever store has
a copy (many tasks reading one ref form a pipelined broadcast).

    import hoplite.dask as hd

    ref = hd.put(big_array)                        # on the driver or in a task
    futs = [client.submit(hd.hoplite_task(np.sum), ref, workers=[w]) for w in ws]

    @hd.hoplite_task                               # ArrayRef args -> arrays,
    def step(a, b):                                # large array result -> ArrayRef
        return a @ b

Objects stay in hoplite until deleted: hd.delete(refs) (or ref.delete()).
Arrays received from refs are read-only; copy them to modify.
"""
import os
import threading
import uuid

import numpy as np

from .client import Client

#: results of at least this many bytes are put into hoplite by hoplite_task
DEFAULT_MIN_BYTES = 1 << 20

_lock = threading.Lock()
_client = None
_client_pid = None


def client():
    """This process's hoplite Client (one per process, created on first use,
    connected to $HOPLITE_SOCKET; recreated after a fork)."""
    global _client, _client_pid
    c = _client
    if c is not None and _client_pid == os.getpid():
        return c
    with _lock:
        if _client is None or _client_pid != os.getpid():
            _client = Client(timeout=float(os.environ.get("HOPLITE_TIMEOUT", "60")))
            _client_pid = os.getpid()
        return _client


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
        a = client().get_array(self.id, timeout=timeout)
        if a.dtype.str != self.dtype or a.shape != self.shape:
            raise ValueError("hoplite object %r holds %s%s, the ref says %s%s"
                             % (self.id, a.dtype.str, a.shape, self.dtype, self.shape))
        return a

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


def worker_sockets(dask_client):
    """{worker address: its HOPLITE_SOCKET} (None where unset), to check a
    deployment before relying on it."""
    return dask_client.run(lambda: os.environ.get("HOPLITE_SOCKET"))
