"""hoplite.dask - hand large numpy arrays to Dask tasks through hoplite.

Drop-in for client.scatter: the one line that changes in user code is

    fut = client.scatter(weights, broadcast=True)        # before: Dask copies it
    fut = hoplite.dask.scatter(client, weights, broadcast=True)   # after: hoplite does

The result is an ordinary distributed.Future (or a list/dict of them, as
client.scatter returns); tasks that take it receive the array itself, so
task functions (`def f(a): return a.sum()`) stay as they are. The array is
put into this host's store once; every chosen worker gets it through its
own store (with broadcast=True every worker at once: a pipelined hoplite
broadcast) in a thread of its own, and is registered with the scheduler as
holding the key, so Dask has nothing to copy. Should Dask move the key
between workers anyway (a worker the scatter did not place it on, the
Active Memory Manager dropping replicas and re-creating them, a gather to
the client), it sends a few hundred bytes naming the hoplite object and the
receiver reads the array from hoplite (see _dumps/_loads below).

Every worker uses the hoplite store of its own host. Connect them with the
worker plugin, once per cluster:

    import hoplite.dask as hd
    hd.register(client)                          # socket from each worker's $HOPLITE_SOCKET
    hd.register(client, socket="/run/hoplite/store.sock")       # the same path everywhere
    hd.register(client, sockets={"host-a": "/a.sock", 0: "/b.sock"})   # per host/name

or start the workers with HOPLITE_SOCKET set (a LocalCluster takes
env={"HOPLITE_SOCKET": ...}); the driver uses $HOPLITE_SOCKET or use(socket).

Arrays tasks receive are read-only (zero-copy views of the store's shared
memory): copy one to modify it. The lower-level API is still here: put()
returns a small picklable ArrayRef, hoplite_task wraps task functions that
take and return refs.

    ref = hd.put(big_array)                        # on the driver or in a task
    futs = [client.submit(hd.hoplite_task(np.sum), ref, workers=[w]) for w in ws]

Objects made by put() stay in hoplite until deleted: hd.delete(refs) (or
ref.delete()). Objects made by scatter() are deleted when the futures it
returned are released (see scatter). A node may delete only what it made
(hoplite.NotAllowed otherwise, while the maker's store is up): a driver
that deletes refs its workers put needs the directory run with
--delete-any.
"""
import asyncio
import logging
import os
import queue
import random
import threading
import uuid
import weakref
from numbers import Number

import numpy as np

from .client import Client
from .errors import InvalidArgument, NotFound

try:
    import distributed
    from distributed.diagnostics.plugin import WorkerPlugin as _PluginBase
    from distributed.protocol import dask_deserialize, dask_serialize
    from distributed.protocol.numpy import deserialize_numpy_ndarray, serialize_numpy_ndarray
except ImportError:  # hoplite.dask without Dask: put/get/ArrayRef still work
    distributed = None
    _PluginBase = object

logger = logging.getLogger("hoplite.dask")

#: results of at least this many bytes are put into hoplite by hoplite_task;
#: arrays of at least this many bytes go through hoplite in scatter
DEFAULT_MIN_BYTES = 1 << 20

#: the plugin's name on the workers (registering again replaces it)
PLUGIN_NAME = "hoplite"

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
    """{worker address: the store socket its hoplite client uses} (None
    where it has none), to check a deployment before relying on it."""
    return dask_client.run(_connected_socket)


# ------------------------------------------------------------------ arrays tasks receive

class HopliteArray(np.ndarray):
    """What a task receives for a scattered array: a read-only numpy array
    over the store's shared memory (an ndarray subclass; numpy treats it as
    any ndarray).

    Results of ufuncs and reductions are plain ndarrays and numpy scalars,
    as for an ndarray; views and copies (a[1:], a.reshape(), a.copy()) stay
    HopliteArrays. `hoplite_ref` is the ArrayRef of the hoplite object on
    the array that came from the store, None on arrays derived from it. Dask
    sends an array with a ref between processes as the ref alone while the
    object exists (see _dumps), anything else as numpy's bytes. Pickling
    gives a plain ndarray."""

    def __array_finalize__(self, obj):
        self._hpl_ref = None

    def __array_wrap__(self, obj, context=None, return_scalar=False):
        # ufunc and reduction results are plain arrays and numpy scalars,
        # as they are for an ndarray (a.sum() is a float64, not a 0-d array)
        if obj.shape == ():
            return obj[()]
        return obj.view(np.ndarray)

    @property
    def hoplite_ref(self):
        return self._hpl_ref

    def __reduce_ex__(self, protocol):
        return self.view(np.ndarray).__reduce_ex__(protocol)


