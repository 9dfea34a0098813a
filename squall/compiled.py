"""The runtime's hot modules, compiled where a C compiler was at hand when squall was installed.

``setup.py`` compiles the modules of ``MODULES`` with Cython (pure-Python mode: the ``.py``
files stay the source and stay importable) into extension modules beside them. Python
imports an extension module before the ``.py`` file of the same name, so a build that
succeeded is used everywhere: local mode, the ``worker`` command, cluster workers. Where
no compiler was present, the build skipped them and the ``.py`` files run as they are.

``SQUALL_PURE=1`` in the environment forces the ``.py`` files even where the extension
modules exist (``SourceFinder``, in place as soon as this module is imported, which
``squall/__init__.py`` does first); the test suite runs the runtime's tests both ways. An extension module older
than its ``.py`` file (a checkout edited since it was built) is passed over too. This module imports only
the standard library: ``setup.py`` reads ``MODULES`` from it before squall is installed.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES, ModuleSpec, SourceFileLoader
from pathlib import Path

# Module -> its source, relative to the repository (daemons/ and messaging/ install as
# squall.daemons and squall.messaging): modules whose work runs in loops of their own
# (fields-grouping hashes, wire encode and decode), and the collectors, acker ledger and
# spout pending map (whose root tables are C arrays when compiled, dicts when not),
# whose classes a ``.pxd`` beside the source declares as extension types with typed
# attributes. Compiled as they were, without the ``.pxd``, the collectors ran more
# instructions per tuple than CPython 3.11's own specialising interpreter (bench/README.md,
# "The compiled build").
MODULES = {
    "squall.tuple": "squall/tuple.py",
    "squall.grouping": "squall/grouping.py",
    "squall.runtime.serialization": "squall/runtime/serialization.py",
    "squall.messaging.codec": "messaging/codec.py",
    "squall.runtime.root_table": "squall/runtime/root_table.py",
    "squall.runtime.pending": "squall/runtime/pending.py",
    "squall.runtime.acker": "squall/runtime/acker.py",
    "squall.runtime.collectors": "squall/runtime/collectors.py",
}
# Modules built against each other's extension types (their ``.pxd`` files cimport from
# one another): they run compiled all together or not at all, so that no module meets the
# other build's tuples (a stale or missing extension of one puts them all back on their
# ``.py`` files).
TOGETHER = ("squall.tuple", "squall.runtime.root_table", "squall.runtime.pending", "squall.runtime.acker",
            "squall.runtime.collectors", "squall.runtime.serialization")

PURE_ENV = "SQUALL_PURE"

# ``cython.compiled`` where Cython is not installed (it is a build requirement only): the
# compiled modules ``import cython``, which Cython resolves at compile time, so that a
# branch on ``cython.compiled`` costs the compiled build nothing and plain Python one
# attribute read; they fall back to this module (``from squall import compiled as cython``).
compiled = False


def pure_requested() -> bool:
    """Has the environment asked for the plain-Python modules (``SQUALL_PURE=1``)?"""
    return os.environ.get(PURE_ENV, "") not in ("", "0")


def is_compiled(module: object) -> bool:
    """Was ``module`` loaded from an extension module (not from its ``.py`` file)?"""
    return not str(getattr(module, "__file__", "") or "").endswith(".py")


def compiled_modules() -> dict[str, bool]:
    """Module name -> whether it runs compiled, for the modules of ``MODULES`` imported so far."""
    return {name: is_compiled(sys.modules[name]) for name in MODULES if name in sys.modules}


class SourceFinder:
    """Finds a module of ``MODULES`` as its ``.py`` file when that is what must run: always
    under ``SQUALL_PURE=1``, else when its extension module is missing or older than the
    source (an edited checkout not rebuilt yet: the code as edited runs, compiled or not).
    Otherwise it leaves the module to Python's own finders, which take the extension."""

    @classmethod
    def find_spec(cls, name: str, path: list[str] | None = None, target: object = None) -> ModuleSpec | None:
        if name not in MODULES or not path:
            return None
        leaf = name.rpartition(".")[2]
        for entry in path:
            source = Path(entry) / (leaf + ".py")
            if not source.is_file():
                continue
            if not pure_requested() and _fresh_extension(Path(entry), leaf, source) and \
                    (name not in TOGETHER or all(_runs_compiled(m) for m in TOGETHER if m != name)):
                return None
            return importlib.util.spec_from_file_location(name, source, loader=SourceFileLoader(name, str(source)))
        return None


def _fresh_extension(folder: Path, leaf: str, source: Path) -> bool:
    """Is there an extension module ``leaf`` in ``folder`` built from this ``source``?
    (Built after it was last changed; the slack covers installers that write both at once.)"""
    changed = source.stat().st_mtime
    for suffix in EXTENSION_SUFFIXES:
        ext = folder / (leaf + suffix)
        if ext.is_file():
            return ext.stat().st_mtime + _MTIME_SLACK >= changed
    return False


_MTIME_SLACK = 2.0


def _runs_compiled(name: str) -> bool:
    """Does module ``name`` of the squall package run (or will it run) as its extension?"""
    module = sys.modules.get(name)
    if module is not None:
        return is_compiled(module)
    parts = name.split(".")
    for entry in getattr(sys.modules.get(parts[0]), "__path__", ()):
        source = Path(entry).joinpath(*parts[1:-1], parts[-1] + ".py")
        if source.is_file():
            return _fresh_extension(source.parent, parts[-1], source)
    return False


def install_finder() -> None:
    """Put ``SourceFinder`` first on ``sys.meta_path`` (once)."""
    if SourceFinder not in sys.meta_path:
        sys.meta_path.insert(0, SourceFinder)  # type: ignore[arg-type]  # a class of classmethods, as importlib's own finders


install_finder()  # squall/__init__.py imports this module before anything else
