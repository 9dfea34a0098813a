"""Code bundles: building one at submit (the CLI) and keeping them on nimbus's disk.

A bundle is a gzipped tar holding ``code/`` (the topology file's directory), ``topology.bin``
(``Topology.to_bytes()``), ``conf.json`` (the topology's own config) and ``structure.json``
(components, counts, inputs and streams, so nimbus validates and schedules without
unpickling user code). Its digest is the sha256 hex of the bundle bytes.

Bundles are built deterministically (sorted members, zero mtimes and owners, normalized
modes, gzip mtime 0): the same code and topology always give the same digest.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from squall.daemons.nimbus.code_files import code_files
from squall.topology import Topology

BUNDLE_NAME = "bundle.tar.gz"
STRUCTURE_NAME = "structure.json"
CODE_DIR = "code"


def digest(data: bytes) -> str:
    """The bundle digest: sha256 hex of its bytes."""
    return hashlib.sha256(data).hexdigest()


def structure_of(topology: Topology) -> dict[str, Any]:
    """``structure.json`` of a topology (the contract's shape)."""
    components = {}
    for comp in topology.components.values():
        components[comp.id] = {
            "parallelism": comp.parallelism,
            "num_tasks": comp.num_tasks,
            "kind": comp.kind,
            "inputs": [[s.component, s.stream, s.grouping.kind] for s in comp.inputs],
            "streams": {name: list(decl.fields.names) for name, decl in comp.streams.items()},
        }
    return {"components": components}


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def build_bundle(topology_file: str | os.PathLike[str], topology: Topology,
                 conf: Mapping[str, Any], root: str | os.PathLike[str] | None = None) -> bytes:
    """The bundle bytes for ``topology`` defined in ``topology_file`` with topology config ``conf``.

    ``code/`` holds the files of ``root`` (default: the topology file's directory; a
    streamparse project's folder) recursively that ``code_files`` ships: no dotfiles, VCS,
    caches, or what ``.squallignore`` names.
    """
    source = Path(topology_file).resolve()
    if not source.is_file():
        raise FileNotFoundError(f"topology file {source} does not exist")
    folder = Path(root).resolve() if root is not None else source.parent
    raw = io.BytesIO()
    # gzip with mtime 0 (tarfile's "w:gz" stamps the current time into the header).
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for rel, path in code_files(folder):
                mode = 0o755 if os.access(path, os.X_OK) else 0o644
                _add_bytes(tar, f"{CODE_DIR}/{rel}", path.read_bytes(), mode)
            _add_bytes(tar, "topology.bin", topology.to_bytes())
            _add_bytes(tar, "conf.json", json.dumps(dict(conf), sort_keys=True, indent=1).encode())
            _add_bytes(tar, STRUCTURE_NAME,
                       json.dumps(structure_of(topology), sort_keys=True, indent=1).encode())
    return raw.getvalue()


class Upload:
    """A bundle being received into ``dir/bundle.tar.gz``: ``write`` it piece by piece."""

    def __init__(self, folder: Path, file: BinaryIO) -> None:
        self.dir = folder
        self.file = file
        self.size = 0
        self._hash = hashlib.sha256()

    def write(self, data: bytes) -> None:
        self.file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def reader(self) -> BinaryIO:
        """The bundle written so far, from its start."""
        self.file.flush()
        self.file.seek(0)
        return self.file

    def digest(self) -> str:
        return self._hash.hexdigest()


class CodeStore:
    """Bundles on nimbus's disk: ``<root>/<topology-id>/bundle.tar.gz`` plus its ``structure.json``.

    ``root`` is ``<nimbus local dir>/nimbus/topologies``. Writes are atomic (a temporary
    directory renamed into place), so a reader never sees half a bundle.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _dir(self, topology_id: str) -> Path:
        if not topology_id or "/" in topology_id or topology_id.startswith("."):
            raise ValueError(f"bad topology id {topology_id!r}")
        return self.root / topology_id

    def bundle_path(self, topology_id: str) -> Path:
        return self._dir(topology_id) / BUNDLE_NAME

    @contextmanager
    def upload(self) -> Iterator[Upload]:
        """A bundle on its way in: written to a private temporary file in the store (never
        held in memory) and hashed as it comes; ``put`` keeps it, otherwise it is removed."""
        tmp = self.root / f".tmp-{uuid.uuid4().hex}"
        tmp.mkdir(mode=0o700)
        try:
            with open(os.open(tmp / BUNDLE_NAME, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), "w+b") as fh:
                yield Upload(tmp, fh)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def put(self, topology_id: str, upload: Upload, structure: Mapping[str, Any]) -> str:
        """Store an uploaded bundle (replacing any earlier one) and return its digest."""
        final = self._dir(topology_id)
        upload.file.flush()
        (upload.dir / STRUCTURE_NAME).write_text(json.dumps(dict(structure)), encoding="utf-8")
        if final.exists():
            shutil.rmtree(final)
        os.rename(upload.dir, final)
        return upload.digest()

    def has(self, topology_id: str) -> bool:
        return self.bundle_path(topology_id).is_file()

    def read(self, topology_id: str) -> bytes | None:
        """The bundle bytes, or None when this store does not hold it."""
        try:
            return self.bundle_path(topology_id).read_bytes()
        except (FileNotFoundError, ValueError):
            return None

    def structure(self, topology_id: str) -> dict[str, Any] | None:
        """The stored ``structure.json`` (already validated at submit), or None."""
        try:
            data = json.loads((self._dir(topology_id) / STRUCTURE_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def remove(self, topology_id: str) -> None:
        shutil.rmtree(self._dir(topology_id), ignore_errors=True)

    def ids(self) -> list[str]:
        """Topology ids with a stored bundle."""
        return [e.name for e in sorted(self.root.iterdir())
                if not e.name.startswith(".") and (e / BUNDLE_NAME).is_file()]

    def clean_temporary(self) -> None:
        """Remove temporary directories left by a crash during ``put`` (call at start-up)."""
        for entry in self.root.glob(".tmp-*"):
            shutil.rmtree(entry, ignore_errors=True)
