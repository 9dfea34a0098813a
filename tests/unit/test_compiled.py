"""The runtime's compiled modules (squall/compiled.py): used when built, passed over under
SQUALL_PURE=1 or when older than their source, and alike in behaviour (scripts/test.sh runs
the runtime's tests both ways)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
import types

import pytest

import squall.grouping  # noqa: F401
import squall.messaging.codec  # noqa: F401
import squall.runtime.acker  # noqa: F401
import squall.runtime.collectors  # noqa: F401
import squall.runtime.serialization  # noqa: F401 (imported so that compiled_modules sees it)
from squall.compiled import MODULES, TOGETHER, SourceFinder, compiled_modules, pure_requested
from support.paths import REPO

EXT = sysconfig.get_config_var("EXT_SUFFIX")


def test_the_modules_run_compiled_unless_squall_pure_says_otherwise():
    """In an install built with a C compiler, every listed module is the extension
    module; under SQUALL_PURE=1 every one is its .py file."""
    state = compiled_modules()
    assert set(state) == set(MODULES)  # all imported above
    if pure_requested():
        assert not any(state.values()), state
        assert all(sys.modules[m].__file__.endswith(".py") for m in MODULES)
    elif shutil.which("cc"):
        assert all(state.values()), f"not compiled: {[m for m, c in state.items() if not c]}; " \
                                     "reinstall (scripts/test.sh rebuilds when a compiled module changes)"


def _package(tmp_path, leaf: str, ext_mtime: float, py_mtime: float):
    py = tmp_path / f"{leaf}.py"
    py.write_text("X = 'source'\n")
    ext = tmp_path / f"{leaf}{EXT}"
    ext.write_bytes(b"not really an extension module")
    os.utime(ext, (ext_mtime, ext_mtime))
    os.utime(py, (py_mtime, py_mtime))
    return py


def test_a_fresh_extension_module_is_left_to_pythons_finders(tmp_path, monkeypatch):
    monkeypatch.delenv("SQUALL_PURE", raising=False)
    _package(tmp_path, "codec", ext_mtime=2_000_000, py_mtime=1_000_000)
    assert SourceFinder.find_spec("squall.messaging.codec", [str(tmp_path)]) is None


def test_an_extension_older_than_its_source_is_passed_over(tmp_path, monkeypatch):
    """An edited checkout not rebuilt yet runs the code as edited."""
    monkeypatch.delenv("SQUALL_PURE", raising=False)
    py = _package(tmp_path, "codec", ext_mtime=1_000_000, py_mtime=2_000_000)
    spec = SourceFinder.find_spec("squall.messaging.codec", [str(tmp_path)])
    assert spec is not None and spec.origin == str(py)


def test_squall_pure_takes_the_source_even_beside_a_fresh_extension(tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_PURE", "1")
    py = _package(tmp_path, "codec", ext_mtime=2_000_000, py_mtime=1_000_000)
    spec = SourceFinder.find_spec("squall.messaging.codec", [str(tmp_path)])
    assert spec is not None and spec.origin == str(py)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.X == "source"


@pytest.mark.parametrize("other_file, compiled", [("other.py", False), (f"other{EXT}", True)])
def test_modules_built_together_run_compiled_only_together(tmp_path, monkeypatch, other_file, compiled):
    """A module built against another's extension types is taken from source when that
    one runs from source (neither build's code may meet the other's tuples)."""
    monkeypatch.delenv("SQUALL_PURE", raising=False)
    py = _package(tmp_path, "codec", ext_mtime=2_000_000, py_mtime=1_000_000)
    monkeypatch.setattr("squall.compiled.TOGETHER", ("squall.messaging.codec", "squall.other"))
    monkeypatch.setitem(sys.modules, "squall.other", types.SimpleNamespace(__file__=str(tmp_path / other_file)))
    spec = SourceFinder.find_spec("squall.messaging.codec", [str(tmp_path)])
    assert (spec is None) if compiled else (spec is not None and spec.origin == str(py))


def test_the_modules_built_together_all_run_one_way():
    state = compiled_modules()
    assert len({state[m] for m in TOGETHER}) == 1, state


def test_modules_not_listed_are_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_PURE", "1")
    _package(tmp_path, "executor", ext_mtime=1, py_mtime=2)
    assert SourceFinder.find_spec("squall.runtime.executor", [str(tmp_path)]) is None


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_listed_source_exists(module):
    assert (REPO / MODULES[module]).is_file()
