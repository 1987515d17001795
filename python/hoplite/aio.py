"""aio.py - the Client's asyncio calls (get_async, put_async, stat_async,
delete_async, reduce_async, allreduce_async, get_array_async), mixed into
Client (client.py).

They submit requests with the library's hpl_async_* calls (include/
hoplite.h, docs/async.md) and complete them from the handle's completion
descriptor, which every event loop with requests in flight watches with
loop.add_reader: no thread per call, one reader per client per loop. Each
request carries its own deadline (the library's per-request timeout); the
loop also wakes up when hpl_async_timeout_ms says the earliest one is due
(loop.call_later), so deadlines fire while nothing else happens.

Results are those of the blocking calls: get_async returns the same
read-only memoryview over shared memory, held as Client.get's is (see
client.py); stat_async a Stat; failures raise the same exception classes
with the library's detail.

Lifetime rules:
  - Cancelling the awaiting task (task.cancel(), asyncio.wait_for running
    out) cancels the request in the library (hpl_async_cancel); its
    completion is taken at once (or when it comes: a put the store was
    copying first sends its abort) and an object it still brought is
    released, never handed out.
  - put_async keeps its data object alive until the request completed (also
    when the awaiting task was cancelled): do not modify it meanwhile.
  - The handle stays open while requests are in flight (they count as calls
    in progress); Client.close() cancels them, and they raise
    ConnectionFailed in their tasks.
"""
import asyncio
import ctypes
import itertools
import logging
import threading

from . import _lib
from .errors import ConnectionFailed
from ._native import (DEFAULT, Stat, _GetHold, _put_error, _put_source, _view, encode_id,
                      error_of, timeout_ms)

logger = logging.getLogger("hoplite.aio")

_ECANCELED = -12
_POLL_MAX = 64  # completions taken per hpl_async_poll call


class _Req:
    """One request in flight: the future its task awaits, the loop that
    owns it, what to make of a completion, and what must stay alive."""
    __slots__ = ("fut", "loop", "finish", "op", "keep")

    def __init__(self, fut, loop, finish, op, keep):
        self.fut, self.loop, self.finish, self.op, self.keep = fut, loop, finish, op, keep


class _LoopState:
    """A loop that watches the descriptor: how many of the handle's requests
    it owns, its deadline wake-up, its completion array."""
    __slots__ = ("pending", "timer", "comps")

    def __init__(self):
        self.pending = 0
        self.timer = None
        self.comps = (_lib.Completion * _POLL_MAX)()


