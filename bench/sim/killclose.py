#!/usr/bin/python3
"""killclose.py - how long a killed hoplite-store's sockets stay open.

    bench/sim/killclose.py [--build build] [--memory 1184M] [--reps 5]
                           [--touch-mib 0] [store args ...]

Starts a hoplite-directory and a hoplite-store on loopback (in a private
0700 directory), optionally puts --touch-mib MiB of objects into the store
(64 MiB each, through the `hoplite` command), opens a TCP connection to
the store's data port, sends the store SIGKILL and times how long the
connection takes to read EOF (the kernel closes a dying process's files
only after it has unmapped its memory) and how long until the process is
reaped. One line per repetition. hpsim's --kill-close is this time.
"""
import argparse
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time


def wait_file(path, proc, what):
    t0 = time.monotonic()
    while not (os.path.exists(path) and open(path).read().strip()):
        if proc.poll() is not None or time.monotonic() - t0 > 30:
            sys.exit(f"killclose: the {what} did not start")
        time.sleep(0.02)
    return open(path).read().strip()


def one(build, work, memory, touch, extra):
    for f in ("dport", "ready"):
        if os.path.exists(os.path.join(work, f)):
            os.unlink(os.path.join(work, f))
    d = subprocess.Popen([f"{build}/hoplite-directory", "--listen", "127.0.0.1:0",
                          "--port-file", f"{work}/dport"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = None
    try:
        port = wait_file(f"{work}/dport", d, "directory")
        s = subprocess.Popen([f"{build}/hoplite-store", "--directory", f"127.0.0.1:{port}",
                              "--socket", f"{work}/s.sock", "--memory", memory,
                              "--ready-file", f"{work}/ready"] + extra,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        dport = int(wait_file(f"{work}/ready", s, "store").split(":")[-1])
        env = dict(os.environ, HOPLITE_SOCKET=f"{work}/s.sock")
        for i in range(touch // 64):
            subprocess.run([f"{build}/hoplite", "put", f"o{i}", "-"], input=os.urandom(1 << 20) * 64,
                           env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c = socket.create_connection(("127.0.0.1", dport))
        time.sleep(0.3)
        t0 = time.monotonic()
        s.send_signal(signal.SIGKILL)
        select.select([c], [], [], 10)
        t1 = time.monotonic()
        s.wait()
        t2 = time.monotonic()
        c.close()
        return (t1 - t0) * 1e3, (t2 - t0) * 1e3
    finally:
        if s and s.poll() is None:
            s.kill()
            s.wait()
        d.kill()
        d.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--memory", default="1184M")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--touch-mib", type=int, default=0)
    a, extra = ap.parse_known_args()
    build = os.path.abspath(a.build)
    with tempfile.TemporaryDirectory(prefix="killclose-") as work:
        os.chmod(work, 0o700)
        for _ in range(a.reps):
            eof, reaped = one(build, work, a.memory, a.touch_mib, extra)
            print(f"memory {a.memory} touched {a.touch_mib} MiB {' '.join(extra)}: "
                  f"kill->EOF {eof:.1f} ms, kill->reaped {reaped:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
