"""A copy of this Python and its packages that workers running as other users can execute.

Workers of a root supervisor run as users of their own (``worker_user``), who cannot enter a
private home directory: a virtual environment under ``/root``, or pyenv's interpreters in
``/root/.pyenv``, are closed to them. Rather than open those (or fall back to running user
code as root), the supervisor lays out the same interpreter and packages under
``supervisor.worker.runtime.dir`` (outside any home, every directory 0755, owned by root):

    <dir>/<key>/base/    the interpreter and its standard library, when the original is closed
    <dir>/<key>/env/     a virtual environment on it holding this environment's packages,
                         squall included (an editable install's sources copied in its place)
    <dir>/<key>/bin/python   what workers run (it finds a copied shared libpython too)

Files are hard links where the file system allows (nothing is copied, an upgrade replaces
files rather than writing into them) and copies elsewhere. ``key`` is a digest of everything
copied (names, sizes, modification times), so an upgraded or edited install gets a fresh
runtime and an unchanged one is reused; a runtime appears only by a rename, whole, and at
most ``KEEP`` are kept.
"""
from __future__ import annotations

import ast
import hashlib
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

from squall.errors import SquallError

LAYOUT = 2  # how a runtime is laid out: a change here never reuses one laid out the old way
KEEP = 3  # runtimes kept: the newest, and older ones workers started earlier may still use
# Parts of the standard library a worker never imports: left out of a copied base.
STDLIB_SKIP = {"test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3", "site-packages",
               "dist-packages"}


class WorkerRuntimeError(SquallError, RuntimeError):
    """The runtime could not be laid out; the message says where and why."""


def others_can_run(path: Path) -> bool:
    """Whether a user with no rights of its own here can reach and read ``path``: every
    directory on the way passable by others, the file readable by them."""
    real = Path(os.path.realpath(path))
    try:
        for parent in reversed(real.parents):
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
        return bool(os.stat(real).st_mode & stat.S_IROTH)
    except OSError:
        return False


def _base_executable() -> Path:
    """The interpreter a virtual environment's ``python`` stands for (this one outside a venv)."""
    return Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))


def _site_dirs() -> list[Path]:
    """This environment's own package directories (never the base interpreter's, which a
    venv does not see either)."""
    dirs: list[Path] = []
    for key in ("purelib", "platlib"):
        path = Path(sysconfig.get_paths()[key])
        if path.is_dir() and all(path.resolve() != d.resolve() for d in dirs):
            dirs.append(path)
    return dirs


def _editable_maps(site_dir: Path) -> dict[str, Path]:
    """Package name -> source folder of every setuptools editable install in ``site_dir``
    (its ``__editable___*_finder.py`` holds a literal MAPPING)."""
    found: dict[str, Path] = {}
    for finder in site_dir.glob("__editable___*_finder.py"):
        for node in ast.parse(finder.read_text(encoding="utf-8")).body:
            value: ast.expr | None
            if isinstance(node, ast.Assign):
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id == "MAPPING" and value is not None:
                found.update({name: Path(src) for name, src in ast.literal_eval(value).items()})
    return found


def _walk(root: Path) -> Iterator[tuple[str, int, int]]:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):  # as the copy follows them
        # Byte code is written beside the sources whenever a module is first imported (by the
        # supervisor itself, by anything run from this environment): it says nothing about what
        # is installed, and counting it gave a fresh runtime, and pruned older ones that
        # running workers and their venvs still used, at every such write.
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            yield os.path.relpath(path, root), st.st_size, st.st_mtime_ns