def _wrap(a, ref):
    h = a.view(HopliteArray)
    h._hpl_ref = ref
    return h


def _dumps(x, context=None):
    """Dask serializer of HopliteArray. Sent over a comm (context names a
    recipient) while the sender's store still holds the object: just the
    ref; the receiver reads the bytes from hoplite. Otherwise (spilling to
    disk, a derived array, an object deleted or evicted meanwhile): numpy's
    own serialization of the bytes."""
    ref = getattr(x, "_hpl_ref", None)
    if ref is not None and context and context.get("recipient"):
        try:
            here = client().contains(ref.id, timeout=5.0)
        except Exception:
            here = False
        if here:
            _stats["ref_sends"] += 1
            return {"hoplite": list(ref.__getstate__())}, []
    _stats["byte_sends"] += 1
    header, frames = serialize_numpy_ndarray(x.view(np.ndarray), context=context)
    return {"numpy": header}, frames


def _loads(header, frames):
    """Dask deserializer of HopliteArray: a ref is read from hoplite (from
    this host's store, which pulls it if it has no copy); bytes become a
    plain ndarray."""
    if "hoplite" in header:
        oid, dt, shape = header["hoplite"]
        ref = ArrayRef(oid, dt, shape)
        try:
            c = client()
        except InvalidArgument as e:
            raise NotConnected("received a hoplite-scattered array (%r) but this process has "
                               "no hoplite store: %s" % (oid, e)) from None
        _stats["ref_gets"] += 1
        return _wrap(c.get_array(oid, timeout=c.default_timeout), ref)
    return deserialize_numpy_ndarray(header["numpy"], frames)


#: per-process counts of how HopliteArrays crossed Dask comms (stats())
_stats = {"ref_sends": 0, "byte_sends": 0, "ref_gets": 0}

if distributed is not None:
    dask_serialize.register(HopliteArray)(_dumps)
    dask_deserialize.register(HopliteArray)(_loads)


def stats():
    """This process's counts: ref_sends (arrays Dask sent as a hoplite ref),
    byte_sends (sent as bytes), ref_gets (refs received and read from
    hoplite)."""
    return dict(_stats)


# ------------------------------------------------------------------ worker plugin

class HopliteWorkerPlugin(_PluginBase):
    """A distributed WorkerPlugin that connects each worker to its host's
    store at worker setup and closes the connection at teardown. Tasks and
    hoplite.dask.scatter then use that connection (hoplite.dask.client()).

    The socket of a worker is the first of:
      sockets[worker name], sockets[str(worker name)], sockets[worker
      address], sockets[worker host]   (a dict; keys you did not give are
      skipped)
      socket                            (one path for every worker)
      $HOPLITE_SOCKET in the worker's environment
    A worker with none fails the registration with NotConnected naming it.
    timeout: the client's default timeout in seconds (None: $HOPLITE_TIMEOUT
    or 60)."""

    name = PLUGIN_NAME

    def __init__(self, socket=None, sockets=None, timeout=None):
        self.socket = os.fspath(socket) if socket is not None else None
        self.sockets = dict(sockets or {})
        self.timeout = timeout
        self._client = None

    def socket_for(self, name, address, env):
        """The socket a worker of this name and address uses (None: none)."""
        host = _address_host(address)
        for k in (name, str(name), address, host):
            if k is not None and k in self.sockets:
                return os.fspath(self.sockets[k])
        return self.socket or env.get("HOPLITE_SOCKET") or None

    def __getstate__(self):
        return {"socket": self.socket, "sockets": self.sockets, "timeout": self.timeout}

    def __setstate__(self, state):
        self.__init__(**state)

    async def setup(self, worker):
        sock = self.socket_for(worker.name, worker.address, os.environ)
        if not sock:
            raise NotConnected(
                "hoplite: no store socket for worker %r (%s): pass "
                "HopliteWorkerPlugin(socket=...) or sockets={name, address or host: socket}, "
                "or start the worker with HOPLITE_SOCKET set" % (worker.name, worker.address))
        loop = asyncio.get_running_loop()
        try:
            # connecting waits for the store's greeting: not on the event loop
            self._client = await loop.run_in_executor(None, use, sock, self.timeout)
        except Exception as e:
            raise NotConnected("hoplite: worker %r (%s) cannot connect to its store: %s"
                               % (worker.name, worker.address, e)) from None
        worker.hoplite = self._client

    def teardown(self, worker):
        c, self._client = self._client, None
        if c is not None:
            _forget(c)
        if getattr(worker, "hoplite", None) is c:
            worker.hoplite = None


