"""Checks on a submitted bundle, done by nimbus WITHOUT unpickling any user code.

The tar must be a well-formed gzip tar whose members are plain files and directories with
safe relative paths, only the contract's top-level entries, bounded in number and unpacked
size (a gzip bomb is stopped while reading, not after). ``structure.json`` must have the
contract's shape with sane counts and inputs that name declared streams; ``conf.json`` must
pass ``squall.config.validate``. Every failure is a SubmissionError naming the problem.
"""
from __future__ import annotations

import json
import re
import tarfile
import zlib
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeGuard

from squall import config as _config
from squall.daemons.credentials import DAEMON_SECRET_KEYS
from squall.daemons.nimbus.state_lineage import CARRY, NAMESPACE, user_set_namespace
from squall.errors import SquallError
from squall.grouping import GROUPINGS
from squall.model import CHECKPOINT

MAX_MEMBERS = 10_000          # files and directories in one bundle
MAX_JSON_BYTES = 1 << 20      # conf.json / structure.json
MAX_JSON_DEPTH = 32           # lists and objects within each other in them
UNPACK_FACTOR = 8             # unpacked bytes allowed per byte of the upload limit
MAX_COMPONENTS = 1_000
MAX_TASKS = 10_000            # user tasks of one topology
MAX_NAME_CHARS = 100

TOPOLOGY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
TOP_FILES = ("topology.bin", "conf.json", "structure.json")


class SubmissionError(SquallError, ValueError):
    """A submission nimbus refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Submission:
    """What nimbus needs from a valid bundle."""

    name: str
    conf: dict[str, Any]                      # conf.json, validated
    structure: dict[str, Any]                 # structure.json, validated
    counts: dict[str, tuple[int, int]]        # component -> (parallelism, num_tasks)


def check_name(name: Any) -> str:
    """A topology name usable in ids, ZooKeeper paths and file names."""
    if not isinstance(name, str) or not name:
        raise SubmissionError("missing topology name (?name=...)")
    if len(name) > MAX_NAME_CHARS or not TOPOLOGY_NAME.match(name):
        raise SubmissionError(
            f"bad topology name {name!r}: use letters, digits, '_', '-' and '.', starting with a "
            f"letter or digit, at most {MAX_NAME_CHARS} characters")
    return name


def _safe_member_name(name: str) -> str:
    if not name or name.startswith("/") or "\\" in name or "\0" in name:
        raise SubmissionError(f"bundle member {name!r} has an unsafe path")
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise SubmissionError(f"bundle member {name!r} has an unsafe path")
    return "/".join(parts)


def read_bundle(bundle: BinaryIO, max_unpacked: int) -> tuple[bytes, bytes]:
    """Check the tar layout of ``bundle`` (read as a stream); return the raw (conf.json,
    structure.json) bytes."""
    seen: set[str] = set()
    texts: dict[str, bytes] = {}
    code_files = 0
    total = 0
    try:
        with tarfile.open(fileobj=bundle, mode="r:gz") as tar:
            while True:
                member = tar.next()  # lazily: stop a bomb at the first member over the bound
                if member is None:
                    break
                name = _safe_member_name(member.name)
                if name in seen:
                    raise SubmissionError(f"bundle member {name!r} appears twice")
                seen.add(name)
                if len(seen) > MAX_MEMBERS:
                    raise SubmissionError(f"bundle has more than {MAX_MEMBERS} members")
                if not (member.isfile() or member.isdir()):
                    raise SubmissionError(f"bundle member {name!r} is not a regular file or directory")
                total += max(0, member.size)
                if total > max_unpacked:
                    raise SubmissionError(f"bundle unpacks to more than {max_unpacked} bytes", 413)
                if name == "code" or name.startswith("code/"):
                    if member.isdir() and name == "code":
                        continue
                    if any(part.startswith(".") for part in name.split("/")):
                        # squall submit never ships these: a dotfile here is a .env or a
                        # .git/ that a hand-made bundle would spread to every supervisor.
                        raise SubmissionError(f"bundle member {name!r} is a dotfile or inside a dot-directory "
                                              "(bundles leave out .env, .git/ and the like)")
                    code_files += member.isfile()
                    continue
                if name not in TOP_FILES or not member.isfile():
                    raise SubmissionError(
                        f"unexpected bundle member {name!r} (allowed: code/, {', '.join(TOP_FILES)})")
                if name != "topology.bin":
                    if member.size > MAX_JSON_BYTES:
                        raise SubmissionError(f"{name} is larger than {MAX_JSON_BYTES} bytes")
                    fh = tar.extractfile(member)
                    texts[name] = fh.read() if fh is not None else b""
                elif member.size == 0:
                    raise SubmissionError("topology.bin is empty")
    except SubmissionError:
        raise
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise SubmissionError(f"bundle is not a valid tar.gz archive: {exc}") from None
    missing = [n for n in TOP_FILES if n not in seen]
    if missing:
        raise SubmissionError(f"bundle lacks {', '.join(missing)}")
    if code_files == 0:
        raise SubmissionError("bundle has no files under code/")
    return texts["conf.json"], texts["structure.json"]


def _load_json(name: str, raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except RecursionError:
        raise SubmissionError(f"{name} is nested too deeply") from None
    except ValueError as exc:  # JSON and UTF-8 errors
        raise SubmissionError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SubmissionError(f"{name} must hold a JSON object, got {type(value).__name__}")
    if _depth_over(value, MAX_JSON_DEPTH):  # it is written to ZooKeeper as JSON again
        raise SubmissionError(f"{name} is nested more than {MAX_JSON_DEPTH} levels deep")
    return value


def _depth_over(value: Any, limit: int) -> bool:
    """Is ``value`` (parsed JSON) nested more than ``limit`` lists and objects deep?"""
    level = [value]
    for _ in range(limit):
        level = [v for c in level if isinstance(c, (dict, list)) for v in (c.values() if isinstance(c, dict) else c)]
        if not level:
            return False
    return any(isinstance(c, (dict, list)) for c in level)


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _component_id_ok(cid: Any) -> bool:
    if cid == CHECKPOINT:  # the one system component a topology itself holds (squall.state)
        return True
    return (isinstance(cid, str) and 0 < len(cid) <= 200 and "/" not in cid and cid not in (".", "..")
            and not cid.startswith("__") and not any(ord(c) < 32 for c in cid))


def check_structure(structure: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Validate ``structure.json``; return component -> (parallelism, num_tasks)."""
    comps = structure.get("components")
    if not isinstance(comps, dict) or not comps:
        raise SubmissionError("structure.json: 'components' must be a non-empty object")
    if len(comps) > MAX_COMPONENTS:
        raise SubmissionError(f"structure.json: more than {MAX_COMPONENTS} components")
    counts: dict[str, tuple[int, int]] = {}
    streams: dict[str, set[str]] = {}
    for cid, entry in comps.items():
        where = f"structure.json: component {cid!r}"
        if not _component_id_ok(cid):
            raise SubmissionError(f"structure.json: bad component id {cid!r}")
        if not isinstance(entry, dict):
            raise SubmissionError(f"{where} must be an object")
        p, n = entry.get("parallelism"), entry.get("num_tasks")
        if not _is_int(p) or p < 1:
            raise SubmissionError(f"{where}: parallelism must be an integer >= 1, got {p!r}")
        if not _is_int(n) or n < 1:
            raise SubmissionError(f"{where}: num_tasks must be an integer >= 1, got {n!r}")
        if p > n:
            raise SubmissionError(f"{where}: parallelism {p} exceeds num_tasks {n}")
        if entry.get("kind") not in ("spout", "bolt"):
            raise SubmissionError(f"{where}: kind must be 'spout' or 'bolt', got {entry.get('kind')!r}")
        declared = entry.get("streams")
        if not isinstance(declared, dict):
            raise SubmissionError(f"{where}: 'streams' must be an object")
        for stream, fields in declared.items():
            if not isinstance(stream, str) or not stream:
                raise SubmissionError(f"{where}: stream ids must be non-empty strings")
            if (not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields)
                    or len(set(fields)) != len(fields)):
                raise SubmissionError(f"{where}: fields of stream {stream!r} must be distinct "
                                      "non-empty strings")
        if not isinstance(entry.get("inputs"), list):
            raise SubmissionError(f"{where}: 'inputs' must be a list")
        counts[cid] = (p, n)
        streams[cid] = set(declared)
    if sum(n for _, n in counts.values()) > MAX_TASKS:
        raise SubmissionError(f"structure.json: more than {MAX_TASKS} tasks in all")
    if not any(e["kind"] == "spout" for e in comps.values()):
        raise SubmissionError("structure.json: a topology needs at least one spout")
    for cid, entry in comps.items():
        where = f"structure.json: component {cid!r}"
        if entry["kind"] == "spout" and entry["inputs"]:
            raise SubmissionError(f"{where}: a spout has no inputs")
        for row in entry["inputs"]:
            if not (isinstance(row, list) and len(row) == 3 and all(isinstance(x, str) for x in row)):
                raise SubmissionError(f"{where}: each input must be [component, stream, grouping]")
            source, stream, kind = row
            if source not in comps:
                raise SubmissionError(f"{where} subscribes to unknown component {source!r}")
            if stream not in streams[source]:
                raise SubmissionError(f"{where} subscribes to stream {stream!r} that {source!r} "
                                      "does not declare")
            if kind not in GROUPINGS:
                raise SubmissionError(f"{where}: unknown grouping {kind!r}")
    return dict(sorted(counts.items()))


