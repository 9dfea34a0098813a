"""A topology's requirements file: which one a bundle ships, and what of it a supervisor will
install. Plain code, no I/O.

A topology may ship a pip requirements file (``requirements.txt`` at the top of its code, or
a streamparse project's ``virtualenvs/<topology>.txt``); ``topology.python.requirements``
names it. Every supervisor that runs the topology builds a Python environment from it, as
root, from the package index pip is configured with on that host. So the file may hold
requirements and nothing else: ``NAME[extras] VERSION-SPECS ; MARKER`` with optional
``--hash=`` options (pip-compile's output). pip options (``-i``, ``--extra-index-url``,
``-f``, ``-r``, ``-e``...), URLs and paths are refused: they would send the supervisor to
places its operator did not choose, or run a build script as root.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import posixpath
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from squall.daemons.local_state import read_regular
from squall.errors import SquallError

REQUIREMENTS_KEY = "topology.python.requirements"
DEFAULT_FILE = "requirements.txt"          # at the top of the topology's code
STREAMPARSE_DIR = "virtualenvs"            # a streamparse project's virtualenvs/<topology>.txt
MAX_BYTES = 64 * 1024
MAX_REQUIREMENTS = 500
MARKER = ".squall-venv.json"  # written last into a built environment: its site-packages and Python
MAX_MARKER_BYTES = 1 << 20

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"[A-Za-z0-9.*+!_-]+"
_SPEC = rf"(?:~=|===|==|!=|<=|>=|<|>)\s*{_VERSION}"
REQUIREMENT = re.compile(
    rf"^(?P<name>{_NAME})\s*"
    rf"(?P<extras>\[\s*{_NAME}(?:\s*,\s*{_NAME})*\s*\])?\s*"
    rf"(?P<specs>{_SPEC}(?:\s*,\s*{_SPEC})*)?\s*"
    r"(?:;\s*(?P<marker>[A-Za-z0-9_.<>=!~'\" ()-]+))?"
    r"(?P<hashes>(?:\s+--hash[=\s][A-Za-z0-9]+:[A-Fa-f0-9]+)*)\s*$"
)


# Names pip would take for a local archive rather than a project on the index.
ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz", ".txz")


class RequirementsError(SquallError, ValueError):
    """A requirements file a supervisor will not install from; the text names the line."""


def default_file(shipped: Iterable[str], topology_name: str, streamparse: bool) -> str | None:
    """Which shipped file (paths relative to the code directory) holds the topology's
    requirements when ``topology.python.requirements`` does not say: a streamparse project's
    ``virtualenvs/<topology_name>.txt`` (the name of its topology file), else
    ``requirements.txt``; None when neither is shipped."""
    files = set(shipped)
    if streamparse and f"{STREAMPARSE_DIR}/{topology_name}.txt" in files:
        return f"{STREAMPARSE_DIR}/{topology_name}.txt"
    return DEFAULT_FILE if DEFAULT_FILE in files else None


def check_path(path: str) -> str:
    """``path`` as a normalized POSIX path inside the code directory; RequirementsError if not."""
    norm = posixpath.normpath(path.replace("\\", "/")) if path else ""
    if not norm or norm.startswith(("/", "../")) or norm in (".", ".."):
        raise RequirementsError(f"{REQUIREMENTS_KEY} {path!r} must name a file inside the topology's folder")
    return norm


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with comments cut and ``\\`` continuations joined."""
    out: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = re.sub(r"(^|\s)#.*$", "", raw).rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            out.append((start, line))
    if pending.strip():
        out.append((start, pending.strip()))
    return out


def check_requirements(data: bytes, where: str) -> list[str]:
    """The requirement lines of a requirements file's bytes, each checked; RequirementsError
    naming ``where`` and the line otherwise."""
    if len(data) > MAX_BYTES:
        raise RequirementsError(f"{where} is {len(data)} bytes, more than {MAX_BYTES}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequirementsError(f"{where} is not UTF-8 text: {exc}") from None
    lines = _logical_lines(text)
    if len(lines) > MAX_REQUIREMENTS:
        raise RequirementsError(f"{where} holds {len(lines)} requirements, more than {MAX_REQUIREMENTS}")
    out = []
    for number, line in lines:
        match = REQUIREMENT.match(line)
        if not match or match["name"].lower().endswith(ARCHIVE_SUFFIXES):
            raise RequirementsError(
                f"{where} line {number}: {line[:120]!r} is not a plain requirement (NAME[extras] "
                "VERSION-SPECS ; MARKER): pip options, URLs and paths are refused, the supervisor installs "
                "from the package index its host's pip is configured with")
        out.append(_normalized(match))
    return out


def _normalized(match: re.Match[str]) -> str:
    """One spelling per requirement (PEP 503 names, no spaces in specifiers), so that files
    saying the same thing share an environment."""
    name = re.sub(r"[-_.]+", "-", match["name"]).lower()
    extras = match["extras"]
    if extras:
        extras = "[" + ",".join(sorted(re.sub(r"[-_.]+", "-", e.strip()).lower()
                                       for e in extras[1:-1].split(","))) + "]"
    text = name + (extras or "") + "".join((match["specs"] or "").split())
    if match["marker"]:
        text += " ; " + " ".join(match["marker"].split())
    return text + "".join(f" --hash={h}" for h in sorted(re.findall(r"--hash[=\s]+(\S+)", match["hashes"] or "")))


def environment_key(requirements: Sequence[str], python: str, python_version: str,
                    pip_args: Sequence[str], runtime_paths: Sequence[str]) -> str:
    """The cache key of an environment: what it was built from and for (the checked
    requirements, the interpreter, the operator's pip arguments, what squall runs from).
    Topologies with the same key share one environment."""
    text = json.dumps([list(requirements), python, python_version, list(pip_args), list(runtime_paths)])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def environment_site(venv: str) -> str:
    """The site-packages folder of the built environment at ``venv`` (what its marker
    records); ValueError (or OSError) when it is not a finished environment of this Python."""
    data = json.loads(read_regular(Path(venv, MARKER), MAX_MARKER_BYTES))
    site = data.get("site") if isinstance(data, dict) else None
    if not isinstance(site, str) or not site.startswith(os.path.join(venv, "")):
        raise ValueError(f"{Path(venv, MARKER)} names no site-packages inside {venv}")
    if data.get("python") != platform.python_version():
        raise ValueError(f"the environment {venv} was built for Python {data.get('python')}, "
                         f"this is {platform.python_version()}")
    return site