def _address_host(address):
    try:
        from distributed.comm import get_address_host
        return get_address_host(address)
    except Exception:
        return None


def register(dask_client, socket=None, sockets=None, timeout=None):
    """Register HopliteWorkerPlugin(socket, sockets, timeout) with every
    current and future worker of `dask_client` (Client.register_worker_plugin
    in distributed 2022.12; register_plugin in newer versions). Raises
    NotConnected if a worker has no socket or cannot connect. Returns
    {worker address: socket it connected to}."""
    plugin = HopliteWorkerPlugin(socket, sockets, timeout)
    reg = getattr(dask_client, "register_worker_plugin", None)
    if reg is None:  # distributed >= 2023.9 spells it register_plugin
        dask_client.register_plugin(plugin, name=PLUGIN_NAME)
    else:
        reg(plugin, name=PLUGIN_NAME)
    return worker_sockets(dask_client)


# ------------------------------------------------------------------ scatter

def _eligible(x, min_bytes):
    if type(x) is not np.ndarray or x.nbytes < min_bytes:
        return False
    dt = x.dtype
    return not (dt.hasobject or dt.fields is not None or dt.subdtype is not None
                or dt.itemsize == 0)


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


# Objects to delete once the futures for their key are released: one
# thread deletes them (finalizers must not block).
_owned = {}                 # (dask client id, key) -> [object id]
_owned_lock = threading.Lock()
_deleteq = queue.Queue()
_deleter = None


def _delete_loop():
    while True:
        oid = _deleteq.get()
        try:
            _scatter_client().delete(oid, timeout=30.0)
        except NotFound:
            pass
        except Exception as e:  # the store is gone; owned objects go with us anyway
            logger.warning("hoplite.dask: could not delete %r: %s", oid, e)
        finally:
            _deleteq.task_done()


def _queue_deletes(ids):
    global _deleter
    with _owned_lock:
        if _deleter is None or not _deleter.is_alive():
            _deleter = threading.Thread(target=_delete_loop, name="hoplite-dask-deleter",
                                        daemon=True)
            _deleter.start()
    for oid in ids:
        _deleteq.put(oid)


def _check_released(cref, cid, key):
    """On the Dask client's loop, after the Future's own release ran:
    delete the key's objects if no Future of it is left in that client."""
    c = cref()
    if c is not None and c.refcount.get(key, 0) > 0:
        return
    with _owned_lock:
        ids = _owned.pop((cid, key), [])
    if ids:
        _queue_deletes(ids)


def _future_gone(cref, cid, key):
    # Future.__del__ queued client._dec_ref on the loop just before this
    # finalizer ran; queue the check behind it.
    c = cref()
    try:
        c.loop.add_callback(_check_released, cref, cid, key)
    except Exception:  # no client or loop any more
        _check_released(lambda: None, cid, key)


def wait_deletes(dask_client=None):
    """Block until objects of released scatter futures are deleted (for
    tests and orderly shutdowns)."""
    if dask_client is not None and not dask_client.asynchronous:
        async def _turn():
            pass
        dask_client.sync(_turn)  # runs after callbacks queued before it
    _deleteq.join()


# worker side: arrays read from hoplite, waiting to be handed to Dask
_staged = {}                # token -> {key: HopliteArray}