def install_key(base_closed: bool, sources: list[Path]) -> str:
    """The runtime's name: a digest of the interpreter and of the sources' files (names,
    sizes, modification times; byte code left out)."""
    exe = _base_executable()
    st = exe.stat()  # a new interpreter (and so standard library) is a new file
    digest = hashlib.sha256(f"{LAYOUT}\0{exe}\0{st.st_size}\0{st.st_mtime_ns}\0{sys.version}\0{base_closed}".encode())
    for source in sources:
        digest.update(f"\0{source}".encode())
        for rel, size, mtime in _walk(source):
            digest.update(f"\0{rel}\0{size}\0{mtime}".encode())
    return digest.hexdigest()[:16]


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_tree(src: Path, dst: Path, skip: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    def ignore(directory: str, names: list[str]) -> set[str]:
        return {n for n in names if n in skip} if Path(directory) == src else set()

    # Links are followed (a package folder may be one: squall/daemons in a checkout). copytree's
    # own skipping of dangling links tests a relative link from the working directory, so it
    # would skip good ones too: the links that lead nowhere are dropped here instead.
    try:
        shutil.copytree(src, dst, symlinks=False, ignore=ignore, copy_function=_link_or_copy, dirs_exist_ok=True)
    except shutil.Error as exc:
        real = [(a, b, why) for a, b, why in exc.args[0] if os.path.exists(a)]
        if real:
            raise OSError(f"copying {src}: {real[:3]}") from None


def _lay_out(work: Path, runtime: Path, base_closed: bool) -> None:
    """The runtime in ``work``, to be renamed to ``runtime``: ``base/`` (when copied), ``env/``
    and ``bin/python``, the command workers run."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    exe = _base_executable()
    shared_lib = False
    if base_closed:
        prefix = Path(sys.base_prefix)
        (work / "base" / "bin").mkdir(parents=True)
        _link_or_copy(str(exe), str(work / "base" / "bin" / version))
        _copy_tree(prefix / "lib" / version, work / "base" / "lib" / version, STDLIB_SKIP)
        libdir = Path(sysconfig.get_config_var("LIBDIR") or prefix / "lib")
        for lib in libdir.glob(f"libpython{sys.version_info.major}.{sys.version_info.minor}*.so*"):
            _link_or_copy(str(lib), str(work / "base" / "lib" / lib.name))
            shared_lib = True
        exe = runtime / "base" / "bin" / version
    env = work / "env"
    site = env / "lib" / version / "site-packages"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python3").symlink_to(exe)
    (env / "pyvenv.cfg").write_text(f"home = {exe.parent}\ninclude-system-site-packages = false\n"
                                    f"version = {sys.version_info.major}.{sys.version_info.minor}."
                                    f"{sys.version_info.micro}\n", encoding="utf-8")
    os.chmod(env / "pyvenv.cfg", 0o644)  # a supervisor's umask is 077: its workers' users read this
    for site_dir in _site_dirs():
        editable = _editable_maps(site_dir)
        _copy_tree(site_dir, site, {"__pycache__"} | {p.name for p in site_dir.glob("__editable__*")})
        for name, source in editable.items():
            _copy_tree(source, site.joinpath(*name.split(".")))
    (work / "bin").mkdir()
    # An interpreter built with a shared libpython finds it by an absolute run path into its
    # closed prefix: the copy is told where its own is.
    libpath = f'LD_LIBRARY_PATH="{runtime}/base/lib${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" ' if shared_lib else ""
    wrapper = work / "bin" / "python"
    wrapper.write_text(f'#!/bin/sh\n{libpath}exec "{runtime}/env/bin/python3" "$@"\n', encoding="utf-8")
    os.chmod(wrapper, 0o755)


def _open_dirs(root: Path) -> None:
    for dirpath, _dirnames, _filenames in os.walk(root):
        os.chmod(dirpath, 0o755)


def prepare(directory: Path, keep: int = KEEP) -> Path:
    """The ``python`` of this environment's runtime under ``directory`` (laid out now, or an
    identical one reused). WorkerRuntimeError when it cannot be made or others cannot reach it."""
    base_closed = not others_can_run(_base_executable()) or not others_can_run(
        Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "os.py")
    sources: list[Path] = []
    for site_dir in _site_dirs():
        sources.append(site_dir)
        sources.extend(_editable_maps(site_dir).values())
    try:
        directory.mkdir(parents=True, exist_ok=True)
        os.chmod(directory, 0o755)
        if not others_can_run(directory):
            raise WorkerRuntimeError(f"supervisor.worker.runtime.dir {directory} is not reachable by other users: "
                                     "choose a directory whose parents every user may pass through")
        runtime = directory / install_key(base_closed, sources)
        python = runtime / "bin" / "python"
        if not python.is_file():
            work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory))
            try:
                _lay_out(work, runtime, base_closed)
                _open_dirs(work)
                try:
                    os.rename(work, runtime)
                except OSError:  # another supervisor here laid out the same runtime first
                    if not python.is_file():
                        raise
            finally:
                shutil.rmtree(work, ignore_errors=True)
        os.utime(runtime)  # the newest in use: kept by the pruning below
        _prune(directory, keep)
    except OSError as exc:
        raise WorkerRuntimeError(f"cannot lay out the workers' Python in {directory}: {exc}") from None
    return python


def _prune(directory: Path, keep: int) -> None:
    runtimes = sorted((p for p in directory.iterdir() if p.is_dir() and not p.name.startswith(".")),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    for old in runtimes[keep:]:
        shutil.rmtree(old, ignore_errors=True)
