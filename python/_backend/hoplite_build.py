"""hoplite_build - the PEP 517 build backend of python/ (standard library only).

pip builds a project in an isolated environment into which it first installs
the backend named by pyproject.toml's [build-system] `requires`. This backend
lives in the tree (`backend-path = ["_backend"]`) and `requires` is empty, so
`pip install ./python` needs nothing from an index and works offline.

What it builds:
  wheel   hoplite-<version>-py3-none-any.whl: the package as it is in
          hoplite/ (its .py files), and hoplite-<version>.dist-info with
          METADATA (from pyproject.toml's [project] table and README.md),
          WHEEL and RECORD (sha256 and size of every file).
  sdist   hoplite-<version>.tar.gz: pyproject.toml, README.md, _backend/ and
          hoplite/, with PKG-INFO.
There is no editable build (PEP 660); from a source checkout put python/ on
PYTHONPATH instead.

Archives are reproducible: every entry gets the time SOURCE_DATE_EPOCH names
(else 1980-01-01), fixed modes and owners, in sorted order.

pyproject.toml is read with tomllib (Python >= 3.11); older Pythons use
read_toml() below, which reads the subset of TOML the file is written in.
"""
import base64
import csv
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import time
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "hoplite"
_GENERATOR = "hoplite_build"


# ---------------------------------------------------------------- pyproject.toml

def _strip_comment(line):
    """`line` without a trailing # comment (a # inside a string is kept)."""
    in_str = False
    i = 0
    while i < len(line):
        ch = line[i]
        if in_str and ch == "\\":
            i += 2
            continue
        if ch == '"':
            in_str = not in_str
        elif ch == "#" and not in_str:
            return line[:i]
        i += 1
    return line


def _value(text, pos):
    """Parse one TOML value of the subset at text[pos:]: a basic string, an
    array of values, true/false or a decimal integer. Returns (value, end)."""
    while pos < len(text) and text[pos] in " \t\r\n,":
        pos += 1
    if text.startswith('"', pos):
        m = re.compile(r'"(?:[^"\\]|\\.)*"').match(text, pos)
        if not m:
            raise ValueError("unterminated string at %r" % text[pos:pos + 20])
        # TOML's basic-string escapes are JSON's (plus \UXXXXXXXX, not used)
        return json.loads(m.group(0)), m.end()
    if text.startswith("[", pos):
        items = []
        pos += 1
        while True:
            while pos < len(text) and text[pos] in " \t\r\n,":
                pos += 1
            if pos >= len(text):
                raise ValueError("unterminated array")
            if text[pos] == "]":
                return items, pos + 1
            item, pos = _value(text, pos)
            items.append(item)
    m = re.compile(r"true|false|[+-]?[0-9]+").match(text, pos)
    if not m:
        raise ValueError("unsupported TOML value at %r" % text[pos:pos + 20])
    word = m.group(0)
    return (word == "true") if word in ("true", "false") else int(word), m.end()


def read_toml(text):
    """Read the TOML subset pyproject.toml uses into nested dicts: [a.b]
    tables of bare keys, whose values are basic strings, arrays (over
    several lines too), true/false or integers; # comments. Anything else
    raises ValueError."""
    doc = {}
    table = doc
    pending = ""
    for raw in text.splitlines():
        line = _strip_comment(raw).strip()
        if pending:
            pending += "\n" + line
        elif not line:
            continue
        elif line.startswith("["):
            m = re.fullmatch(r"\[\s*([A-Za-z0-9_.-]+)\s*\]", line)
            if not m:
                raise ValueError("unsupported table header %r" % line)
            table = doc
            for part in m.group(1).split("."):
                table = table.setdefault(part, {})
            continue
        else:
            pending = line
        key, eq, rest = pending.partition("=")
        key = key.strip()
        if not eq or not re.fullmatch(r"[A-Za-z0-9_-]+", key):
            raise ValueError("unsupported line %r" % pending)
        try:
            value, end = _value(rest, 0)
        except ValueError:
            if rest.count("[") > rest.count("]"):
                continue  # an array going on on the next line
            raise
        if rest[end:].strip():
            raise ValueError("junk after the value in %r" % pending)
        table[key] = value
        pending = ""
    if pending:
        raise ValueError("unterminated value %r" % pending)
    return doc


def _pyproject():
    with open(os.path.join(_ROOT, "pyproject.toml"), "rb") as f:
        data = f.read()
    try:
        import tomllib
    except ImportError:
        return read_toml(data.decode("utf-8"))
    return tomllib.loads(data.decode("utf-8"))


def _project():
    """[project] of pyproject.toml, checked for what this backend writes."""
    project = _pyproject()["project"]
    for key in ("name", "version"):
        if not isinstance(project.get(key), str):
            raise ValueError("pyproject.toml: [project] %s must be a string" % key)
    if project.get("dynamic"):
        raise ValueError("pyproject.toml: hoplite_build has no dynamic metadata")
    return project


