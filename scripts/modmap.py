#!/usr/bin/python3
"""modmap.py - write docs/modules.md, the module map: file -> concern -> callers.

    scripts/modmap.py [--build DIR] [--out FILE] [--check]

For every .c and .h file under include/, src/, store/ and directory/
(subdirectories included), the map gives:
  - its concern: the first sentence of the file's opening comment, after
    "name.c - " (the rules want that comment to name the file's one concern);
  - its length in lines;
  - who calls it: the other files that use a function or variable it
    defines, read from the compiled objects of a build (nm: the global
    symbols each object defines and the ones it leaves undefined), so the
    map follows the code whatever the names are. A header's users are the
    files that #include it.
A .c and a .h with the same name in the same directory are one module (one
row). Nothing is guessed: a file with no opening comment says so, and
without a build (--build, default $HPL_BUILD_DIR or build/) the call
columns are left out, not invented.

--check exits 1 if the file on disk differs from what would be written (for
CI or a pre-commit look). Uses the standard library and binutils' nm only.
"""
import argparse
import collections
import os
import re
import subprocess
import sys

ROOTS = ("include", "src", "store", "directory")
TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sources():
    """Every .c/.h under ROOTS, as paths relative to the top, sorted."""
    out = []
    for root in ROOTS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(TOP, root)):
            dirnames.sort()
            for name in filenames:
                if name.endswith((".c", ".h")):
                    out.append(os.path.relpath(os.path.join(dirpath, name), TOP))
    return sorted(out)


def opening_comment(text):
    """The first sentence of the comment that opens `text`, without its
    "file.c - " lead; None if the file does not open with a comment."""
    m = re.match(r"\s*/\*(.*?)\*/", text, re.S)
    if not m:
        return None
    lines = []
    for line in m.group(1).split("\n"):
        line = re.sub(r"^\s*\*?\s?", "", line).rstrip()
        if not line and lines:
            break  # the first paragraph only
        if line:
            lines.append(line)
    para = " ".join(lines)
    para = re.sub(r"^[\w./-]+\.[ch]\s*[-:]+\s*", "", para)  # "name.c - "
    m = re.match(r"(.+?\.)(\s|$)", para)
    first = (m.group(1) if m else para).rstrip(".")
    if len(first) > 240:
        first = first[:237].rsplit(" ", 1)[0] + " ..."
    return first


def includes(text):
    return re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M)


def objects(build):
    """{source path: object path} for the objects of `build` compiled from
    files under ROOTS (the first object of each source)."""
    found = {}
    cmf = os.path.join(build, "CMakeFiles")
    if not os.path.isdir(cmf):
        return found
    for dirpath, _, filenames in os.walk(cmf):
        for name in filenames:
            if not name.endswith((".c.o", ".cc.o")):
                continue
            path = os.path.join(dirpath, name)
            rel = path.split(".dir" + os.sep, 1)
            if len(rel) != 2:
                continue
            src = rel[1][: -len(".o")]
            if src.split(os.sep)[0] in ROOTS and os.path.exists(os.path.join(TOP, src)):
                found.setdefault(src, path)
    return found


def nm(path, *flags):
    out = subprocess.run(["nm", *flags, path], check=True, capture_output=True, text=True).stdout
    syms = set()
    for line in out.splitlines():
        parts = line.split()
        if parts:
            syms.add(parts[-1])
    return syms


