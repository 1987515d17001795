"""_lib.py - find libhoplite and declare its functions for ctypes.

Every function of include/hoplite.h is declared here with its argtypes and
restype. Handles are opaque pointers (pointers to incomplete structures), no
structure is ever passed by value, and strings the library allocates are
received as raw pointers so that they can be given back to hpl_free().

Where the library is looked for, first match wins:
  1. $HOPLITE_LIB            the path of libhoplite.so itself (nothing else is
                             tried then)
  2. $HOPLITE_BUILD_DIR      a CMake build directory holding libhoplite.so
  3. <checkout>/build        python/hoplite/../../build/libhoplite.so, only
                             when this package is imported from a source
                             checkout (not from an installed copy)
  4. pkg-config              libhoplite.so.0 in `pkg-config --variable=libdir
                             hoplite`: the `cmake --install`ed library whose
                             hoplite.pc pkg-config finds ($PKG_CONFIG_PATH,
                             then its default directories)
  5. the system's loader     libhoplite.so.0 as dlopen() finds it
                             ($LD_LIBRARY_PATH, the ld.so cache, /usr/lib)
  6. standard directories    libhoplite.so.0 in /usr/local/lib/<multiarch>,
                             /usr/local/lib64, /usr/local/lib (an install
                             ldconfig has not been run after)

ctypes releases the GIL around every call into a CDLL function, so a thread
blocked in hpl_get() does not stop the other Python threads.
"""
import ctypes
import os
import shutil
import subprocess
import sysconfig
import threading

from .errors import LibraryNotFound

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
_CHECKOUT_TOP = os.path.normpath(os.path.join(_PKG_DIR, "..", ".."))
_CHECKOUT_BUILD = os.path.join(_CHECKOUT_TOP, "build")
# python/hoplite in a source tree (not an installed copy of the package)
_IN_CHECKOUT = os.path.exists(os.path.join(_CHECKOUT_TOP, "include", "hoplite.h"))
_SONAME = "libhoplite.so.0"

# ---------------------------------------------------------------- constants
# Values from include/hoplite.h.
HPL_ID_MAX = 255
TTL_MAX_MS = 30 * 24 * 3600 * 1000  # HPL_TTL_MAX_MS: the longest TTL a put may ask for
BATCH_MAX = 4096  # requests per hpl_*_many call
ASYNC_MAX = 65536  # HPL_ASYNC_MAX: async requests a handle holds at most
ASYNC_DETAIL_MAX = 256  # HPL_ASYNC_DETAIL_MAX: a completion's detail, NUL included
# hpl_async_op
AOP_GET, AOP_PUT, AOP_STAT, AOP_DELETE, AOP_REDUCE, AOP_ALLREDUCE = 1, 2, 3, 4, 5, 6

OP_SUM, OP_MIN, OP_MAX, OP_PROD = 0, 1, 2, 3
DT_U8, DT_I32, DT_I64, DT_F32, DT_F64, DT_U32, DT_U64, DT_I8 = 0, 1, 2, 3, 4, 5, 6, 7


class _HplClient(ctypes.Structure):
    """struct hpl_client: opaque, only ever used through a pointer."""


class _HplBuf(ctypes.Structure):
    """struct hpl_buf: opaque, only ever used through a pointer."""


ClientP = ctypes.POINTER(_HplClient)
BufP = ctypes.POINTER(_HplBuf)