def _dist_name(project):
    # wheel and sdist file names: runs of -_. become _ (PEP 427, PEP 625)
    return re.sub(r"[-_.]+", "_", project["name"]).lower()


def _metadata(project):
    """The METADATA (and PKG-INFO) text, core metadata 2.1."""
    lines = [
        "Metadata-Version: 2.1",
        "Name: %s" % project["name"],
        "Version: %s" % project["version"],
    ]
    if project.get("description"):
        lines.append("Summary: %s" % project["description"])
    if project.get("requires-python"):
        lines.append("Requires-Python: %s" % project["requires-python"])
    for req in project.get("dependencies", []):
        lines.append("Requires-Dist: %s" % req)
    for extra, reqs in sorted(project.get("optional-dependencies", {}).items()):
        lines.append("Provides-Extra: %s" % extra)
        for req in reqs:
            marker = 'extra == "%s"' % extra
            if ";" in req:
                req, own = req.split(";", 1)
                marker = "(%s) and %s" % (own.strip(), marker)
            lines.append("Requires-Dist: %s; %s" % (req.strip(), marker))
    body = ""
    readme = project.get("readme")
    if readme:
        if not isinstance(readme, str):
            raise ValueError("pyproject.toml: readme must be a file name")
        with open(os.path.join(_ROOT, readme), encoding="utf-8") as f:
            body = f.read()
        ctype = "text/markdown" if readme.endswith(".md") else "text/plain"
        lines.append("Description-Content-Type: %s" % ctype)
    text = "\n".join(lines) + "\n"
    if body:
        text += "\n" + body
    return text


def _wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: %s\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
            % _GENERATOR)


def _package_files():
    """(path in the archive, path on disk) of every .py file of hoplite/,
    sorted."""
    out = []
    top = os.path.join(_ROOT, _PACKAGE)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".py"):
                disk = os.path.join(dirpath, name)
                out.append((os.path.relpath(disk, _ROOT).replace(os.sep, "/"), disk))
    if not out:
        raise FileNotFoundError("no .py files under %s" % top)
    return sorted(out)


def _epoch():
    # zip cannot hold times before 1980
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")), 315532800)


# ---------------------------------------------------------------- PEP 517 hooks

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _dist_info(project):
    return "%s-%s.dist-info" % (_dist_name(project), project["version"])


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    """Write <name>-<version>.dist-info (METADATA, WHEEL) into
    metadata_directory and return its name."""
    project = _project()
    info = _dist_info(project)
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, text in (("METADATA", _metadata(project)), ("WHEEL", _wheel_file())):
        with open(os.path.join(metadata_directory, info, name), "w", encoding="utf-8") as f:
            f.write(text)
    return info


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    """Write the wheel into wheel_directory and return its file name. The
    metadata is made again (identical to prepare_metadata_for_build_wheel's)."""
    project = _project()
    info = _dist_info(project)
    name = "%s-%s-py3-none-any.whl" % (_dist_name(project), project["version"])
    stamp = time.gmtime(_epoch())[:6]
    entries = []
    for arc, disk in _package_files():
        with open(disk, "rb") as f:
            entries.append((arc, f.read()))
    entries.append((info + "/METADATA", _metadata(project).encode("utf-8")))
    entries.append((info + "/WHEEL", _wheel_file().encode("utf-8")))
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for arc, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        w.writerow([arc, "sha256=" + digest.decode("ascii"), len(data)])
    w.writerow([info + "/RECORD", "", ""])
    entries.append((info + "/RECORD", record.getvalue().encode("utf-8")))

    os.makedirs(wheel_directory, exist_ok=True)
    path = os.path.join(wheel_directory, name)
    tmp = path + ".part"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            zi = zipfile.ZipInfo(arc, date_time=stamp)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    os.replace(tmp, path)
    return name


def build_sdist(sdist_directory, config_settings=None):
    """Write <name>-<version>.tar.gz into sdist_directory and return its name."""
    project = _project()
    base = "%s-%s" % (_dist_name(project), project["version"])
    files = [("pyproject.toml", os.path.join(_ROOT, "pyproject.toml")),
             ("_backend/hoplite_build.py", os.path.abspath(__file__))]
    if project.get("readme"):
        files.append((project["readme"], os.path.join(_ROOT, project["readme"])))
    files += _package_files()
    epoch = _epoch()

    def add(tar, arc, data):
        ti = tarfile.TarInfo("%s/%s" % (base, arc))
        ti.size, ti.mtime, ti.mode = len(data), epoch, 0o644
        ti.uid = ti.gid = 0
        ti.uname = ti.gname = ""
        tar.addfile(ti, io.BytesIO(data))

    os.makedirs(sdist_directory, exist_ok=True)
    name = base + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    tmp = path + ".part"
    # the gzip header holds a time too
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=epoch) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        add(tar, "PKG-INFO", _metadata(project).encode("utf-8"))
        for arc, disk in sorted(files):
            with open(disk, "rb") as f:
                add(tar, arc, f.read())
    os.replace(tmp, path)
    return name