class _Driver:
    """The async side of one native handle (_native._Native.aio): requests
    in flight by tag and the loops that watch the descriptor.

    Invariants: a loop has a reader on the descriptor exactly while it owns
    pending requests (its _LoopState exists), and each such loop counts as
    one call in progress on the handle (_Native.active), so the handle (and
    the descriptor) cannot close under a reader or a request. A loop's state
    changes only in that loop's thread; a completion another loop's poll
    took is handed over with call_soon_threadsafe."""

    def __init__(self, native, fd):
        self.n = native
        self.lib = native.lib
        self.fd = fd
        self.lock = threading.Lock()  # reqs, loops
        self.reqs = {}                # tag -> _Req
        self.loops = {}               # loop -> _LoopState
        self.tags = itertools.count(1)
        self.closing = False
        native.on_close.append(self._close_requested)

    # ---------------------------------------------------------- submitting
    def submit(self, loop, call, finish, op, keep=None):
        """call(handle, tag) -> rc submits; returns (tag, future). Raises the
        submission's failure (nothing is then in flight)."""
        fut = loop.create_future()
        n = self.n
        with n.cv:
            if n.closing:
                raise ConnectionFailed("the hoplite client is closed", -7)
            tag = next(self.tags)
            rc = call(n.h, tag)
            if rc:
                err = n.error(rc)
                raise _put_error(err) if op == _lib.AOP_PUT else err
            with self.lock:
                self.reqs[tag] = _Req(fut, loop, finish, op, keep)
                st = self.loops.get(loop)
                if st is None:
                    st = self.loops[loop] = _LoopState()
                    n.active += 1
                    loop.add_reader(self.fd, self._ready, loop)
                st.pending += 1
        return tag, fut

    def cancel(self, tag, loop):
        """The task awaiting request `tag` was cancelled (in loop's thread):
        cancel it in the library and take what completed."""
        if tag in self.reqs:
            self.lib.hpl_async_cancel(self.n.h, tag)  # ENOTFOUND: completed meanwhile
            self._ready(loop)

    def _close_requested(self):
        """Client.close() (under the handle's cv, any thread): cancel every
        request; their completions raise ConnectionFailed."""
        self.closing = True
        with self.lock:
            tags = list(self.reqs)
        for tag in tags:  # the handle is open: its loops count as active
            self.lib.hpl_async_cancel(self.n.h, tag)

    # ---------------------------------------------------------- completing
    def _ready(self, loop):
        """The descriptor is readable or a deadline is due: take every
        completion, resolve its future, then re-arm (or stop watching)."""
        st = self.loops.get(loop)
        if st is None:
            return  # a callback queued before this loop stopped watching
        comps = st.comps
        while True:
            k = self.lib.hpl_async_poll(self.n.h, comps, _POLL_MAX)
            if k < 0:  # only for a bad handle: cannot happen while it is open
                logger.error("hpl_async_poll failed: %s", self.n.error(k))
                break
            for i in range(k):
                self._take(comps[i], loop, st)
            if k < _POLL_MAX:
                break
        self._settle(loop, st)

    def _take(self, comp, loop, st):
        with self.lock:
            req = self.reqs.pop(comp.tag, None)
        bufp = ctypes.cast(comp.buf, ctypes.c_void_p).value if comp.buf else None
        if req is None or (req.loop is loop and req.fut.done()):
            if bufp:  # nobody waits for it (cancelled): release it now
                self.lib.hpl_release(self.n.h, ctypes.cast(bufp, _lib.BufP))
            if req is not None:
                st.pending -= 1
            return
        res = exc = None
        if comp.status:
            if comp.status == _ECANCELED and self.closing:
                exc = ConnectionFailed("the hoplite client was closed while the request was in "
                                       "flight (%s)" % comp.detail.decode("utf-8", "replace"),
                                       -7, comp.detail.decode("utf-8", "replace"))
            else:
                exc = error_of(self.lib, comp.status, comp.detail)
                if req.op == _lib.AOP_PUT:
                    exc = _put_error(exc)
        else:
            res = req.finish(self, comp, bufp)
        if req.loop is loop:
            st.pending -= 1
            _resolve(req.fut, res, exc)
            return
        try:
            req.loop.call_soon_threadsafe(self._handed_over, req, res, exc)
        except RuntimeError:  # that loop is closed: nobody can take it
            if self._drop_state(req.loop):
                self.n.leave()

    def _handed_over(self, req, res, exc):
        """In req.loop's thread: a completion another loop's poll took."""
        st = self.loops.get(req.loop)
        if st is not None:
            st.pending -= 1
        _resolve(req.fut, res, exc)
        if st is not None:
            self._settle(req.loop, st)

    def _settle(self, loop, st):
        """After completions: stop watching (nothing pending on this loop)
        or wake up again by the earliest deadline."""
        if st.pending <= 0:
            if self._drop_state(loop):
                loop.remove_reader(self.fd)
                self.n.leave()  # may close the handle (close() was asked)
            return
        ms = self.lib.hpl_async_timeout_ms(self.n.h)
        if ms < 0:
            if st.timer is not None:
                st.timer.cancel()
                st.timer = None
            return
        now = loop.time()
        when = now + ms / 1000.0
        t = st.timer
        if t is not None and now < t.when() <= when + 0.001:
            return  # an earlier wake-up is set already
        if t is not None:
            t.cancel()
        st.timer = loop.call_later(ms / 1000.0, self._ready, loop)

    def _drop_state(self, loop):
        with self.lock:
            st = self.loops.pop(loop, None)
        if st is not None and st.timer is not None:
            st.timer.cancel()
        return st is not None

    # ---------------------------------------------------------- results
    def view(self, comp, bufp):
        """get / allreduce: the held object as a read-only view."""
        hold = _GetHold(self.n, ctypes.cast(bufp, _lib.BufP))
        return _view(hold, self.lib.hpl_buf_data(hold.b), comp.size, readonly=True)


def _nothing(_driver, _comp, _bufp):
    return None


def _stat(_driver, comp, _bufp):
    return Stat(comp.size, comp.copies, comp.complete, bool(comp.is_inline))


def _view_of(driver, comp, bufp):
    return driver.view(comp, bufp)


def _resolve(fut, res, exc):
    if fut.done():
        return  # cancelled meanwhile: a view in res goes with it (released)
    if exc is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(res)


