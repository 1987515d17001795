#!/usr/bin/env python3
"""layers.py - check that hoplite's code is layered as its module maps say.

    scripts/layers.py BUILD_DIR [-v]

Four checks; the exit status is 1 if any fails (tests/CMakeLists.txt runs it
as test_layers):

1. store/ and directory/: the module list at the top of each server.h is the
   order modules may call in. Each line ' *   name.c  concern' names a
   module; files named inside its description ('(objidx.c: the indexes)')
   belong to it. From nm over the build's objects (read as modmap.py reads
   them for docs/modules.md), module A calls module B
   when A's objects refer to a symbol B's objects define (a call, or a
   function's address taken). A call to a module listed after the caller,
   a cycle, or an object file in no module fails the check. Calls through a
   callback a module was given are, as intended, no edge.
2. src/: a folder includes only headers of the folders below it
   (common <- client, server, cli; client, server and cli not each other).
3. No .c file declares a function at file scope that it does not define
   (another module's function must come from that module's header).
4. Every .c and .h file under src/, store/ and directory/ opens with a
   comment 'name.c - its concern'.

-v prints each module's callees with the symbols."""
import glob
import os
import re
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import modmap  # noqa: E402  (the same object and nm readers as docs/modules.md)

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVERS = ("store", "directory")
FOLDERS = {"common": {"common"}, "client": {"common", "client"},
           "server": {"common", "server"}, "cli": {"common", "cli"}}


def module_list(server):
    """[(module, [files])] in server.h's bottom-up order."""
    text = open(os.path.join(TOP, server, "server.h")).read()
    head = text[: text.index("*/")]
    mods, cur = [], None
    for line in head.splitlines():
        m = re.match(r"^ \*   (\w+)\.c\s", line)
        if m:
            cur = (m.group(1), [m.group(1)])
            mods.append(cur)
        if cur:
            cur[1].extend(re.findall(r"\b(\w+)\.c:", line))
    return mods


def sccs(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def check_server(build, server, verbose):
    mods = module_list(server)
    order = {m: i for i, (m, _) in enumerate(mods)}
    owner = {f: m for m, files in mods for f in files}
    defs, refs, bad = {}, defaultdict(set), []
    objs = {src: obj for src, obj in modmap.objects(build).items()
            if os.path.dirname(src) == server and src.endswith(".c")}
    if not objs:
        return [f"{server}: no objects under {build} (build first)"]
    for src, obj in sorted(objs.items()):
        f = os.path.basename(src)[: -len(".c")]
        mod = owner.get(f)
        if mod is None:
            bad.append(f"{src} is in no module of {server}/server.h's list")
            continue
        for sym in modmap.nm(obj, "--defined-only", "-g"):
            defs[sym] = mod
        refs[mod] |= modmap.nm(obj, "-u")
    edges = defaultdict(lambda: defaultdict(set))
    for mod, syms in refs.items():
        for s in syms:
            d = defs.get(s)
            if d and d != mod:
                edges[mod][d].add(s)
    print(f"{server}/ (bottom-up, as server.h lists them):")
    for m, files in mods:
        if m not in refs and m not in defs.values():
            continue
        extra = f" ({', '.join(files[1:])})" if len(files) > 1 else ""
        print(f"  {m:14s}-> {' '.join(sorted(edges[m], key=order.get))}{extra}")
        if verbose:
            for d in sorted(edges[m], key=order.get):
                print(f"  {'':16s}{d}: {' '.join(sorted(edges[m][d]))}")
    for m in edges:
        for d in edges[m]:
            if order[d] >= order[m]:
                bad.append(f"{server}: {m} calls {d}, listed after it "
                           f"({', '.join(sorted(edges[m][d]))})")
    for c in sccs(list(edges), edges):
        bad.append(f"{server}: cycle {' '.join(c)}")
    return bad


def check_src():
    bad = []
    where = {}
    for folder in FOLDERS:
        for h in glob.glob(os.path.join(TOP, "src", folder, "*.h")):
            where[os.path.basename(h)] = folder
    for folder, allowed in FOLDERS.items():
        for f in sorted(glob.glob(os.path.join(TOP, "src", folder, "*.[ch]"))):
            for inc in re.findall(r'^#include "([\w.]+)"', open(f).read(), re.M):
                w = where.get(inc)
                if w and w not in allowed:
                    bad.append(f"src/{folder}/{os.path.basename(f)} includes {inc} (src/{w})")
    print("src/: " + ("folders include only the folders below them" if not bad else "see below"))
    return bad


def c_files():
    for d in ("src", "store", "directory"):
        yield from sorted(glob.glob(os.path.join(TOP, d, "**", "*.[ch]"), recursive=True))


def strip_comments(text):
    """The text with comments and string literals blanked (lines kept)."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


def check_local_decls():
    bad = []
    for f in c_files():
        if not f.endswith(".c"):
            continue
        text = strip_comments(open(f).read())
        # file-scope statements that start at column 0
        stmt = re.compile(r"^(?!static\b|typedef\b|struct\b|enum\b|union\b|return\b)"
                          r"[A-Za-z_][\w \t\*]*?[ \t\*](\w+)\s*"
                          r"\((?:[^;{}()]|\([^()]*\))*\)\s*;", re.M)
        for m in stmt.finditer(text):
            name = m.group(1)
            if re.search(r"\b" + re.escape(name) + r"\s*\([^;]*\)\s*\{", text):
                continue  # a prototype of a function defined here
            rel = os.path.relpath(f, TOP)
            bad.append(f"{rel}: declares {name}() locally (include its module's header)")
    return bad


def check_openings():
    bad = []
    for f in c_files():
        b = os.path.basename(f)
        head = open(f).read(400)
        if not re.match(r"/\*\s*\n?\s*\*?\s*" + re.escape(b) + r" - \S", head):
            bad.append(f"{os.path.relpath(f, TOP)}: no opening comment '{b} - concern'")
    return bad


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build, verbose = sys.argv[1], "-v" in sys.argv
    bad = []
    for server in SERVERS:
        bad += check_server(build, server, verbose)
    bad += check_src()
    bad += check_local_decls()
    bad += check_openings()
    for b in bad:
        print("FAIL:", b)
    print("layers: " + ("ok" if not bad else f"{len(bad)} problem(s)"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