async def _stage(token, assignments, timeout, dask_worker=None):
    """Runs on each worker (client.run): read this worker's arrays from
    hoplite in a thread, keep them under `token`. Returns {key: nbytes}."""
    mine = assignments.get(dask_worker.address, {})

    def fetch():
        try:
            c = client()
        except InvalidArgument as e:
            raise NotConnected(
                "hoplite.dask.scatter: worker %r (%s) has no hoplite store (%s); register "
                "the plugin (hoplite.dask.register(client, socket=...)) or start the worker "
                "with HOPLITE_SOCKET set" % (dask_worker.name, dask_worker.address, e)) from None
        return {k: _wrap(c.get_array(ref.id, timeout=timeout), ref) for k, ref in mine.items()}

    arrays = await asyncio.get_running_loop().run_in_executor(None, fetch)
    _staged[token] = arrays
    return {k: int(a.nbytes) for k, a in arrays.items()}


def _commit(token, dask_worker=None):
    """Runs on each worker's event loop (client.run): the staged arrays
    become the worker's data for their keys (the scheduler is told next)."""
    arrays = _staged.pop(token)
    dask_worker.update_data(data=arrays, report=False, stimulus_id="hoplite-scatter-" + token)
    return sorted(arrays)


def _discard(token):
    _staged.pop(token, None)


def _split_errors(results, targets):
    errs = {w: r for w, r in results.items() if isinstance(r, BaseException)}
    for w in targets:
        if w not in results:
            errs[w] = RuntimeError("worker %s did not answer" % w)
    return errs


async def _scatter_arrays(dc, arrays, workers, broadcast, timeout):
    """Put each array once, have the chosen workers read it from hoplite and
    hold it as the key's value, tell the scheduler. Returns {key: Future}."""
    nthreads = await dc.scheduler.ncores_running(workers=workers)
    if not nthreads and workers is None:
        await dc._wait_for_workers(1, timeout=timeout)
        nthreads = await dc.scheduler.ncores_running(workers=workers)
    if not nthreads:
        raise ValueError("hoplite.dask.scatter: no running workers%s"
                         % ("" if workers is None else " among %r" % (workers,)))
    addrs = sorted(nthreads)
    slots = [w for w in addrs for _ in range(max(1, nthreads[w]))]
    if broadcast:
        n = len(addrs) if broadcast is True else max(1, min(int(broadcast), len(addrs)))
    loop = asyncio.get_running_loop()
    refs, token, targets, staged = {}, uuid.uuid4().hex, [], False
    try:
        try:
            sc = await loop.run_in_executor(None, _scatter_client)
        except InvalidArgument as e:
            raise NotConnected("hoplite.dask.scatter: this process has no hoplite store (%s); "
                               "set HOPLITE_SOCKET or call hoplite.dask.use(socket)" % e) from None
        for key, x in arrays.items():
            oid = "dask/scatter/" + uuid.uuid4().hex
            await loop.run_in_executor(None, sc.put_array, oid, x)
            refs[key] = ArrayRef(oid, x.dtype, x.shape)
        who_has, assignments = {}, {}
        start = random.randrange(len(slots))
        for i, (key, ref) in enumerate(refs.items()):
            if broadcast:
                j = (start + i) % len(addrs)
                ws = (addrs[j:] + addrs[:j])[:n]
            else:  # round robin over the workers' threads, as client.scatter
                ws = [slots[(start + i) % len(slots)]]
            who_has[key] = ws
            for w in ws:
                assignments.setdefault(w, {})[key] = ref
        targets = sorted(assignments)
        staged = True
        res = await dc._run(_stage, token, assignments, timeout, workers=targets,
                            on_error="return")
        errs = _split_errors(res, targets)
        if errs:
            w, e = sorted(errs.items())[0]
            raise e
        nbytes = {}
        for r in res.values():
            nbytes.update(r)
        res = await dc._run(_commit, token, workers=targets, on_error="return")
        staged = False
        errs = _split_errors(res, targets)
        if errs:  # rare: keep the workers that hold it, fail if a key has none
            who_has = {k: [w for w in ws if w not in errs] for k, ws in who_has.items()}
        await dc.scheduler.update_data(who_has={k: ws for k, ws in who_has.items() if ws},
                                       nbytes=nbytes, client=dc.id)
        lost = [k for k, ws in who_has.items() if not ws]
        if errs and lost:
            raise sorted(errs.items())[0][1]
    except BaseException:
        if staged:
            try:
                await dc._run(_discard, token, workers=targets, on_error="ignore")
            except Exception:
                pass
        _queue_deletes(r.id for r in refs.values())
        raise
    futs = {}
    cref = weakref.ref(dc)
    for key in refs:
        f = distributed.Future(key, dc, inform=False)
        dc.futures[key].finish(type=np.ndarray)
        with _owned_lock:
            _owned.setdefault((dc.id, key), []).append(refs[key].id)
        weakref.finalize(f, _future_gone, cref, dc.id, key)
        futs[key] = f
    return futs


