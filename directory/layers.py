#!/usr/bin/env python3
"""layers.py - the call graph between the directory's modules, and a check
that it follows the bottom-up module list at the top of server.h.

    directory/layers.py BUILD_DIR [-v]

Reads the object files of the hpldir library (nm): module A calls module B
when A.o refers to a symbol B.o defines (a call, or a function's address
taken: server.c's dispatch table and subscriptions). Calls through a
callback a module was given (the object table's and the node module's
events) are, as intended, no edge. Prints each module's callees (-v: and
the symbols), the cycles, and the calls that go to a module listed later
in server.h than the caller. Exit status 1 if there is a cycle or such a
call."""
import glob
import os
import re
import subprocess
import sys
from collections import defaultdict


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    build, verbose = sys.argv[1], "-v" in sys.argv
    here = os.path.dirname(os.path.abspath(__file__))
    objs = sorted(glob.glob(os.path.join(build, "CMakeFiles/hpldir.dir/directory/*.c.o")))
    if not objs:
        sys.exit(f"layers.py: no directory objects under {build}")
    defs, refs = {}, defaultdict(set)
    for o in objs:
        mod = os.path.basename(o)[: -len(".c.o")]
        out = subprocess.run(["nm", o], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in "TDRB":
                defs[p[2]] = mod
            elif len(p) == 2 and p[0] == "U":
                refs[mod].add(p[1])
    edges = defaultdict(lambda: defaultdict(list))
    for mod, syms in refs.items():
        for sym in syms:
            d = defs.get(sym)
            if d and d != mod:
                edges[mod][d].append(sym)
    mods = sorted({os.path.basename(o)[: -len(".c.o")] for o in objs})
    for m in mods:
        print(f"{m:15s} -> {' '.join(sorted(edges[m]))}")
        if verbose:
            for d in sorted(edges[m]):
                print(f"{'':18s}{d}: {' '.join(sorted(edges[m][d]))}")
    # cycles: strongly connected components of more than one module
    index, low, stack, on, comps = {}, {}, [], set(), []

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
                comps.append(sorted(comp))

    for m in mods:
        if m not in index:
            visit(m)
    print("cycles:", comps or "none")
    # the order of server.h's module list
    text = open(os.path.join(here, "server.h")).read()
    block = text[text.index(" * Modules, bottom-up") :]
    block = block[: block.index("*/")]
    order = re.findall(r"^ \*   (\w+)\.c", block, re.M)
    pos = {m: i for i, m in enumerate(order)}
    up = [f"{m} -> {d}" for m in mods for d in edges[m] if pos.get(d, -1) >= pos.get(m, -1)]
    unlisted = [m for m in mods if m not in pos]
    print("calls to a module listed later in server.h:", up or "none")
    print("modules missing from server.h's list:", unlisted or "none")
    return 1 if comps or up or unlisted else 0


if __name__ == "__main__":
    sys.exit(main())
