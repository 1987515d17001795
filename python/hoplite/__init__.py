"""hoplite - Python binding of the hoplite distributed object store.

    import hoplite
    c = hoplite.Client()                 # the store of this node, $HOPLITE_SOCKET
    c.put("x", b"bytes or any buffer")   # one copy, into shared memory
    mv = c.get("x", timeout=10)          # read-only memoryview over shared memory
    c.put_array("w", numpy_array)        # dtype and shape kept
    w = c.get_array("w")                 # read-only numpy array, no copy

See python/README.md for the whole API, the array header format, the
exceptions, the Dask integration, the benchmark and the examples.
"""
from .errors import (HopliteError, LibraryNotFound, InvalidArgument, OutOfMemory, Timeout,
                     NotFound, AlreadyExists, ObjectLost, ConnectionFailed, ProtocolError,
                     SystemCallError, TooBig, Mismatch, Canceled, Unavailable, InvalidState,
                     AuthFailed, Corrupt, TooManyClients, NotAllowed, TooManyInFlight,
                     BatchError)
from .client import Client, connect, connect_admin
from .creation import Creation
from ._native import Stat, ObjectInfo, Transfer, encode_id, dtype_code, op_code
from ._lib import library_path, build_dir, HPL_ID_MAX

__all__ = [
    "Client", "Creation", "Stat", "ObjectInfo", "Transfer", "connect", "connect_admin",
    "encode_id",
    "dtype_code", "op_code", "library_path", "build_dir", "HPL_ID_MAX",
    "HopliteError", "LibraryNotFound", "InvalidArgument", "OutOfMemory", "Timeout", "NotFound",
    "AlreadyExists", "ObjectLost", "ConnectionFailed", "ProtocolError", "SystemCallError",
    "TooBig", "Mismatch", "Canceled", "Unavailable", "InvalidState", "AuthFailed", "Corrupt",
    "TooManyClients", "NotAllowed", "TooManyInFlight", "BatchError",
]
__version__ = "0.1.0"  # the C project's version (CMakeLists.txt, pyproject.toml)
