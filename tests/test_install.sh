#!/bin/sh
# test_install.sh - the install tree, used the way its users use it.
#
#   tests/test_install.sh BUILD_DIR SOURCE_DIR VERSION
#
# Installs BUILD_DIR with `cmake --install --prefix` into a new temporary
# directory and checks what landed there (programs, header, libhoplite with
# its soname and symlinks, hoplite.pc, the CMake package; no static library,
# no RPATH into the build tree). Then, using only the installed copy:
#   - starts a 2-node cluster with the installed `hoplite cluster up` (which
#     runs the installed hoplite-directory and hoplite-store);
#   - builds tests/install/putget.c through pkg-config and runs it: a put
#     through node 0, a get through node 1, every byte compared;
#   - configures and builds tests/install/ as a CMake project that uses
#     find_package(hoplite) and hoplite::hoplite, and runs that program too;
#   - `pip install --no-build-isolation --target`s ./python with Debian's
#     setuptools (PyPI never asked: PIP_NO_INDEX), and from another directory
#     imports it with /usr/bin/python3, checks it is the installed copy with
#     the installed library, and puts and gets; the sdist setuptools makes
#     installs the same files;
#   - as docs/operations.md says: `pip install --no-build-isolation ./python`
#     in a venv, then a put and get with the venv's python.
# setuptools builds in the project's directory (build/, hoplite.egg-info/),
# so the package is built from a copy of python/ and the checkout stays as
# it was.
# Everything it started is stopped by pid and the directory removed at exit.
set -eu

build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
version=$3
unset HOPLITE_LIB HOPLITE_BUILD_DIR HOPLITE_BIN_DIR HOPLITE_SOCKET PYTHONPATH LD_LIBRARY_PATH
# pip: no index, no extra wheel directories, no config files, no cache
unset PIP_FIND_LINKS PIP_INDEX_URL PIP_EXTRA_INDEX_URL
export PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/hpl-install.XXXXXX")
up_pid=""
drain_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then
    kill -TERM "$up_pid" 2>/dev/null || true
    wait "$up_pid" || true
  fi
  if [ -n "$drain_pid" ]; then wait "$drain_pid" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

fail() {
  echo "test_install: FAIL: $*" >&2
  exit 1
}
step() { echo "test_install: $*"; }
# show_fail LOG WHAT: print LOG, then fail
show_fail() {
  cat "$1" >&2
  fail "$2"
}

# ------------------------------------------------------------------ install
prefix=$tmp/prefix
step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" 2>&1 ||
  show_fail "$tmp/install.log" "cmake --install failed"

for f in bin/hoplite bin/hoplite-directory bin/hoplite-store; do
  [ -x "$prefix/$f" ] || fail "$f not installed"
done
[ -f "$prefix/include/hoplite.h" ] || fail "include/hoplite.h not installed"
so=$(find "$prefix" -name libhoplite.so.0 | head -n 1)
[ -n "$so" ] || fail "no libhoplite.so.0 under $prefix"
libdir=$(dirname "$so")
[ -L "$libdir/libhoplite.so" ] || fail "no libhoplite.so symlink (for -lhoplite) in $libdir"
[ -L "$libdir/libhoplite.so.0" ] || fail "libhoplite.so.0 is not a symlink"
[ -f "$libdir/libhoplite.so.$version" ] && [ ! -L "$libdir/libhoplite.so.$version" ] ||
  fail "no libhoplite.so.$version file in $libdir"
[ "$(readlink -f "$libdir/libhoplite.so")" = "$libdir/libhoplite.so.$version" ] ||
  fail "libhoplite.so does not lead to libhoplite.so.$version"
[ -f "$libdir/pkgconfig/hoplite.pc" ] || fail "no $libdir/pkgconfig/hoplite.pc"
for f in hopliteConfig.cmake hopliteConfigVersion.cmake hopliteTargets.cmake; do
  [ -f "$libdir/cmake/hoplite/$f" ] || fail "no $libdir/cmake/hoplite/$f"
done
static=$(find "$prefix" -name '*.a')
[ -z "$static" ] || fail "static internal libraries installed: $static"

readelf -d "$so" >"$tmp/so.dyn"
grep -q 'SONAME.*\[libhoplite\.so\.0\]' "$tmp/so.dyn" || show_fail "$tmp/so.dyn" "SONAME is not libhoplite.so.0"
if grep -q 'RPATH\|RUNPATH' "$tmp/so.dyn"; then show_fail "$tmp/so.dyn" "libhoplite has an RPATH"; fi
for f in hoplite-directory hoplite-store; do
  if readelf -d "$prefix/bin/$f" | grep 'RPATH\|RUNPATH'; then fail "$f has an RPATH"; fi
