"""--log-format json on real servers: a directory and two stores started
with it, a client that puts and gets (a large object, so one store pulls
from the other and both log the object's id at debug level), then the
servers stopped; every line of every log must be one JSON object with the
documented fields, and the id, which holds a quote, a backslash, a
non-ASCII character and a byte that is not UTF-8, must read back escaped
as documented (src/common/log.h)."""
import datetime
import json
import os
import re
import shutil
import signal
import tempfile

import hoplite

from conftest import start_cluster

TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
KEYS = {"time", "level", "service", "node", "pid", "event"}


def read_json_log(path):
    """Every line of the log as a dict; fails on a line that is not one
    JSON object (with the line in the message)."""
    out = []
    with open(path, "rb") as f:
        for raw in f:
            line = raw.decode("utf-8")  # every line must be valid UTF-8
            try:
                d = json.loads(line)
            except ValueError as e:
                raise AssertionError("%s: not JSON (%s): %r" % (path, e, line))
            assert isinstance(d, dict), line
            out.append(d)
    return out


def test_json_logs():
    workdir = tempfile.mkdtemp(prefix="hpl-logjson-")  # ours: the logs outlive stop()
    try:
        lc = start_cluster(2, memory="64M", log_level="debug", workdir=workdir,
                           dir_args=["--log-format", "json"],
                           store_args=["--grace-ms", "1000", "--log-format", "json"])
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    t0 = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=5)
    obj = b'log"q\\b\xc3\xa9\xff-1'  # quote, backslash, e-acute, a byte that is not UTF-8
    seen = obj.decode("utf-8", "replace")  # what the log must show: \xff -> U+FFFD
    data = os.urandom(256 << 10)  # above the inline limit: stored and pulled
    try:
        pids = {"directory": lc.dir_proc.pid, "node-0": lc.store_pid(0),
                "node-1": lc.store_pid(1)}
        with hoplite.Client(lc.socket(0), timeout=30.0) as c0, \
                hoplite.Client(lc.socket(1), timeout=30.0) as c1:
            c0.put(obj, data)
            assert bytes(c1.get(obj)) == data
    finally:
        lc.stop()  # SIGTERM: the stores, then the directory
    t1 = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=5)
    logs = {"directory": lc.dir_log, "node-0": lc.store_log(0), "node-1": lc.store_log(1)}
    try:
        for node, path in logs.items():
            lines = read_json_log(path)
            assert len(lines) >= 3, (path, lines)
            for d in lines:
                assert KEYS <= set(d), d
                assert TIME_RE.match(d["time"]), d
                t = datetime.datetime.strptime(d["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
                    tzinfo=datetime.timezone.utc)
                assert t0 <= t <= t1, d
                assert d["level"] in ("error", "warn", "info", "debug"), d
                assert d["node"] == node, d
                assert d["service"] == ("directory" if node == "directory" else "store"), d
                assert d["pid"] == pids[node], d
                assert isinstance(d["event"], str) and d["event"], d
            events = [d["event"] for d in lines]
            # start and stop are there
            assert events[-1] == "stopped", events[-5:]
            if node == "directory":
                assert any(e.startswith("listening on 127.0.0.1:") for e in events), events
            else:
                assert any(e.startswith("store %s (node " % node) and " up: " in e
                           for e in events), events
            # debug lines are there (--log-level debug still applies)
            assert any(d["level"] == "debug" for d in lines), path
        # the id was escaped and reads back: node-1 pulled it, node-0 served it
        ev1 = [d["event"] for d in read_json_log(logs["node-1"])]
        ev0 = [d["event"] for d in read_json_log(logs["node-0"])]
        assert any(("'%s'" % seen) in e for e in ev1), ev1
        assert any(("'%s'" % seen) in e for e in ev0), ev0
        with open(logs["node-1"], "rb") as f:
            raw = f.read()
        assert b'log\\"q\\\\b\xc3\xa9\\ufffd-1' in raw  # the escapes themselves
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def test_text_logs_unchanged():
    """Without --log-format the lines are the text ones: not JSON."""
    lc = start_cluster(1, memory="32M")
    try:
        lc.kill(0, signal.SIGTERM)
        with open(lc.store_log(0)) as f:
            lines = f.read().splitlines()
        assert lines, lc.store_log(0)
        pat = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} store:node-0\[%d\] (INFO |WARN |ERROR|DEBUG) "
                         % lc.stores[0].pid)
        for line in lines:
            assert pat.match(line), line
    finally:
        lc.stop()
