"""The `hoplite` CLI's status command and progress bars, run as a user runs
them: `hoplite status` (table and --json, --watch), and `hoplite put/get`
with stderr on a pseudo-terminal (a bar with percentage, rate and ETA that
ends at 100%) or not (no bar, the one summary line as before)."""
import json
import os
import re
import select
import signal
import subprocess
import threading
import time

import pytest

import hoplite
from hoplite import _lib

from conftest import start_cluster

MB = 1 << 20


def cli():
    path = os.path.join(_lib.build_dir(), "hoplite")
    if not os.access(path, os.X_OK):
        pytest.skip("no hoplite CLI in %s" % _lib.build_dir())
    return path


@pytest.fixture(scope="module")
def lc():
    # streams of objects under slow/ are paced to 8 MB/s: a get of one takes long
    # enough to be seen in flight
    c = start_cluster(2, memory="128M", dir_args=["--heartbeat-ms", "100"],
                      store_args=["--grace-ms", "1000", "--faults", "slow_send=8M,prefix=slow/"])
    try:
        yield c
    finally:
        c.stop()


def run(lc, node, *args, timeout=30):
    """The CLI against store `node`, stdout and stderr pipes: (rc, out, err)."""
    p = subprocess.run([cli(), "-s", lc.socket(node)] + list(args), capture_output=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def run_tty(lc, node, *args, timeout=30):
    """The CLI with stderr on a pseudo-terminal (stdout a pipe): (rc, out,
    what the terminal got)."""
    master, slave = os.openpty()
    p = subprocess.Popen([cli(), "-s", lc.socket(node)] + list(args), stdout=subprocess.PIPE,
                         stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    tty = b""
    out = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
    reader.start()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([master], [], [], 0.5)
            if not r:
                if p.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            tty += chunk
        rc = p.wait(timeout=max(1, deadline - time.monotonic()))
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    reader.join()
    return rc, out[0], tty


def frames(tty):
    """The states the progress bar was drawn in: the text between carriage
    returns, terminal escapes removed."""
    text = re.sub(rb"\x1b\[[0-9;]*[A-Za-z]", b"", tty).decode()
    return [f.strip() for f in re.split(r"[\r\n]+", text) if f.strip()]


def test_status_table_and_json(lc, tmp_path):
    with hoplite.Client(lc.socket(0)) as c0, hoplite.Client(lc.socket(1)) as c1:
        c0.put("st/a", os.urandom(2 * MB))
        c0.put("st/b", b"x" * 100)
        c1.put("st/c", os.urandom(3 * MB))
        # heartbeats every 100 ms: wait for the counts to arrive
        deadline = time.monotonic() + 5
        while True:
            rc, out, err = run(lc, 1, "status", "--json")
            assert rc == 0, err
            assert out.endswith(b"\n") and out.count(b"\n") == 1  # one object, one line
            d = json.loads(out)
            objs = {n["name"]: n["objects"] for n in d["nodes"]}
            if objs == {"node-0": 2, "node-1": 1} or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert objs == {"node-0": 2, "node-1": 1}
        assert d["objects"] == 3 and d["inline_bytes"] == 100
        assert d["nodes_total"] == 2 and d["heartbeat_ms"] == 100
        assert re.fullmatch(r"[0-9a-f]{16}", d["instance"])
        for n in d["nodes"]:
            assert n["state"] == "alive"
            assert n["pool_capacity"] == 128 * MB
            assert 0 < n["pool_used"] <= n["pool_capacity"]
            assert n["heartbeat_age_ms"] < 1000
            assert n["addr"] == "127.0.0.1" and n["data_port"] > 0
        assert d["transfers"] == [] and d["reduces"] == []
        # the binding: the same snapshot as a dict, and how much of an object is here
        st = c0.status()
        assert {n["name"]: n["objects"] for n in st["nodes"]} == objs
        assert st["instance"] == d["instance"] and st["uptime_ms"] >= d["uptime_ms"] - 1000
        assert c0.held_bytes("st/a") == (2 * MB, 2 * MB)
        assert c1.held_bytes("st/a") == (0, 0)
        # the table
        rc, out, err = run(lc, 0, "status")
        assert rc == 0, err
        text = out.decode()
        assert re.search(r"^node-0\s+alive\s", text, re.M), text
        assert re.search(r"^node-1\s+alive\s", text, re.M), text
        assert "TRANSFERS IN FLIGHT: 0" in text and "REDUCES RUNNING: 0" in text
        assert "2 nodes" in text and "3 objects" in text
        # --watch with --json: one object per refresh until interrupted
        p = subprocess.Popen([cli(), "-s", lc.socket(0), "status", "--watch", "0.2", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(1.1)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=10)
        snaps = [json.loads(line) for line in out.decode().splitlines()]
        assert 3 <= len(snaps) <= 8, len(snaps)  # every 0.2 s: sleeps between, no busy loop
        assert all(b["uptime_ms"] > a["uptime_ms"] for a, b in zip(snaps, snaps[1:]))
        # bad --watch values are refused
        rc, _, err = run(lc, 0, "status", "--watch=0")
        assert rc != 0 and b"--watch" in err


def test_put_progress(lc, tmp_path):
    f = tmp_path / "big"
    data = os.urandom(24 * MB)
    f.write_bytes(data)
    # not a terminal: no bar, the summary line only
    rc, out, err = run(lc, 0, "put", "pp/quiet", str(f))
    assert rc == 0
    assert err == b"put pp/quiet: %d bytes\n" % len(data)
    # a terminal: the bar, ending at 100% with the size
    rc, out, tty = run_tty(lc, 0, "put", "pp/tty", str(f))
    assert rc == 0, tty
    fr = frames(tty)
    bars = [x for x in fr if x.startswith("put pp/tty [")]
    assert bars, fr
    assert re.search(r"\] 100%\s+24\.0 MiB / 24\.0 MiB\s+[0-9.]+ MB/s\s+in \d+s$", bars[-1]), bars
    assert fr[-1] == "put pp/tty: %d bytes" % len(data)
    # a small object shows no bar even on a terminal
    small = tmp_path / "small"
    small.write_bytes(b"tiny")
    rc, out, tty = run_tty(lc, 0, "put", "pp/small", str(small))
    assert rc == 0 and frames(tty) == ["put pp/small: 4 bytes"]
    with hoplite.Client(lc.socket(1)) as c1:
        assert bytes(c1.get("pp/tty")) == data


def test_get_progress_and_transfer_in_status(lc, tmp_path):
    size = 12 * MB  # paced to 8 MB/s: about 1.5 s
    with hoplite.Client(lc.socket(0)) as c0:
        data = os.urandom(size)
        c0.put("slow/g1", data)
        c0.put("slow/g2", data)
    # not a terminal: no bar
    rc, out, err = run(lc, 1, "get", "slow/g1", str(tmp_path / "o1"))
    assert rc == 0
    assert re.fullmatch(rb"get slow/g1: %d bytes in [0-9.]+ ms\n" % size, err), err
    assert (tmp_path / "o1").read_bytes() == data
    # a terminal: the bar moves through the transfer and ends at 100%; while
    # it runs, `hoplite status` shows the transfer from node-0 to node-1
    seen = {}

    def watch():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "table" not in seen:
            rc, out, _ = run(lc, 0, "status")
            m = re.search(r"^slow/g2\s+node-0\s+node-1\s+([0-9.]+ \w+) / 12\.0 MiB\s+(\d+)%\s+"
                          r"([0-9.]+) MB/s", out.decode(), re.M)
            if m and 0 < int(m.group(2)) < 100:
                seen["table"] = m.groups()
            time.sleep(0.1)

    w = threading.Thread(target=watch)
    w.start()
    rc, out, tty = run_tty(lc, 1, "get", "slow/g2", str(tmp_path / "o2"))
    w.join()
    assert rc == 0, tty
    assert (tmp_path / "o2").read_bytes() == data
    fr = frames(tty)
    bars = [x for x in fr if x.startswith("get slow/g2 [")]
    pct = [int(re.search(r"\]\s+(\d+)%", b).group(1)) for b in bars]
    assert any(0 < p < 100 for p in pct), fr  # drawn midway, with a rate and an ETA
    mid = [b for b, p in zip(bars, pct) if 0 < p < 100]
    assert re.search(r"[0-9.]+ MB/s\s+ETA \d+s$", mid[0]), mid
    assert pct == sorted(pct) and pct[-1] == 100, fr
    assert re.search(r"100%\s+12\.0 MiB / 12\.0 MiB", bars[-1])
    assert re.fullmatch(r"get slow/g2: %d bytes in [0-9.]+ ms" % size, fr[-1]), fr
    assert "table" in seen, "the status table never showed slow/g2 in flight"
    # a get that fails on the terminal path says why and exits 1
    rc, out, tty = run_tty(lc, 1, "-t", "300", "get", "slow/none", str(tmp_path / "o3"))
    assert rc == 1 and b"get: timed out" in tty, tty
    rate = float(seen["table"][2])
    assert 0 < rate < 24, seen  # paced at 8 MB/s
