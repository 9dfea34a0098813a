"""Getting the user's topology code into Spark's Python workers.

Component instances are pickled by reference to their classes (``wordcount.SplitBolt``),
and Spark runs Python code in separate worker processes that only see installed
packages. So the modules a topology refers to that are not installed (a topology file
and the files beside it) are zipped, one zip per directory, and added with
``SparkContext.addPyFile``, which puts the zip on every worker's ``sys.path``. Classes
defined in ``__main__`` (a script or a notebook) cannot be imported anywhere else:
those components are re-pickled by value with cloudpickle instead.

Python workers are reused and keep the modules they imported: within one SparkSession,
a topology file edited between runs is not re-imported by workers that already ran it
(the CLI starts a session per run, so this only concerns long-lived sessions).
"""
from __future__ import annotations

import atexit
import hashlib
import io
import os
import pickle
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from squall.topology import Topology

# Installed on every worker, or part of the engine itself.
_PROVIDED = {"squall", "pyspark", "py4j", "cloudpickle", "msgpack", "builtins", "copyreg", "__builtin__"}
_SKIP_DIRS = {"__pycache__", "site-packages", "dist-packages", "node_modules", ".git", ".venv", "venv",
              ".tox", ".eggs", "build", "dist"}
_added: dict[str, set[str]] = {}   # SparkContext application id -> zip names added


class _Recorder(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.modules: set[str] = set()

    def find_class(self, module: str, name: str) -> Any:
        self.modules.add(module)
        return super().find_class(module, name)


def referenced_modules(blob: bytes) -> set[str]:
    """Names of the modules whose globals a pickle refers to (found by loading it)."""
    rec = _Recorder(blob)
    rec.load()
    return rec.modules


def topology_modules(topology: Topology) -> set[str]:
    mods: set[str] = set()
    for spec in topology.components.values():
        if spec.blob:
            mods |= referenced_modules(spec.blob)
        for sub in spec.inputs:
            if sub.grouping.custom is not None:
                mods |= referenced_modules(pickle.dumps(sub.grouping.custom, protocol=5))
    return mods


def _installed_roots() -> list[Path]:
    roots = set()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.add(Path(p).resolve())
    for p in sys.path:
        if p.endswith(("site-packages", "dist-packages")):
            roots.add(Path(p).resolve())
    return sorted(roots)


def _is_installed(path: Path, roots: list[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def directories_to_ship(module_names: set[str]) -> list[Path]:
    """The directories holding user modules that workers could not import themselves."""
    roots = _installed_roots()
    dirs: list[Path] = []
    for name in sorted(module_names):
        top = name.split(".")[0]
        if top in _PROVIDED or top == "__main__" or top in sys.stdlib_module_names:
            continue
        module = sys.modules.get(top)
        file = getattr(module, "__file__", None)
        if module is None or not file:
            continue  # not loaded here: unpickling will say so, if it matters
        path = Path(file).resolve()
        if _is_installed(path, roots):
            continue
        # A package ships with the directory above it, a module with its own directory.
        folder = path.parent.parent if path.name == "__init__.py" else path.parent
        if folder not in dirs:
            dirs.append(folder)
    return dirs


def _python_files(folder: Path) -> list[tuple[Path, str]]:
    """Top-level .py files of ``folder`` and every package below it, as (path, arcname)."""
    out: list[tuple[Path, str]] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(".") or entry.name in _SKIP_DIRS:
            continue
        if entry.is_file() and entry.suffix == ".py":
            out.append((entry, entry.name))
        elif entry.is_dir() and (entry / "__init__.py").is_file():
            for root, subdirs, files in os.walk(entry):
                subdirs[:] = sorted(d for d in subdirs if not d.startswith(".") and d not in _SKIP_DIRS)
                for f in sorted(files):
                    if f.endswith(".py"):
                        p = Path(root) / f
                        out.append((p, str(p.relative_to(folder))))
    return out


def build_zip(folder: Path, into: Path) -> Path:
    """Zip ``folder``'s Python code into ``into``, named by a digest of its content (so a
    changed file gets a new name and an unchanged one is not added twice)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, arc in _python_files(folder):
            info = zipfile.ZipInfo(arc, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    data = buf.getvalue()
    name = f"squall-code-{folder.name or 'root'}-{hashlib.sha256(data).hexdigest()[:16]}.zip"
    target = into / name
    if not target.exists():
        tmp = into / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, target)
    return target


_zip_dir: Path | None = None


def _zip_home() -> Path:
    global _zip_dir
    if _zip_dir is None:
        _zip_dir = Path(tempfile.mkdtemp(prefix="squall-spark-code-"))
        atexit.register(shutil.rmtree, _zip_dir, True)
    return _zip_dir


def ship_topology_code(sc: Any, topology: Topology) -> list[Path]:
    """Add the zips of the topology's user code to ``sc``; returns the zips added."""
    added = _added.setdefault(sc.applicationId, set())
    zips = []
    for folder in directories_to_ship(topology_modules(topology)):
        z = build_zip(folder, _zip_home())
        if z.name not in added:
            sc.addPyFile(str(z))
            added.add(z.name)
        zips.append(z)
    return zips


def by_value_blobs(topology: Topology) -> dict[str, bytes]:
    """Components whose pickles refer to ``__main__``, re-pickled by value."""
    out: dict[str, bytes] = {}
    for spec in topology.components.values():
        if spec.blob and "__main__" in referenced_modules(spec.blob):
            from pyspark import cloudpickle

            out[spec.id] = cloudpickle.dumps(spec.instantiate(), protocol=5)
    return out