done
# the CLI finds the library next to it, wherever the prefix is
rp=$(readelf -d "$prefix/bin/hoplite" | sed -n 's/.*\(RPATH\|RUNPATH\).*\[\(.*\)\]/\2/p')
case "$rp" in
  '$ORIGIN/../'*) ;;
  *) fail "installed hoplite's RUNPATH is '$rp', not \$ORIGIN/../LIBDIR" ;;
esac

# ------------------------------------------------------------------ pkg-config
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --modversion hoplite)" = "$version" ] || fail "pkg-config --modversion: $(pkg-config --modversion hoplite)"
[ "$(pkg-config --variable=prefix hoplite)" = "$prefix" ] || fail "hoplite.pc prefix is $(pkg-config --variable=prefix hoplite)"
[ "$(pkg-config --variable=libdir hoplite)" = "$libdir" ] || fail "hoplite.pc libdir is $(pkg-config --variable=libdir hoplite)"
flags=$(pkg-config --cflags --libs hoplite)
step "cc putget.c $flags"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror -o "$tmp/putget-pc" "$src/tests/install/putget.c" $flags \
  >"$tmp/cc.log" 2>&1 || show_fail "$tmp/cc.log" "putget.c did not build through pkg-config"
readelf -d "$tmp/putget-pc" | grep -q 'NEEDED.*\[libhoplite\.so\.0\]' || fail "putget-pc does not need libhoplite.so.0"
LD_LIBRARY_PATH=$libdir ldd "$tmp/putget-pc" | grep -q "libhoplite.so.0 => $libdir/libhoplite.so.0" ||
  fail "putget-pc does not load the installed library: $(LD_LIBRARY_PATH=$libdir ldd "$tmp/putget-pc")"

# A sanitizer build's library links libasan, which must come first in a
# program that does not: preload it (as python/tests/conftest.py does).
asan=""
if grep -q 'NEEDED.*libasan' "$tmp/so.dyn"; then asan=$(cc -print-file-name=libasan.so); fi

# ------------------------------------------------------------------ the installed cluster
mkfifo "$tmp/up.fifo"
step "$prefix/bin/hoplite cluster up --nodes 2"
"$prefix/bin/hoplite" cluster up --nodes 2 --memory 64M --dir "$tmp/cluster" \
  >"$tmp/up.fifo" 2>"$tmp/up.err" &
up_pid=$!
exec 3<"$tmp/up.fifo"
ready=0
while IFS= read -r line <&3; do
  printf '%s\n' "$line" >>"$tmp/up.out"
  case "$line" in "Stop it:"*) ready=1; break ;; esac
done
cat <&3 >>"$tmp/up.out" &
drain_pid=$!
exec 3<&-
[ "$ready" = 1 ] || { cat "$tmp/up.out" "$tmp/up.err" >&2; fail "the installed hoplite cluster up did not come up"; }
sock0=$(awk '$1 == "node-0" { print $3 }' "$tmp/up.out")
sock1=$(awk '$1 == "node-1" { print $3 }' "$tmp/up.out")
for n in node-0 node-1; do
  pid=$(awk -v n=$n '$1 == n { print $5 }' "$tmp/up.out")
  exe=$(readlink "/proc/$pid/exe")
  [ "$exe" = "$prefix/bin/hoplite-store" ] || fail "$n runs $exe, not the installed hoplite-store"
done

step "putget (pkg-config build): node-0 -> node-1"
LD_PRELOAD=$asan LD_LIBRARY_PATH=$libdir "$tmp/putget-pc" "$sock0" "$sock1" inst-pc 3000000 ||
  fail "putget-pc failed"
LD_PRELOAD=$asan LD_LIBRARY_PATH=$libdir "$tmp/putget-pc" "$sock1" "$sock0" inst-pc-small 100 ||
  fail "putget-pc (small) failed"

# ------------------------------------------------------------------ find_package(hoplite)
step "find_package(hoplite) with CMAKE_PREFIX_PATH=$prefix"
cmake -S "$src/tests/install" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$tmp/consumer.log" 2>&1 || show_fail "$tmp/consumer.log" "configuring the find_package project failed"
found=$(sed -n 's/^hoplite_DIR:PATH=//p' "$tmp/consumer/CMakeCache.txt")
[ "$found" = "$libdir/cmake/hoplite" ] || fail "find_package(hoplite) found $found"
cmake --build "$tmp/consumer" >>"$tmp/consumer.log" 2>&1 ||
  show_fail "$tmp/consumer.log" "building the find_package project failed"
# no LD_LIBRARY_PATH: CMake gives the program the imported library's directory
LD_PRELOAD=$asan "$tmp/consumer/putget" "$sock1" "$sock0" inst-cmake 2000000 ||
  fail "the find_package build of putget failed"

