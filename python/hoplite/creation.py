"""creation.py - an object being created (Client.create): its writable view,
progress notes, seal and abort, and the carrier that keeps the native
handle open while a creation's memory is reachable.
"""
from ._native import DEFAULT, _use, _view, timeout_ms
from .errors import InvalidArgument


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


