"""squall's static checks: ruff (lint and import order), mypy (types) and import-linter (the
layer contracts), each configured in pyproject.toml. Silent when all pass; otherwise prints
what each failing tool said and exits 1.

    .venv/bin/python scripts/lint.py                  all three
    .venv/bin/python scripts/lint.py ruff [ARGS]      one of them, ARGS passed on
    .venv/bin/python scripts/lint.py ruff --fix       (e.g.: sort the imports after a merge)
    .venv/bin/python scripts/lint.py mypy
    .venv/bin/python scripts/lint.py imports --contract layers

The repository keeps ``daemons/``, ``messaging/`` and ``conf/`` at the top level while they
install as ``squall.daemons``, ``squall.messaging`` and ``squall.conf``
(``[tool.setuptools.package-dir]``); ``squall/daemons``, ``squall/messaging`` and
``squall/conf`` are symbolic links to them, so that import-linter, which reads a package from
its directory, sees the package as installed: the contracts run with plain ``lint-imports``
from the repository's root, as here. For mypy this lays the sources out as installed (copies,
in the environment's ``squall-lint/`` folder, where mypy keeps its cache between runs) and
names the repository's files in what it reports.
"""
from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORK = Path(sys.prefix) / "squall-lint"  # per environment: the layout and mypy's cache


def package_roots(repo: Path = REPO) -> dict[str, Path]:
    """Installed package -> its directory in the repository, for each package-dir entry."""
    dirs = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-dir"]
    return {package: repo / folder for package, folder in dirs.items()}


def installed_layout(target: Path, repo: Path = REPO) -> None:
    """Copy every ``.py`` file under ``target`` where it installs (mtimes kept, so mypy's
    cache stays valid for unchanged files)."""
    for package, root in package_roots(repo).items():
        dest = target / Path(*package.split("."))
        for module in root.rglob("*.py"):
            rel = module.relative_to(root)
            if "__pycache__" in rel.parts:
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(module, dest / rel)
    (target / "squall" / "py.typed").touch()


def repo_path(line: str, repo: Path = REPO) -> str:
    """A line of mypy's report with the layout's path turned into the repository's."""
    for package, root in sorted(package_roots(repo).items(), key=lambda kv: -len(kv[0])):
        prefix = package.replace(".", "/") + "/"
        if line.startswith(prefix):
            return str(root.relative_to(repo)) + "/" + line[len(prefix):]
    return line


def _run(argv: list[str], cwd: Path) -> tuple[int, str]:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def ruff(args: list[str]) -> tuple[int, str]:
    return _run([str(Path(sys.executable).with_name("ruff")), "check", "--quiet", *args], REPO)


def _fresh_layout() -> Path:
    layout = WORK / "layout"
    shutil.rmtree(layout, ignore_errors=True)  # a module removed from the repository goes too
    installed_layout(layout)
    return layout


def mypy(args: list[str]) -> tuple[int, str]:
    layout = _fresh_layout()
    code, out = _run([sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
                      "--cache-dir", str(WORK / "mypy-cache"), "--no-error-summary", *args], layout)
    return code, "\n".join(repo_path(line) for line in out.splitlines())


def imports(args: list[str]) -> tuple[int, str]:
    """``lint-imports`` as anyone runs it, from the repository's root (it puts the working
    directory first on sys.path: ``squall`` is the repository's, its links included)."""
    lint = Path(sys.executable).with_name("lint-imports")
    return _run([str(lint), "--no-cache", "--no-logo", *args], REPO)


TOOLS = {"ruff": ruff, "mypy": mypy, "imports": imports}


def main(argv: list[str]) -> int:
    if argv and argv[0] in TOOLS:
        chosen = {argv[0]: argv[1:]}
    elif not argv:
        chosen = {name: [] for name in TOOLS}
    else:
        print(__doc__, file=sys.stderr)
        return 2
    for needed in ("ruff", "lint-imports"):
        if not Path(sys.executable).with_name(needed).exists():
            print(f"{needed} is missing from {sys.prefix}: install the test extra (pip install -e '.[test]')",
                  file=sys.stderr)
            return 2
    WORK.mkdir(exist_ok=True)
    failed = False
    with open(WORK / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once would share the layout
        for name, args in chosen.items():
            code, out = TOOLS[name](args)
            if code != 0:
                failed = True
                print(f"--- {name} (exit {code}):\n{out.rstrip()}", file=sys.stderr)
            elif args and out.strip():  # asked for something (e.g. --fix): say what it did
                print(out.rstrip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
