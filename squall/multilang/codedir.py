"""Where a shell component's child runs, and which files its command names.

Storm runs a child from the ``resources/`` folder of the topology jar. squall runs it from
the topology's code directory: on a worker, the ``code/`` folder of the extracted bundle
(the worker sets $SQUALL_CODE_DIR when it loads the bundle); with ``squall run``, the folder
of the topology file (or the project folder of a streamparse project). A component's own
``cwd`` is taken relative to that folder.
"""
from __future__ import annotations

import os
import posixpath
import sys
from collections.abc import Iterable, Mapping, Sequence

CODE_DIR_ENV = "SQUALL_CODE_DIR"
VENV_ENV = "SQUALL_TOPOLOGY_VENV"  # the topology's own Python environment, set by the supervisor
# Arguments with these endings name a file the child needs from the code directory.
SCRIPT_SUFFIXES = (".py", ".js", ".mjs", ".cjs", ".rb", ".sh", ".pl", ".php", ".lua", ".R", ".jar")


def code_dir() -> str:
    """The topology's code directory in this process ($SQUALL_CODE_DIR, else the cwd)."""
    return os.environ.get(CODE_DIR_ENV) or os.getcwd()


def set_code_dir(path: str | os.PathLike[str]) -> None:
    """Record the topology's code directory for the shell components of this process."""
    os.environ[CODE_DIR_ENV] = os.fspath(path)


def child_cwd(cwd: str | None, change_child_cwd: bool) -> str | None:
    """The working directory of a child: the code directory (joined with ``cwd``), or the
    worker's own when the component asked not to change it (Storm's changeChildCWD(false))."""
    if not change_child_cwd:
        return None
    base = code_dir()
    return os.path.join(base, cwd) if cwd else base


def child_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    """The child's environment: the worker's, with the topology's own environment's ``bin``
    (where it has one) and then the worker's interpreter folder first on PATH (so ``python3``
    and ``streamparse_run`` are the topology's, else the worker's), then ``extra`` (a PATH in
    ``extra`` is appended, as Storm's ShellProcess.setEnv does)."""
    env = dict(os.environ)
    venv = env.get(VENV_ENV)
    bindirs = ([os.path.join(venv, "bin")] if venv else []) + [os.path.dirname(sys.executable)]
    path = env.get("PATH", "")
    env["PATH"] = os.pathsep.join(bindirs) + (os.pathsep + path if path else "")
    for key, value in (extra or {}).items():
        if key == "PATH":
            env["PATH"] = env["PATH"] + os.pathsep + value
        else:
            env[key] = value
    return env


def script_args(command: Sequence[str]) -> list[str]:
    """The arguments of ``command`` that name script files (by their ending)."""
    return [a for a in command if isinstance(a, str) and not a.startswith("-")
            and a.endswith(SCRIPT_SUFFIXES)]


def missing_files(needed: Iterable[tuple[str, str]], shipped: set[str]) -> list[str]:
    """Problems with (component, relative path) pairs that are not among ``shipped`` (paths
    relative to the code directory, POSIX style)."""
    problems = []
    for component, path in needed:
        norm = posixpath.normpath(path.replace(os.sep, "/"))
        if norm.startswith("../") or norm == "..":
            problems.append(f"component {component!r} names {path!r}, outside the topology's folder")
        elif norm not in shipped:
            problems.append(f"component {component!r} runs {path!r}, which is not in the code bundle "
                            "(missing, or left out as a dotfile, by .squallignore or a skipped folder)")
    return problems