def module_of(path):
    """A module is a directory and a file stem: store/objects.c and
    store/objects.h are one."""
    return os.path.splitext(path)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("HPL_BUILD_DIR", os.path.join(TOP, "build")))
    ap.add_argument("--out", default=os.path.join(TOP, "docs", "modules.md"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    files = sources()
    text = {f: open(os.path.join(TOP, f), encoding="utf-8", errors="replace").read() for f in files}
    by_base = collections.defaultdict(list)  # "objects.h" -> paths
    for f in files:
        by_base[os.path.basename(f)].append(f)

    def resolve(inc, frm):
        """The file an #include "inc" in `frm` names, or None."""
        cand = os.path.normpath(os.path.join(os.path.dirname(frm), inc))
        if cand in text:
            return cand
        for f in files:
            if f.endswith(os.sep + inc) or f == inc:
                return f
        same = by_base.get(os.path.basename(inc), [])
        return same[0] if len(same) == 1 else None

    included_by = collections.defaultdict(set)
    for f in files:
        for inc in includes(text[f]):
            target = resolve(inc, f)
            if target and target != f:
                included_by[target].add(f)

    objs = objects(args.build)
    defined, undefined = {}, {}
    for src, obj in objs.items():
        defined[src] = nm(obj, "--defined-only", "-g")
        undefined[src] = nm(obj, "-u")
    owner = {}
    for src, syms in defined.items():
        for s in syms:
            owner.setdefault(s, src)
    calls = collections.defaultdict(set)  # module -> modules it uses
    called_by = collections.defaultdict(set)
    for src, syms in undefined.items():
        for s in syms:
            o = owner.get(s)
            if o and module_of(o) != module_of(src):
                calls[module_of(src)].add(module_of(o))
                called_by[module_of(o)].add(module_of(src))

    modules = collections.OrderedDict()
    for f in files:
        modules.setdefault(module_of(f), []).append(f)

    have_calls = bool(objs)
    out = []
    w = out.append
    w("# Module map")
    w("")
    w("Generated by `scripts/modmap.py` from the tree%s; do not edit by hand. Regenerate "
      "after a build with" % ("" if have_calls else " (no build found: no call columns)"))
    w("")
    w("```sh")
    w("cmake --build build -j2 && /usr/bin/python3 scripts/modmap.py   # writes docs/modules.md")
    w("```")
    w("")
    w("One row per module (a `.c` and its `.h`). *Concern* is the first sentence of the "
      "module's opening comment (the header's when there is one). *Called by* lists the "
      "modules whose compiled code uses a function or variable the module defines (from "
      "`nm` on a build's objects), or, for a module that is only a header, the modules that "
      "include it; *calls* lists the modules it uses the same way, grouped by directory. "
      "Tests, benchmarks and "
      "fuzz targets are left out. How the pieces work together is in "
      "[design.md](design.md).")
    for root_dir in sorted({os.path.dirname(m) for m in modules}, key=lambda d: (d.split(os.sep)[0] != "include", d)):
        w("")
        w("## %s/" % root_dir)
        w("")
        if have_calls:
            w("| module | lines | concern | called by | calls |")
            w("|---|---|---|---|---|")
        else:
            w("| module | lines | concern | included by |")
            w("|---|---|---|---|")
        for m, fs in modules.items():
            if os.path.dirname(m) != root_dir:
                continue
            head = [f for f in fs if f.endswith(".h")]
            concern = None
            for f in head + [f for f in fs if f.endswith(".c")]:
                concern = opening_comment(text[f])
                if concern:
                    break
            concern = (concern or "*(no opening comment)*").replace("|", "\\|")
            names = ", ".join("`%s`" % os.path.basename(f) for f in fs)
            lines = " + ".join(str(text[f].count("\n")) for f in fs)

            def short(ms):
                """Modules grouped by directory: `store/`: get, put; `src/`: log."""
                groups = collections.defaultdict(list)
                for x in ms:
                    groups[os.path.dirname(x)].append(os.path.basename(x))
                return "; ".join("`%s/`: %s" % (d, ", ".join(sorted(groups[d])))
                                 for d in sorted(groups)) or "-"

            users = set(called_by.get(m, ()))
            if not any(f.endswith(".c") for f in fs) or not have_calls:
                for h in head:
                    users |= {module_of(x) for x in included_by.get(h, ())}
                users.discard(m)
            if have_calls:
                w("| %s | %s | %s | %s | %s |" % (names, lines, concern, short(users),
                                                   short(calls.get(m, ()))))
            else:
                w("| %s | %s | %s | %s |" % (names, lines, concern, short(users)))
    result = "\n".join(out) + "\n"

    if args.check:
        try:
            same = open(args.out, encoding="utf-8").read() == result
        except FileNotFoundError:
            same = False
        if not same:
            print("modmap: %s is out of date (run scripts/modmap.py)" % args.out, file=sys.stderr)
            return 1
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(result)
    print("modmap: wrote %s (%d modules%s)" % (os.path.relpath(args.out, TOP), len(modules),
                                                "" if have_calls else ", no build: no call columns"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
