#!/usr/bin/env python3
"""footprint.py - how much memory one small request touches in the client.

    bench/footprint.py [--build build] [--kind get|stat|put] [-n 40] [--size 1024]
                       [--skip 5] [--top 25]

Runs build/bench/bench_footprint under valgrind's lackey tool (every load,
store and instruction fetch traced) and prints, per request (the mean over
all but the first --skip requests): instructions, distinct 64-byte cache
lines of code and of data, distinct 4 KiB pages of each, then for the last
request the lines by library and the functions that touch the most lines
(code lines of the function, data lines its instructions touch).

Why lines: a process woken for one request (a task runtime's worker after
a sleep) finds little of its code and data in the caches; each distinct
line is then a miss, and on this VM the misses, not the instructions, are
most of a woken get's user time (bench/results/small-objects-issue42i-2026-11-30.md).
Needs valgrind; takes about a minute.
"""
import argparse
import bisect
import collections
import os
import subprocess
import sys
import tempfile


def symbols(path, cache={}):
    """(sorted start offsets, names) of the functions in an ELF file."""
    if path in cache:
        return cache[path]
    out = []
    for dyn in ([], ['-D']):
        try:
            text = subprocess.run(['nm', '-n', '--defined-only'] + dyn + [path],
                                  capture_output=True, text=True).stdout
        except OSError:
            text = ''
        for line in text.splitlines():
            p = line.split()
            if len(p) == 3 and p[1] in 'tTwWiI':
                out.append((int(p[0], 16), p[2]))
        if out:
            break
    out.sort()
    cache[path] = ([a for a, _ in out], [n for _, n in out])
    return cache[path]


class Maps:
    def __init__(self, lines):
        self.m = []
        for l in lines:
            p = l.split()
            a, b = (int(x, 16) for x in p[0].split('-'))
            off = int(p[2], 16)
            path = p[5] if len(p) > 5 else ''
            self.m.append((a, b, off, path))
        self.m.sort()
        self.starts = [x[0] for x in self.m]
        self.base = {}
        for a, b, off, path in self.m:
            if path and path not in self.base:
                self.base[path] = a - off

    def lib(self, addr):
        i = bisect.bisect_right(self.starts, addr) - 1
        if i >= 0 and self.m[i][0] <= addr < self.m[i][1]:
            path = self.m[i][3]
            return os.path.basename(path) if path else '[anon]', path
        return '?', ''

    def func(self, addr, cache={}):
        if addr in cache:
            return cache[addr]
        name, path = self.lib(addr)
        f = name
        if path.startswith('/') and os.path.exists(path):
            st, names = symbols(path)
            i = bisect.bisect_right(st, addr - self.base[path]) - 1
            f = name.split('.so')[0] + ':' + (names[i] if i >= 0 else '?')
        cache[addr] = f
        return f


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build')
    ap.add_argument('--kind', default='get', choices=['get', 'stat', 'put'])
    ap.add_argument('-n', type=int, default=40)
    ap.add_argument('--size', type=int, default=1024)
    ap.add_argument('--skip', type=int, default=5)
    ap.add_argument('--top', type=int, default=25)
    a = ap.parse_args()
    if a.n <= a.skip:
        sys.exit('footprint.py: -n must exceed --skip')
    exe = os.path.join(a.build, 'bench', 'bench_footprint')
    env = dict(os.environ, HOPLITE_BIN_DIR=os.path.abspath(a.build))
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, 'lackey.txt')
        r = subprocess.run(['valgrind', '--tool=lackey', '--trace-mem=yes', '--log-file=' + log,
                            exe, a.kind, str(a.n), str(a.size)], env=env, capture_output=True,
                           text=True)
        if r.returncode != 0:
            sys.exit('footprint.py: bench_footprint failed:\n' + r.stderr)
        mark = None
        maplines = []
        for l in r.stdout.splitlines():
            if l.startswith('MARK '):
                mark = int(l.split()[1], 16)
            elif l.startswith('MAP '):
                maplines.append(l[4:])
        if mark is None:
            sys.exit('footprint.py: no MARK line from bench_footprint')
        maps = Maps(maplines)
        reqs = []  # per request: code lines, data lines, instructions, {func: [code, data, ins]}
        cur = None
        marks = 0
        fn = None
        with open(log) as f:
            for l in f:
                if l.startswith('=='):
                    continue
                kind = l[:2]
                rest = l[2:].strip()
                if not rest:
                    continue
                try:
                    addr = int(rest.split(',')[0], 16)
                except ValueError:
                    continue
                if kind == ' S' and addr == mark:
                    marks += 1
                    if marks % 2:
                        cur = (set(), set(), [0], collections.defaultdict(lambda: [set(), set(), 0]))
                    elif cur is not None:
                        reqs.append(cur)
                        cur = None
                    continue
                if cur is None:
                    continue
                line = addr >> 6
                if kind[0] == 'I':
                    cur[0].add(line)
                    cur[2][0] += 1
                    fn = maps.func(addr)
                    e = cur[3][fn]
                    e[0].add(line)
                    e[2] += 1
                else:
                    cur[1].add(line)
                    if fn:
                        cur[3][fn][1].add(line)
    use = reqs[a.skip:]
    if not use:
        sys.exit('footprint.py: no requests traced')
    k = len(use)
    ins = sum(x[2][0] for x in use) / k
    cl = sum(len(x[0]) for x in use) / k
    dl = sum(len(x[1]) for x in use) / k
    cp = sum(len({l >> 6 for l in x[0]}) for x in use) / k
    dp = sum(len({l >> 6 for l in x[1]}) for x in use) / k
    print(f'{a.kind} of {a.size} B, mean of {k} requests: {ins:.0f} instructions; '
          f'{cl:.0f} code lines + {dl:.0f} data lines = {cl + dl:.0f} cache lines; '
          f'{cp:.0f} code pages + {dp:.0f} data pages')
    last = use[-1]
    bylib = collections.Counter()
    for line in last[0]:
        bylib[(maps.lib(line << 6)[0], 'code')] += 1
    for line in last[1]:
        bylib[(maps.lib(line << 6)[0], 'data')] += 1
    print('\nthe last request, lines by library:')
    for (lib, what), v in sorted(bylib.items(), key=lambda x: -x[1]):
        print(f'  {v:5d} {what} {lib}')
    print(f'\nthe last request, the {a.top} functions touching the most lines '
          '(instructions, code lines, data lines):')
    rows = sorted(last[3].items(), key=lambda x: -(len(x[1][0]) + len(x[1][1])))
    for name, (c, d, n) in rows[:a.top]:
        print(f'  {n:6d} {len(c):5d} {len(d):5d}  {name}')


if __name__ == '__main__':
    main()
