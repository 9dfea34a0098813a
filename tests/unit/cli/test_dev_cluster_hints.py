"""The commands dev-cluster prints run as printed from the user's shell."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from squall.cli.dev_cluster import example_topology, squall_command

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[3]


def test_bare_squall_only_when_path_finds_this_one(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if not (BIN / "squall").exists():
        pytest.skip("squall is not installed in this environment")
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}/usr/bin:/bin")
    assert squall_command() == "squall"
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not activated
    monkeypatch.chdir(BIN.parent.parent)
    assert squall_command() == os.path.relpath(BIN / "squall")
    monkeypatch.chdir(tmp_path)  # elsewhere: a path that works from there
    assert Path(squall_command()).resolve() == (BIN / "squall").resolve()


def test_the_example_path_works_from_here(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(REPO)
    assert example_topology() == "examples/wordcount.py"
    monkeypatch.chdir(tmp_path)
    assert Path(example_topology()).resolve() == REPO / "examples" / "wordcount.py"
