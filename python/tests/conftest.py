"""Fixtures: real hoplite-directory / hoplite-store processes on loopback.

The binding is imported from this checkout (python/); the library and the
servers come from $HOPLITE_BUILD_DIR (set by ctest) or <checkout>/build.
Each test module gets its own cluster, started once and always stopped.
"""
import itertools
import os
import sys

import pytest

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import hoplite  # noqa: E402
from hoplite.cluster import LocalCluster  # noqa: E402

_ids = itertools.count()


def _library_file():
    """The libhoplite the binding will load (same search as hoplite._lib),
    without loading it."""
    from hoplite import _lib
    for path, _ in _lib._candidates():
        if os.sep in path and os.path.exists(path):
            return path
    return None


def pytest_configure(config):
    """A sanitizer build (HPL_SANITIZE=ON, e.g. build-asan) links libasan,
    which must be the first library of the process: ctypes cannot load it
    into a plain python. Run the suite again with libasan preloaded (and
    leak checking off: the interpreter itself does not free everything)."""
    lib = _library_file()
    if not lib or os.environ.get("HOPLITE_ASAN_REEXEC"):
        return
    with open(lib, "rb") as f:
        if b"libasan.so" not in f.read():
            return
    with open("/proc/self/maps") as f:
        if "libasan" in f.read():
            return
    import ctypes.util
    asan = ctypes.util.find_library("asan") or "libasan.so"
    env = dict(os.environ, LD_PRELOAD=(asan + " " + os.environ.get("LD_PRELOAD", "")).strip(),
               ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "detect_leaks=0"),
               HOPLITE_ASAN_REEXEC="1")
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(str(config.invocation_params.dir))
    os.execve(sys.executable, [sys.executable, "-m", "pytest"] +
              list(config.invocation_params.args), env)


def start_cluster(nodes, memory="256M", **kw):
    kw.setdefault("store_args", ["--grace-ms", "1000"])
    return LocalCluster(nodes=nodes, memory=memory, **kw).start()


@pytest.fixture(scope="module")
def cluster():
    """Three stores of 256 MiB; fails the module if a server died."""
    lc = start_cluster(3)
    try:
        yield lc
        dead = lc.alive()
        tails = ""
        for name in dead:  # the end of each dead server's log, for the report
            try:
                with open(os.path.join(lc.workdir, name + ".log")) as f:
                    tails += "\n--- %s.log\n%s" % (name, "".join(f.readlines()[-25:]))
            except OSError:
                pass
        assert not dead, "servers died during the tests: %s (logs in %s)%s" % (
            dead, lc.workdir, tails)
    finally:
        lc.stop()


@pytest.fixture(scope="module")
def clients(cluster):
    cs = [hoplite.Client(s, timeout=30.0) for s in cluster.sockets]
    yield cs
    for c in cs:
        c.close()


@pytest.fixture
def uid(request):
    """Fresh object ids: uid() -> 'testname-N'."""
    name = request.node.name.replace("[", "-").replace("]", "")[:100]
    return lambda tag="": "%s-%s%d" % (name, tag, next(_ids))