async def _scatter(dc, data, workers, broadcast, direct, hash, timeout, min_bytes):
    if timeout is None or timeout is _no_default():
        timeout = dc._timeout
    if isinstance(workers, (str, Number)):
        workers = [workers]
    if isinstance(data, dict) and not all(isinstance(k, (bytes, str)) for k in data):
        from dask.utils import stringify
        d = await _scatter(dc, {stringify(k): v for k, v in data.items()}, workers, broadcast,
                           direct, hash, timeout, min_bytes)
        return {k: d[stringify(k)] for k in data}
    if isinstance(data, range):
        data = list(data)
    input_type = type(data)
    names, unpack = None, False
    if isinstance(data, (set, frozenset)) or (
            not isinstance(data, (dict, list, tuple)) and hasattr(data, "__next__")):
        data = list(data)
    if not isinstance(data, (dict, list, tuple)):
        unpack, data = True, [data]
    if isinstance(data, (list, tuple)):
        if hash:
            from dask.base import tokenize
            names = [type(x).__name__ + "-" + tokenize(x) for x in data]
        else:
            names = [type(x).__name__ + "-" + uuid.uuid4().hex for x in data]
        data = dict(zip(names, data))
    arrays = {k: v for k, v in data.items() if _eligible(v, min_bytes)}
    others = {k: v for k, v in data.items() if k not in arrays}
    out = {}
    if others:  # small or non-array values: Dask's own scatter, same keys
        out.update(await dc._scatter(others, workers=workers, broadcast=broadcast,
                                     direct=direct, timeout=timeout, hash=hash))
    if arrays:
        out.update(await _scatter_arrays(dc, arrays, workers, broadcast, timeout))
    if names is None:
        out = {k: out[k] for k in data}      # the dict's own order
    elif issubclass(input_type, (list, tuple, set, frozenset)):
        out = input_type(out[k] for k in names)
    else:
        out = [out[k] for k in names]
    if unpack:
        out = out[0]
    return out


def _no_default():
    from distributed.utils import no_default  # what client.scatter's timeout defaults to
    return no_default


def scatter(client, data, workers=None, broadcast=False, direct=None, hash=True, timeout=None,
            asynchronous=None, min_bytes=DEFAULT_MIN_BYTES):
    """Drop-in for client.scatter(data, workers, broadcast, direct, hash,
    timeout): the same arguments and results (a Future; a list, tuple, set
    or dict of them for such data; keys named as client.scatter names them:
    'ndarray-<tokenize(x)>' with hash=True, a random one with hash=False,
    the dict's keys for a dict), and tasks given the futures receive the
    arrays.

    numpy arrays of at least `min_bytes` bytes (plain ndarrays of numeric or
    bytes dtypes) go through hoplite: put once into this process's store
    (hoplite.dask.client()), read by each chosen worker from its own store
    in a worker thread, then registered with the scheduler as held there.
    broadcast=True chooses every running worker (of `workers` if given), an
    int n that many; otherwise each array goes to one worker, round robin.
    The workers must be connected to hoplite (register() or HOPLITE_SOCKET),
    else NotConnected is raised and nothing is left behind. Everything else
    goes to client.scatter with the same arguments. `direct` only matters
    for those.

    Tasks receive HopliteArray: a read-only ndarray over shared memory
    (client.scatter's arrays are writable copies: copy before modifying).

    Lifetime: the hoplite object of a key is deleted once no Future of that
    key is left in this client after the futures scatter returned are gone
    (workers holding the array keep reading it; only later moves between
    workers then go through Dask's bytes), and in any case when this process
    ends (owned objects). `timeout` (default: the client's) bounds the
    workers' reads. With an asynchronous client, await the result."""
    if distributed is None:
        raise ImportError("hoplite.dask.scatter needs dask.distributed")
    return client.sync(_scatter, client, data, workers, broadcast, direct, hash, timeout,
                       min_bytes, asynchronous=asynchronous)
