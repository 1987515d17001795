"""manyops.py - the Client's calls on many objects at once (put_many,
get_many, stat_many, delete_many), its reduces and the array helpers,
mixed into Client (client.py).
"""
import ctypes
import time

from . import _lib
from .errors import BatchError, InvalidArgument, error_for
from ._native import (DEFAULT, HPL_TO_NUMPY, _put_error, _put_source, _take_text, _use, decode_id,
                      dtype_code, encode_id, op_code, timeout_ms)


class _ManyOps:
    """Mixed into Client: expects self._n, self._lib, self._ms, self._check."""

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


