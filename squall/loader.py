"""Topology files: the one convention for handing squall a topology.

A topology file is a Python module that defines ``topology()`` returning a built
Topology, and may define ``CONFIG``, a dict of topology configuration. The file is
imported under its own module name (its stem), with its directory on ``sys.path``, so
its classes pickle by reference and workers can import them from the submitted code.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any

from squall import config as _config
from squall.errors import SquallError
from squall.topology import Topology, TopologyError

_SQUALL_DIR = str(Path(__file__).resolve().parent) + "/"  # squall's own frames are not the user's


class TopologyFileError(SquallError, ValueError):
    """A topology file that cannot be loaded, with the reason."""


def load_module(path: str | Path) -> ModuleType:
    path = Path(path).resolve()
    if not path.is_file():
        raise TopologyFileError(f"topology file {path} does not exist")
    if path.suffix != ".py":
        raise TopologyFileError(f"topology file {path} is not a .py file")
    name = path.stem
    if not name.isidentifier():
        raise TopologyFileError(f"topology file name {path.name!r} is not a valid module name")
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) == str(path):
        return existing
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        sys.modules.pop(name, None)
        raise TopologyFileError(f"importing {path} failed: {type(exc).__name__}: {exc}\n"
                                f"  at {_where(path, exc)}") from exc
    return module


def _where(path: Path, exc: BaseException) -> str:
    """``path:line`` of the deepest frame of ``exc`` in the topology file's folder (the user's
    code, not squall's), with that line's source; ``path`` alone when there is none."""
    if isinstance(exc, SyntaxError) and exc.filename == str(path) and exc.lineno:
        return f"{path}:{exc.lineno}"
    folder = str(path.parent) + "/"
    tb: TracebackType | None = exc.__traceback__
    found = None
    for frame in traceback.extract_tb(tb):
        ours = frame.filename.startswith(_SQUALL_DIR)
        if frame.filename.startswith(folder) and not ours and frame.lineno:
            found = frame
    if found is None:
        return str(path)
    code = f" ({found.line.strip()})" if found.line else ""
    return f"{found.filename}:{found.lineno}, in {found.name}{code}"


def load_topology(path: str | Path) -> tuple[Topology, dict[str, Any], ModuleType]:
    """Import ``path`` and return (topology, its CONFIG, the module)."""
    module = load_module(path)
    factory = getattr(module, "topology", None)
    if not callable(factory):
        raise TopologyFileError(f"{path} defines no topology() function")
    try:
        topology = factory()
    except TopologyError as exc:
        raise TopologyError(f"{_where(Path(path).resolve(), exc)}: {exc}") from exc
    except Exception as exc:
        raise TopologyFileError(f"topology() raised {type(exc).__name__}: {exc}\n"
                                f"  at {_where(Path(path).resolve(), exc)}") from exc
    if not isinstance(topology, Topology):
        raise TopologyFileError(f"{path}: topology() returned {type(topology).__name__}, not a built "
                                "Topology (call TopologyBuilder.build())")
    conf = getattr(module, "CONFIG", {}) or {}
    if not isinstance(conf, dict):
        raise TopologyFileError(f"{path}: CONFIG must be a dict")
    try:
        return topology, _config.validate(conf), module
    except _config.ConfigError as exc:
        raise _config.ConfigError(f"{path}: CONFIG: {exc}") from None