def _driver(native):
    """The handle's _Driver, made (with its descriptor) on first use."""
    d = native.aio
    if d is not None:
        return d
    with native.cv:
        if native.aio is None:
            if native.closing:
                raise ConnectionFailed("the hoplite client is closed", -7)
            fd = ctypes.c_int(-1)
            rc = native.lib.hpl_async_fd(native.h, ctypes.byref(fd))
            if rc:
                raise native.error(rc)
            native.aio = _Driver(native, fd.value)
        return native.aio


async def _run(native, call, finish, op, keep=None):
    """Submit one request and await its completion; cancelling the awaiting
    task cancels the request."""
    loop = asyncio.get_running_loop()
    d = _driver(native)
    tag, fut = d.submit(loop, call, finish, op, keep)
    try:
        return await fut
    except asyncio.CancelledError:
        if fut.cancelled():
            d.cancel(tag, loop)
        raise


class _AsyncOps:
    """Mixed into Client: expects self._n, self._lib, self._ms and the
    reduce argument checks of _ManyOps."""

    async def get_async(self, obj_id, timeout=None):
        """get() on asyncio: await object `obj_id` for up to `timeout`
        seconds (None: no limit); returns the read-only memoryview over the
        store's shared memory (no copy) Client.get returns."""
        idb, ms = encode_id(obj_id), timeout_ms(timeout)
        return await _run(self._n, lambda h, tag: self._lib.hpl_async_get(h, idb, ms, tag),
                          _view_of, _lib.AOP_GET)

    async def get_array_async(self, obj_id, timeout=None, dtype=None, shape=None):
        """get_array() on asyncio (see Client.get_array)."""
        from . import arrays
        return arrays.view_array(await self.get_async(obj_id, timeout), dtype, shape)

    async def put_async(self, obj_id, data, timeout=DEFAULT):
        """put() on asyncio: the store copies the bytes of `data` (any
        buffer) straight from this process's memory. `data` is kept alive
        until the request completes and must not change meanwhile (a
        non-contiguous buffer is copied first)."""
        idb, ms = encode_id(obj_id), self._ms(timeout)
        nbytes, addr, keep = _put_source(data)
        return await _run(self._n,
                          lambda h, tag: self._lib.hpl_async_put(h, idb, addr, nbytes, ms, tag),
                          _nothing, _lib.AOP_PUT, keep)

    async def stat_async(self, obj_id, timeout=DEFAULT):
        """stat() on asyncio: Stat(size, copies, complete, inline)."""
        idb, ms = encode_id(obj_id), self._ms(timeout)
        return await _run(self._n, lambda h, tag: self._lib.hpl_async_stat(h, idb, ms, tag),
                          _stat, _lib.AOP_STAT)

    async def delete_async(self, obj_id, timeout=DEFAULT):
        """delete() on asyncio."""
        idb, ms = encode_id(obj_id), self._ms(timeout)
        return await _run(self._n, lambda h, tag: self._lib.hpl_async_delete(h, idb, ms, tag),
                          _nothing, _lib.AOP_DELETE)

    async def reduce_async(self, target, sources, *, dtype, op="sum", num_objects=0,
                           timeout=DEFAULT):
        """reduce() on asyncio: returns once the directory accepted it."""
        tb, arr, n, opc, dtc = self._reduce_args(target, sources, num_objects, op, dtype)
        ms = self._ms(timeout)
        return await _run(self._n, lambda h, tag: self._lib.hpl_async_reduce(
            h, tb, arr, n, num_objects, opc, dtc, ms, tag), _nothing, _lib.AOP_REDUCE)

    async def allreduce_async(self, target, sources, *, dtype, op="sum", num_objects=0,
                              timeout=None):
        """allreduce() on asyncio: the result as a read-only memoryview."""
        tb, arr, n, opc, dtc = self._reduce_args(target, sources, num_objects, op, dtype)
        ms = timeout_ms(timeout)
        return await _run(self._n, lambda h, tag: self._lib.hpl_async_allreduce(
            h, tb, arr, n, num_objects, opc, dtc, ms, tag), _view_of, _lib.AOP_ALLREDUCE)

    def async_count(self):
        """Async requests the handle holds (hpl_async_count): in flight,
        plus completions not taken yet; 0 if none was ever made."""
        with self._n.cv:
            if self._n.closed:
                return 0
            return self._lib.hpl_async_count(self._n.h)
