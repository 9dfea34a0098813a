"""Check squall's import contracts (``[tool.importlinter]`` in pyproject.toml) with import-linter.

The repository keeps ``daemons/`` and ``messaging/`` at the top level while they install as
``squall.daemons`` and ``squall.messaging`` (``[tool.setuptools.package-dir]``). import-linter
reads a package from its directory, so an editable install shows it ``squall`` without them.
This lays the sources out as installed in a temporary directory, then runs ``lint-imports``
(from this interpreter's environment) there. Exit code: lint-imports's own (0: contracts kept).

    .venv/bin/python scripts/lint_imports.py [lint-imports options, e.g. --contract layers]
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def installed_layout(target: Path, repo: Path = REPO) -> None:
    """Copy every package's ``.py`` files under ``target`` where the package installs."""
    setup = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    dirs = setup["package-dir"]
    for package in setup["packages"]:
        # A package's directory: its own package-dir entry, else its nearest mapped parent's.
        parent = next(p for p in sorted(dirs, key=len, reverse=True) if package == p or package.startswith(p + "."))
        source = repo / dirs[parent] / Path(*package[len(parent):].split(".")[1:])
        dest = target / Path(*package.split("."))
        dest.mkdir(parents=True, exist_ok=True)
        for module in source.glob("*.py"):
            shutil.copy2(module, dest / module.name)
    # Packages the list leaves to setuptools' discovery (e.g. squall.testing.chaos_topology).
    for init in (repo / "squall").rglob("__init__.py"):
        rel = init.parent.relative_to(repo)
        if "__pycache__" not in rel.parts and not (target / rel).is_dir():
            shutil.copytree(init.parent, target / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def main(argv: list[str]) -> int:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        print(f"{lint} is missing: install the test extra (pip install -e '.[test]')", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="squall-layout-") as tmp:
        installed_layout(Path(tmp))
        env = {**os.environ, "PYTHONPATH": tmp}
        # cwd is the copy: lint-imports puts the working directory first on sys.path.
        return subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml"), "--no-cache", *argv],
                              cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