# ------------------------------------------------------------------ pip install ./python
# a copy of python/ without what an earlier build in the checkout left there
pysrc=$tmp/python-src
mkdir "$pysrc"
(cd "$src/python" && tar cf - --exclude=./build --exclude='./*.egg-info' --exclude=__pycache__ .) |
  (cd "$pysrc" && tar xf -) || fail "copying $src/python failed"
step "pip install --no-build-isolation --target $tmp/py $pysrc"
# PIP_NO_INDEX (above): the build must need nothing from an index (offline);
# --no-build-isolation: Debian's setuptools and wheel, not downloaded ones
/usr/bin/python3 -m pip install --no-build-isolation --target "$tmp/py" "$pysrc" \
  >"$tmp/pip.log" 2>&1 || show_fail "$tmp/pip.log" "pip install ./python failed"
# the sdist setuptools makes installs the same files
(cd "$pysrc" && /usr/bin/python3 -B -c \
  'import sys, setuptools.build_meta as b; print(b.build_sdist(sys.argv[1]))' "$tmp/dist") \
  >"$tmp/sdist.log" 2>&1 || show_fail "$tmp/sdist.log" "build_sdist failed"
[ -f "$tmp/dist/hoplite-$version.tar.gz" ] || show_fail "$tmp/sdist.log" "no hoplite-$version.tar.gz"
/usr/bin/python3 -m pip install --no-build-isolation --target "$tmp/py-sdist" \
  "$tmp/dist/hoplite-$version.tar.gz" >"$tmp/pip-sdist.log" 2>&1 ||
  show_fail "$tmp/pip-sdist.log" "pip install of the sdist failed"
diff -r -x __pycache__ "$tmp/py/hoplite" "$tmp/py-sdist/hoplite" || fail "the sdist installs other files"
mkdir "$tmp/elsewhere"
step "import the installed package from $tmp/elsewhere"
(cd "$tmp/elsewhere" &&
  LD_PRELOAD=$asan ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} PYTHONPATH="$tmp/py" \
    /usr/bin/python3 - "$tmp/py" "$libdir" "$prefix" "$version" "$sock0" "$sock1" <<'EOF'
import importlib.metadata
import os
import sys

site, libdir, prefix, version, sock0, sock1 = sys.argv[1:]
import hoplite


def under(path, top):
    return os.path.realpath(path).startswith(os.path.realpath(top) + os.sep)


assert under(hoplite.__file__, site), "imported %s, not the installed copy" % hoplite.__file__
assert hoplite.__version__ == version, hoplite.__version__
assert importlib.metadata.version("hoplite") == version, importlib.metadata.version("hoplite")
# found through pkg-config (PKG_CONFIG_PATH), not HOPLITE_LIB or a build dir
assert under(hoplite.library_path(), libdir), "loaded " + hoplite.library_path()
assert os.path.realpath(hoplite.build_dir()) == os.path.realpath(os.path.join(prefix, "bin")), \
    hoplite.build_dir()
c0, c1 = hoplite.Client(sock0), hoplite.Client(sock1)
data = os.urandom(2 << 20)
c0.put("inst-py", data)
got = c1.get("inst-py", timeout=10)
assert bytes(got) == data, "wrong bytes"
got.release()
c0.close()
c1.close()
print("test_install: python ok (%s, %s)" % (hoplite.__file__, hoplite.library_path()))
EOF
) || fail "the pip-installed package failed"

# docs/operations.md's way: a venv (Debian's pip will not install into the
# system python) that sees Debian's packages, setuptools among them, and
# pip install --no-build-isolation ./python in it
step "python3 -m venv --system-site-packages; pip install --no-build-isolation $pysrc"
/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" >"$tmp/venv.log" 2>&1 ||
  show_fail "$tmp/venv.log" "python3 -m venv failed (python3-venv installed?)"
"$tmp/venv/bin/pip" install --no-build-isolation "$pysrc" >"$tmp/venv.log" 2>&1 ||
  show_fail "$tmp/venv.log" "pip install ./python in a venv failed"
(cd "$tmp/elsewhere" &&
  LD_PRELOAD=$asan ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$tmp/venv/bin/python" -c '
import os, sys, hoplite
venv, libdir, sock0, sock1 = sys.argv[1:]
assert os.path.realpath(hoplite.__file__).startswith(os.path.realpath(venv) + os.sep), hoplite.__file__
assert os.path.dirname(os.path.realpath(hoplite.library_path())) == os.path.realpath(libdir)
data = bytes(range(256)) * 4096
hoplite.Client(sock1).put("inst-venv", data)
assert bytes(hoplite.Client(sock0).get("inst-venv", timeout=10)) == data' \
    "$tmp/venv" "$libdir" "$sock0" "$sock1") ||
  fail "the package installed in a venv failed"

step "ok"
