"""ruff and mypy pass as configured in pyproject.toml (scripts/lint.py runs them), so a lint
or type error fails the unit tier and CI."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from support.paths import REPO

LINT = REPO / "scripts" / "lint.py"


def lint(*args: str) -> subprocess.CompletedProcess:
    # mypy's first run in a fresh environment reads every module it follows (20 s on a busy
    # machine); later runs reuse its cache in the environment.
    return subprocess.run([sys.executable, str(LINT), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("tool", ["ruff", "mypy"])
def test_the_code_passes(tool):
    result = lint(tool)
    assert result.returncode == 0, f"scripts/lint.py {tool} failed:\n{result.stdout}{result.stderr}"
    assert result.stdout == "" and result.stderr == ""  # quiet when all is well


@pytest.mark.parametrize("tool, source, finding", [
    ("ruff", "import os\n", "F401"),
    ("ruff", "import sys\nimport os\n\nprint(os, sys)\n", "I001"),
    ("mypy", "def f(x: int) -> str:\n    return x\n", "Incompatible return value type"),
])
def test_a_finding_fails_the_run_and_is_shown(tmp_path, tool, source, finding):
    bad = tmp_path / "bad.py"
    bad.write_text(source, encoding="utf-8")
    result = lint(tool, str(bad))
    assert result.returncode == 1
    assert finding in result.stderr and "bad.py" in result.stderr


def test_mypy_checks_every_module_of_the_installed_package():
    """[tool.mypy] files names the whole package as installed (daemons and messaging too),
    not a list of folders a new package would be missing from."""
    tool = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    assert tool["mypy"]["files"] == ["squall"]
    assert {package.split(".")[0] for package in tool["setuptools"]["package-dir"]} == {"squall"}
