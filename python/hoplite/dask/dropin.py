"""hoplite.dask.dropin - the drop-in for client.scatter: put each array
once, have the chosen workers read it from their own stores and hold it as
the key's value, and delete the objects once their futures are gone.
"""
import asyncio
import queue
import random
import threading
import uuid
import weakref
from numbers import Number

import numpy as np

from ..errors import InvalidArgument, NotFound
from .arrays import _wrap
from .conn import (DEFAULT_MIN_BYTES, ArrayRef, NotConnected, _array_of, _scatter_client,
                   client, distributed, logger)

def _eligible(x, min_bytes):
    if type(x) is not np.ndarray or x.nbytes < min_bytes:
        return False
    dt = x.dtype
    return not (dt.hasobject or dt.fields is not None or dt.subdtype is not None
                or dt.itemsize == 0)


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
    hoplite (gets in flight together on the worker's event loop), keep them
    under `token`. Returns {key: nbytes}."""
    mine = assignments.get(dask_worker.address, {})
    try:
        c = client()
    except InvalidArgument as e:
        raise NotConnected(
            "hoplite.dask.scatter: worker %r (%s) has no hoplite store (%s); register "
            "the plugin (hoplite.dask.register(client, socket=...)) or start the worker "
            "with HOPLITE_SOCKET set" % (dask_worker.name, dask_worker.address, e)) from None
    keys = list(mine)
    views = await asyncio.gather(*[c.get_async(mine[k].id, timeout=timeout) for k in keys])
    arrays = {k: _wrap(_array_of(mv, mine[k]), mine[k]) for k, mv in zip(keys, views)}
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
        puts = []
        for key, x in arrays.items():
            if not x.flags.c_contiguous:  # a copy of many bytes: not on the loop
                x = await loop.run_in_executor(None, np.ascontiguousarray, x)
            oid = "dask/scatter/" + uuid.uuid4().hex
            # the raw elements (ArrayRef carries dtype and shape), copied by
            # the store straight from x; all puts in flight together
            puts.append(sc.put_async(oid, x))
            refs[key] = ArrayRef(oid, x.dtype, x.shape)
        done = await asyncio.gather(*puts, return_exceptions=True)  # none left running
        failed = [r for r in done if isinstance(r, BaseException)]
        if failed:
            raise failed[0]
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
    (get_async on the worker's event loop), then registered with the
    scheduler as held there.
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
