"""errors.py - one exception class per hoplite error code.

Every failed library call raises a subclass of HopliteError. The message is
the library's own: hpl_strerror(code), followed by hpl_errdetail() (the
reason the store, the directory or the library gave) when there is one.
Attributes: .code (the negative HPL_E* value), .name ("HPL_ETIMEDOUT"),
.detail (the detail string, possibly "").

Where a builtin exception means the same thing the class also derives from
it, so `except TimeoutError` or `except ValueError` work as expected.
"""


class HopliteError(Exception):
    """Base class of every error raised by the hoplite binding."""

    code = None
    name = None

    def __init__(self, message, code=None, detail=""):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.detail = detail

    def __str__(self):
        return self.args[0] if self.args else ""


class LibraryNotFound(HopliteError, ImportError):
    """libhoplite.so could not be found or loaded."""


class InvalidArgument(HopliteError, ValueError):
    """HPL_EINVAL: a bad id, op, dtype or argument."""
    code, name = -1, "HPL_EINVAL"


class OutOfMemory(HopliteError):
    """HPL_ENOMEM: the store's shared-memory pool is full."""
    code, name = -2, "HPL_ENOMEM"


class Timeout(HopliteError, TimeoutError):
    """HPL_ETIMEDOUT: the call did not complete within its timeout."""
    code, name = -3, "HPL_ETIMEDOUT"


class NotFound(HopliteError, LookupError):
    """HPL_ENOTFOUND: no such object (or counter, or reduce)."""
    code, name = -4, "HPL_ENOTFOUND"


class AlreadyExists(HopliteError):
    """HPL_EEXIST: the id is already in use in the cluster."""
    code, name = -5, "HPL_EEXIST"


class ObjectLost(HopliteError):
    """HPL_ELOST: every copy of the object is gone."""
    code, name = -6, "HPL_ELOST"


class ConnectionFailed(HopliteError, ConnectionError):
    """HPL_ECONN: cannot connect to the store, or the connection closed
    (also raised for calls on a closed Client)."""
    code, name = -7, "HPL_ECONN"


class ProtocolError(HopliteError):
    """HPL_EPROTO: the peer is not a hoplite store or sent garbage."""
    code, name = -8, "HPL_EPROTO"


class SystemCallError(HopliteError, OSError):
    """HPL_ESYS: a system call failed (e.g. mapping the pool)."""
    code, name = -9, "HPL_ESYS"


class TooBig(HopliteError):
    """HPL_ETOOBIG: a request or reply is too large."""
    code, name = -10, "HPL_ETOOBIG"


class Mismatch(HopliteError):
    """HPL_EMISMATCH: reduce sources differ in size or do not fit the dtype."""
    code, name = -11, "HPL_EMISMATCH"


class Canceled(HopliteError):
    """HPL_ECANCELED: the operation was canceled."""
    code, name = -12, "HPL_ECANCELED"


class Unavailable(HopliteError):
    """HPL_EUNAVAIL: the service (e.g. the directory) is unavailable."""
    code, name = -13, "HPL_EUNAVAIL"


class InvalidState(HopliteError):
    """HPL_ESTATE: the object is not in a state that allows this."""
    code, name = -14, "HPL_ESTATE"


class AuthFailed(HopliteError, PermissionError):
    """HPL_EAUTH: the cluster secret is wrong or missing."""
    code, name = -15, "HPL_EAUTH"


class Corrupt(HopliteError):
    """HPL_ECORRUPT: no copy of the object has the right bytes (every
    copy's units failed their digests); the detail names the node."""
    code, name = -16, "HPL_ECORRUPT"


class TooManyClients(HopliteError):
    """HPL_ETOOMANY: the store has as many clients of this user (or in all)
    as its limits allow; close a handle, or raise --max-clients-per-uid."""
    code, name = -17, "HPL_ETOOMANY"


class NotAllowed(HopliteError, PermissionError):
    """HPL_EPERM: another node made this object and is still up; only its
    clients (or `hoplite --admin`, or a directory run with --delete-any)
    may delete it. The detail names the node."""
    code, name = -18, "HPL_EPERM"


class TooManyInFlight(HopliteError):
    """HPL_EAGAIN: a handle holds HPL_ASYNC_MAX async requests (pending, or
    completed and not taken yet); take completions first."""
    code, name = -19, "HPL_EAGAIN"


class BatchError(HopliteError):
    """Some requests of a batch call (put_many, get_many, stat_many,
    delete_many) failed.

    .results  one entry per request, in the order given: its result (what
              the call returns for it) or the exception it failed with
    .errors   {id: exception} of the requests that failed
    .code, .name, .detail: those of the first failure. Only the first
              failure of each call into the library has the library's
              detail; the others say what their code means and name the id.
    """

    def __init__(self, message, results, errors, first):
        super().__init__(message, first.code, first.detail)
        self.name = first.name
        self.results = results
        self.errors = errors


BY_CODE = {cls.code: cls for cls in (
    InvalidArgument, OutOfMemory, Timeout, NotFound, AlreadyExists, ObjectLost,
    ConnectionFailed, ProtocolError, SystemCallError, TooBig, Mismatch, Canceled,
    Unavailable, InvalidState, AuthFailed, Corrupt, TooManyClients, NotAllowed, TooManyInFlight)}


def error_for(code, message, detail=""):
    """The exception instance for a negative HPL_E* code."""
    cls = BY_CODE.get(code)
    if cls is None:
        err = HopliteError(message, code, detail)
        err.name = "HPL_E?%d" % code
        return err
    return cls(message, code, detail)