class Completion(ctypes.Structure):
    """struct hpl_completion, field for field (plain data; an array of them
    is filled by hpl_async_poll)."""
    _fields_ = [
        ("tag", ctypes.c_uint64),
        ("op", ctypes.c_int32),
        ("status", ctypes.c_int32),
        ("buf", BufP),
        ("size", ctypes.c_uint64),
        ("copies", ctypes.c_uint32),
        ("complete", ctypes.c_uint32),
        ("is_inline", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("detail", ctypes.c_char * ASYNC_DETAIL_MAX),
    ]

_c_int = ctypes.c_int
_i64 = ctypes.c_int64
_u64 = ctypes.c_uint64
_u32 = ctypes.c_uint32
_size = ctypes.c_size_t
_cstr = ctypes.c_char_p
_vp = ctypes.c_void_p
_P = ctypes.POINTER

# name: (restype, argtypes)
_PROTOTYPES = {
    "hpl_strerror": (_cstr, [_c_int]),
    "hpl_errname": (_cstr, [_c_int]),
    "hpl_dtype_size": (_size, [_c_int]),
    "hpl_connect": (_c_int, [_cstr, _i64, _P(ClientP)]),
    "hpl_connect_admin": (_c_int, [_cstr, _cstr, _i64, _P(ClientP)]),
    "hpl_close": (None, [ClientP]),
    "hpl_errdetail": (_cstr, [ClientP]),
    "hpl_set_lifetime": (_c_int, [ClientP, _c_int, _i64]),
    "hpl_put": (_c_int, [ClientP, _cstr, _vp, _u64, _i64]),
    "hpl_create": (_c_int, [ClientP, _cstr, _u64, _i64, _P(BufP)]),
    "hpl_buf_progress": (_c_int, [ClientP, BufP, _u64]),
    "hpl_seal": (_c_int, [ClientP, BufP, _i64]),
    "hpl_abort": (None, [ClientP, BufP]),
    "hpl_get": (_c_int, [ClientP, _cstr, _i64, _P(BufP)]),
    "hpl_release": (None, [ClientP, BufP]),
    "hpl_buf_data": (_vp, [BufP]),
    "hpl_buf_size": (_u64, [BufP]),
    "hpl_buf_id": (_cstr, [BufP]),
    "hpl_buf_shared": (_c_int, [BufP]),
    "hpl_contains": (_c_int, [ClientP, _cstr, _i64, _P(_c_int)]),
    "hpl_stat": (_c_int, [ClientP, _cstr, _i64, _P(_u64), _P(_u32), _P(_u32), _P(_c_int)]),
    "hpl_delete": (_c_int, [ClientP, _cstr, _i64]),
    # char **out: received as void* so the pointer can be passed to hpl_free
    "hpl_list": (_c_int, [ClientP, _cstr, _i64, _P(_vp)]),
    "hpl_list_page": (_c_int, [ClientP, _cstr, _cstr, _size, _i64, _P(_vp), _P(_vp)]),
    "hpl_counters": (_c_int, [ClientP, _i64, _P(_vp)]),
    "hpl_counter": (_c_int, [ClientP, _cstr, _i64, _P(_u64)]),
    "hpl_transfers": (_c_int, [ClientP, _u64, _i64, _P(_vp), _P(_u64)]),
    "hpl_status": (_c_int, [ClientP, _c_int, _i64, _P(_vp)]),
    "hpl_held_bytes": (_c_int, [ClientP, _cstr, _i64, _P(_u64), _P(_u64)]),
    "hpl_free": (None, [_vp]),
    # many requests at once: arrays of n, rcs[i] per request
    "hpl_put_many": (_c_int, [ClientP, _P(_cstr), _P(_vp), _P(_u64), _size, _i64, _P(_c_int)]),
    "hpl_get_many": (_c_int, [ClientP, _P(_cstr), _size, _i64, _P(BufP), _P(_c_int)]),
    "hpl_stat_many": (_c_int, [ClientP, _P(_cstr), _size, _i64, _P(_u64), _P(_c_int)]),
    "hpl_delete_many": (_c_int, [ClientP, _P(_cstr), _size, _i64, _P(_c_int)]),
    "hpl_reduce": (_c_int, [ClientP, _cstr, _P(_cstr), _size, _size, _c_int, _c_int, _i64]),
    "hpl_reduce_range": (_c_int, [ClientP, _cstr, _P(_cstr), _size, _size, _c_int, _c_int, _u64,
                                  _u64, _i64]),
    "hpl_reduce_sources": (_c_int, [ClientP, _cstr, _i64, _P(_vp)]),
    "hpl_allreduce": (_c_int, [ClientP, _cstr, _P(_cstr), _size, _size, _c_int, _c_int, _i64,
                               _P(BufP)]),
    # asynchronous requests (aio.py): submit with a tag, take completions
    "hpl_async_fd": (_c_int, [ClientP, _P(_c_int)]),
    "hpl_async_get": (_c_int, [ClientP, _cstr, _i64, _u64]),
    "hpl_async_put": (_c_int, [ClientP, _cstr, _vp, _u64, _i64, _u64]),
    "hpl_async_stat": (_c_int, [ClientP, _cstr, _i64, _u64]),
    "hpl_async_delete": (_c_int, [ClientP, _cstr, _i64, _u64]),
    "hpl_async_reduce": (_c_int, [ClientP, _cstr, _P(_cstr), _size, _size, _c_int, _c_int, _i64,
                                  _u64]),
    "hpl_async_allreduce": (_c_int, [ClientP, _cstr, _P(_cstr), _size, _size, _c_int, _c_int,
                                     _i64, _u64]),
    "hpl_async_poll": (_c_int, [ClientP, _P(Completion), _c_int]),
    "hpl_async_timeout_ms": (_i64, [ClientP]),
    "hpl_async_cancel": (_c_int, [ClientP, _u64]),
    "hpl_async_count": (_size, [ClientP]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    env = os.environ.get("HOPLITE_LIB")
    if env:
        yield env, "$HOPLITE_LIB"
        return  # an explicit choice is not silently replaced by another library
    bdir = os.environ.get("HOPLITE_BUILD_DIR")
    if bdir:
        yield os.path.join(bdir, "libhoplite.so"), "$HOPLITE_BUILD_DIR"
    if _IN_CHECKOUT:
        yield os.path.join(_CHECKOUT_BUILD, "libhoplite.so"), "the checkout's build directory"
    libdir = _pkg_config_var("libdir")
    if libdir:
        yield os.path.join(libdir, _SONAME), "pkg-config's hoplite.pc"
    yield _SONAME, "the system's loader"
    multiarch = sysconfig.get_config_var("MULTIARCH")
    dirs = ["/usr/local/lib/" + multiarch] if multiarch else []
    for d in dirs + ["/usr/local/lib64", "/usr/local/lib"]:
        yield os.path.join(d, _SONAME), "a standard directory"


def _pkg_config_var(name):
    """`pkg-config --variable=NAME hoplite`, or None (no pkg-config, no
    hoplite.pc, an error)."""
    exe = shutil.which("pkg-config")
    if not exe:
        return None
    try:
        r = subprocess.run([exe, "--variable=" + name, "hoplite"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    value = r.stdout.decode("utf-8", "replace").strip()
    return value if r.returncode == 0 and value else None


def load():
    """Load libhoplite once and return the declared ctypes.CDLL.

    Raises LibraryNotFound (an ImportError) naming every place tried."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, where in _candidates():
            if os.sep in path and not os.path.exists(path):
                tried.append("%s (%s): no such file" % (path, where))
                continue
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                tried.append("%s (%s): %s" % (path, where, e))
                continue
            for name, (restype, argtypes) in _PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _lib, _lib_path = lib, path
            return lib
        raise LibraryNotFound(
            "libhoplite.so not found. Build it (cmake -S . -B build && cmake --build build -j2 "
            "in the source tree) and install it (cmake --install build [--prefix P]; with a "
            "prefix pkg-config does not search, set PKG_CONFIG_PATH=P/lib/pkgconfig), or set "
            "HOPLITE_LIB=/path/to/libhoplite.so or HOPLITE_BUILD_DIR=/path/to/build. Tried: %s"
            % ("; ".join(tried) or "nothing"))


def library_path():
    """Path of the loaded library (loads it if needed)."""
    load()
    return _lib_path


def build_dir():
    """The directory the servers (hoplite-directory, hoplite-store) are taken
    from: $HOPLITE_BUILD_DIR, else the directory of the loaded library if it
    holds them (a build directory), else the bin/ of the prefix the loaded
    library was installed into (PREFIX/lib or PREFIX/lib/<multiarch>), else
    <checkout>/build."""
    bdir = os.environ.get("HOPLITE_BUILD_DIR")
    if bdir:
        return bdir
    try:
        path = library_path()
        if os.sep not in path:  # found by the loader: ask it where
            path = _loaded_path(path)
        libdir = os.path.dirname(os.path.realpath(path))
        for d in (libdir, os.path.join(libdir, "..", "bin"),
                  os.path.join(libdir, "..", "..", "bin")):
            if os.path.exists(os.path.join(d, "hoplite-store")):
                return os.path.normpath(d)
    except LibraryNotFound:
        pass
    return _CHECKOUT_BUILD


def _loaded_path(soname):
    """The file the process mapped for `soname`, from /proc/self/maps (the
    soname itself if it is not listed)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(None, 5)
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith(soname):
                    return fields[5].strip()
    except OSError:
        pass
    return soname
