"""arrays.py - numpy arrays in hoplite objects, keeping dtype and shape.

put_array() stores an array as one object: a small header followed by the
elements in C order. All integers are little-endian.

    offset  size     field
    0       4        magic b"HPLA"
    4       1        version, 1
    5       1        ndim, 0..32
    6       2        L: length of the dtype string
    8       8        D: offset of the data, a multiple of 64 (>= 16 + 8*ndim + L)
    16      8*ndim   shape, one u64 per dimension
    16+8*ndim  L     dtype string: numpy's dtype.str, ASCII ("<f4", "|u1", "<c16", "<M8[ns]")
    ...              zero bytes up to D
    D       nbytes   the elements, C order; nbytes = prod(shape) * itemsize

The object's size is exactly D + nbytes (checked on read). Data starts at a
64-byte boundary of the object, so it is as aligned as the object itself.
Object (Python) dtypes and structured dtypes are refused.

Reduce sources must be raw (put(), not put_array()): a reduce would combine
the headers too. Read raw objects with get_array(id, dtype=..., shape=...).
"""
import ctypes
import struct

import numpy as np

from .errors import InvalidArgument

MAGIC = b"HPLA"
VERSION = 1
MAX_NDIM = 32
ALIGN = 64
_FIXED = struct.Struct("<4sBBHQ")  # magic, version, ndim, L, D


def _check_dtype(dt):
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
        raise InvalidArgument("cannot store arrays of dtype %s (plain numeric/bytes dtypes only)"
                              % dt)


def encode_header(dtype, shape):
    """The header bytes (length D) for an array of `dtype` and `shape`."""
    dt = np.dtype(dtype)
    _check_dtype(dt)
    shape = tuple(int(s) for s in shape)
    if len(shape) > MAX_NDIM:
        raise InvalidArgument("at most %d dimensions" % MAX_NDIM)
    ds = dt.str.encode("ascii")
    raw = 16 + 8 * len(shape) + len(ds)
    d = (raw + ALIGN - 1) // ALIGN * ALIGN
    hdr = bytearray(d)
    _FIXED.pack_into(hdr, 0, MAGIC, VERSION, len(shape), len(ds), d)
    struct.pack_into("<%dQ" % len(shape), hdr, 16, *shape)
    hdr[16 + 8 * len(shape):raw] = ds
    return bytes(hdr)


def decode_header(buf):
    """(dtype, shape, data_offset) from an object's first bytes; raises
    InvalidArgument if they are not a valid header for an object of
    len(buf) bytes."""
    mv = memoryview(buf).cast("B")
    if len(mv) < 16:
        raise InvalidArgument("not an array object (too short for a header); "
                              "pass dtype= to read raw elements")
    magic, ver, ndim, dlen, d = _FIXED.unpack_from(mv, 0)
    if magic != MAGIC:
        raise InvalidArgument("not an array object (no HPLA header); "
                              "pass dtype= to read raw elements")
    if ver != VERSION or ndim > MAX_NDIM or d % ALIGN or d < 16 + 8 * ndim + dlen \
            or d > len(mv):
        raise InvalidArgument("corrupt or unsupported array header (version %d)" % ver)
    shape = struct.unpack_from("<%dQ" % ndim, mv, 16)
    try:
        dt = np.dtype(bytes(mv[16 + 8 * ndim:16 + 8 * ndim + dlen]).decode("ascii"))
    except (TypeError, ValueError, UnicodeDecodeError):
        raise InvalidArgument("array header names an unknown dtype") from None
    _check_dtype(dt)
    count = 1
    for s in shape:
        count *= s
    if d + count * dt.itemsize != len(mv):
        raise InvalidArgument("array header says %d data bytes, the object has %d"
                              % (count * dt.itemsize, len(mv) - d))
    return dt, shape, d


def put_array(client, obj_id, array, timeout):
    """Client.put_array(): header and elements written in place (one copy)."""
    a = np.asanyarray(array)
    if type(a) is not np.ndarray:
        a = a.view(np.ndarray)
    hdr = encode_header(a.dtype, a.shape)
    total = len(hdr) + a.nbytes
    from ._native import DEFAULT, _INLINE_MAX
    if timeout is DEFAULT:
        timeout = client.default_timeout
    c = client.create(obj_id, total, timeout=timeout)
    try:
        ctypes.memmove(c.address, hdr, len(hdr))
        client._copy_into(c.address + len(hdr), a.nbytes, a,
                          progress=c if total > _INLINE_MAX else None)
    except BaseException:
        c.abort()
        raise
    c.seal(timeout=timeout)


def view_array(mv, dtype=None, shape=None):
    """A read-only numpy array over memoryview `mv` (no copy). dtype None:
    `mv` holds a put_array() object; else raw elements of `dtype`, reshaped
    to `shape` if given. The array's base chain ends at `mv`, which keeps
    the object held."""
    if dtype is None:
        if shape is not None:
            raise InvalidArgument("shape= needs dtype= (array objects carry their own)")
        dt, shp, d = decode_header(mv)
        a = np.frombuffer(mv, dtype=dt, offset=d, count=(len(mv) - d) // dt.itemsize)
        return a.reshape(shp)
    dt = np.dtype(dtype)
    if len(mv) % dt.itemsize:
        raise InvalidArgument("object of %d bytes is not a whole number of %s elements"
                              % (len(mv), dt))
    a = np.frombuffer(mv, dtype=dt)
    if shape is not None:
        try:
            a = a.reshape(shape)
        except ValueError as e:
            raise InvalidArgument(str(e)) from None
    return a
