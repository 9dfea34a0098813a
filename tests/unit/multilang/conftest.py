"""Fixtures of the multilang unit tests: the test streamparse project on sys.path."""
import sys
from pathlib import Path

import pytest

SUPPORT = Path(__file__).resolve().parents[2] / "support" / "multilang"
SP_PROJECT = SUPPORT / "sp_project"


@pytest.fixture
def sp_project(monkeypatch):
    """The streamparse test project's folder, with src/ and topologies/ importable."""
    monkeypatch.syspath_prepend(str(SP_PROJECT / "topologies"))
    monkeypatch.syspath_prepend(str(SP_PROJECT / "src"))
    yield SP_PROJECT
    for name in ("finite_wc", "sp_components"):
        sys.modules.pop(name, None)