def check_conf(name: str, conf: dict[str, Any]) -> dict[str, Any]:
    try:
        conf = _config.validate(conf)
    except _config.ConfigError as exc:
        raise SubmissionError(f"conf.json: {exc}") from None
    secret = sorted(set(DAEMON_SECRET_KEYS) & conf.keys())
    if secret:
        raise SubmissionError(f"conf.json carries {', '.join(secret)}: a secret has no place in a "
                              "topology's config (every worker and every reader of its status sees it)")
    if user_set_namespace(conf):
        raise SubmissionError(f"conf.json sets {NAMESPACE}: nimbus sets it (a topology starts with state of its "
                              f"own; {CARRY}: true carries over your own last topology's of this name)")
    declared = conf.get("topology.name")
    if declared is not None and declared != name:
        raise SubmissionError(f"conf.json names the topology {declared!r}, but it is submitted "
                              f"as {name!r}")
    return conf


def validate_submission(name: Any, bundle: BinaryIO, size: int, max_upload: int) -> Submission:
    """Everything nimbus checks before it writes anything; raises SubmissionError.
    ``bundle`` holds ``size`` bytes, read as a stream."""
    name = check_name(name)
    if not size:
        raise SubmissionError("empty upload: the body must be the bundle (tar.gz)")
    if size > max_upload:
        raise SubmissionError(f"bundle is {size} bytes, above nimbus.code.max.upload.bytes "
                              f"({max_upload})", 413)
    raw_conf, raw_structure = read_bundle(bundle, max_upload * UNPACK_FACTOR)
    conf = check_conf(name, _load_json("conf.json", raw_conf))
    structure = _load_json("structure.json", raw_structure)
    counts = check_structure(structure)
    return Submission(name, conf, structure, counts)
