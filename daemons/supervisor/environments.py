"""Topology Python environments on a supervisor: a venv per requirements file, built in the
background, shared by the topologies that ship the same file, handed to their workers.

A topology whose bundle names a requirements file (``topology.python.requirements``, see
``squall.daemons.requirements``) gets a venv under ``<local dir>/venvs/<key>``, where the
key hashes the checked requirements, the interpreter, the operator's pip arguments and what
squall runs from: a second topology with the same file, or the same one resubmitted, reuses
it. The venv is made with the workers' interpreter (the runtime laid out for them under
``supervisor.worker.runtime.dir`` when they need one, see ``worker_runtime``) and sees the
packages squall runs from there through a ``.pth`` file after its own, so pip installs only
what squall's environment lacks or pins differently, and a multilang child run by the
venv's ``python`` sees both. pip runs as the supervisor (root), so only wheels are
installed (``--only-binary=:all:``: no build script runs) unless the operator's
``supervisor.venv.pip.args`` say otherwise, from the index pip is configured with on this
host (pip.conf, ``PIP_*``), within ``supervisor.venv.build.timeout.secs`` and
``supervisor.venv.max.mb`` (the venv and pip's temporary files, looked at every second:
pip's downloads go to a temporary folder beside the venv). The finished
tree belongs to root and is readable, not writable, by the workers' users;
``.squall-venv.json`` appears last, so a venv without it is a build that did not finish and
is made again.

A worker is handed its venv in ``SQUALL_TOPOLOGY_VENV`` (with ``VIRTUAL_ENV`` and the venv's
``bin`` first on ``PATH``), and ``topology.environment``'s variables.
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from squall import config as _config
from squall.daemons import requirements as reqs
from squall.daemons.credentials import without_daemon_secret_env
from squall.daemons.local_state import read_regular, set_tree_modes, tree_bytes, write_atomic
from squall.daemons.requirements import MARKER
from squall.daemons.supervisor import launcher
from squall.daemons.timers import SYSTEM_CLOCK, Clock
from squall.errors import SquallError
from squall.multilang.codedir import VENV_ENV

RUNTIME_PTH = "_squall_runtime.pth"  # squall's own packages, after the venv's
MAX_CONF_BYTES = 1 << 20
LOG_TAIL_LINES = 12
LOG_TAIL_CHARS = 2000
SIZE_CHECK_SECS = 1.0  # how often a running build step's disk use is looked at
# squall's arguments to ``pip install``; the operator's come after them and may override them.
PIP_INSTALL = ("install", "--no-input", "--disable-pip-version-check", "--root-user-action=ignore",
               "--only-binary=:all:")


SITE_OF = "import sys, sysconfig; open(sys.argv[1], 'w').write(sysconfig.get_path('purelib'))"
DESCRIBE = ("import json, platform, sysconfig; p = sysconfig.get_paths(); "
            "print(json.dumps([platform.python_version(), p['purelib'], p['platlib']]))")


def worker_python(conf: Mapping[str, Any]) -> str:
    """The interpreter workers run: the default command's (the runtime's, when the supervisor
    laid one out), else this one (an operator's own command is taken to run this Python)."""
    command = launcher.worker_prefix(conf)
    return command[0] if list(command[1:]) == list(launcher.DEFAULT_WORKER_COMMAND[1:]) else sys.executable


def describe_python(python: str) -> tuple[str, list[str]]:
    """(version, site-packages folders) of the interpreter ``python``; EnvBuildError when it
    does not answer."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        paths = sysconfig.get_paths()
        return platform.python_version(), list(dict.fromkeys([paths["purelib"], paths["platlib"]]))
    try:
        out = subprocess.run([python, "-I", "-c", DESCRIBE], capture_output=True, text=True, timeout=60, check=True)
        version, purelib, platlib = json.loads(out.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise EnvBuildError(f"cannot ask the workers' Python {python} where its packages are: {exc}") from None
    return str(version), list(dict.fromkeys([str(purelib), str(platlib)]))


class EnvBuildError(SquallError, RuntimeError):
    """A topology environment that cannot be had; the text says why, for its errors."""


@dataclass(frozen=True)
class EnvSpec:
    """What one topology's bundle asks of its environment."""

    requirements: tuple[str, ...]          # checked lines; empty: no venv
    source: str                            # the requirements file, relative to the code
    variables: Mapping[str, str] = field(default_factory=dict)  # topology.environment


@dataclass(frozen=True)
class EnvStatus:
    """``ready``: the worker can launch; ``failure``: (when, why) the environment failed."""

    ready: bool
    failure: tuple[float, str] | None = None


def read_spec(bundle: Path) -> EnvSpec:
    """The environment a downloaded bundle asks for; EnvBuildError naming the problem."""
    try:
        conf = _config.validate(json.loads(read_regular(bundle / "conf.json", MAX_CONF_BYTES)))
    except (OSError, ValueError, _config.ConfigError) as exc:
        raise EnvBuildError(f"cannot read the topology's conf.json: {exc}") from None
    variables = dict(conf.get("topology.environment") or {})
    path = conf.get(reqs.REQUIREMENTS_KEY)
    if path is None:
        return EnvSpec((), "", variables)
    try:
        rel = reqs.check_path(path)
        data = read_regular(bundle / "code" / rel, reqs.MAX_BYTES)
        return EnvSpec(tuple(reqs.check_requirements(data, rel)), rel, variables)
    except reqs.RequirementsError as exc:
        raise EnvBuildError(str(exc)) from None
    except (OSError, ValueError) as exc:
        raise EnvBuildError(f"cannot read the requirements file {path!r}: {exc}") from None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - 64 * 1024))
            lines = fh.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])[-LOG_TAIL_CHARS:]




def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill a build step's whole process group (it has a session of its own) and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def open_to_workers(root: Path) -> None:
    """Directories 0755, files 0644 (0755 when executable): the workers' users read and run
    what is there and change nothing (it stays the supervisor's)."""
    set_tree_modes(root, 0o755, 0o644, 0o755)


class TopologyEnvironments:
    """The venvs under ``root`` for the bundles under ``code_root``. ``status`` and ``request``
    are asked from the supervisor's loop; builds run on threads of their own and call
    ``on_done`` when they end. ``root_mode``: 0711 when workers run as other users."""

    def __init__(self, root: Path, code_root: Path, conf: Mapping[str, Any], logger: Any,
                 on_done: Callable[[], None], clock: Clock = SYSTEM_CLOCK, root_mode: int = 0o700,
                 python: str | None = None) -> None:
        self.root = root
        self.code_root = code_root
        self.log = logger
        self.on_done = on_done
        self.clock = clock
        self.root_mode = root_mode
        self.python = python or worker_python(conf)
        self.pip_args = [str(a) for a in conf["supervisor.venv.pip.args"]]
        self.timeout = float(conf["supervisor.venv.build.timeout.secs"])
        self.retry = float(conf["supervisor.venv.retry.secs"])
        self.cache_max = int(conf["supervisor.venv.cache.max"])
        self.max_bytes = int(conf["supervisor.venv.max.mb"]) * 1024 * 1024
        self.python_version, self.runtime_paths = describe_python(self.python)
        self.built = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._specs: dict[tuple[str, str], EnvSpec | EnvBuildError] = {}
        self._in_flight: set[str] = set()                  # keys being built
        self._failures: dict[str, tuple[float, str]] = {}  # key -> (when, why) of its last build
        self._pids: set[int] = set()  # build processes running now

    # -- what a bundle needs -----------------------------------------------------------------
    def spec(self, topology_id: str, digest: str) -> EnvSpec:
        """The bundle's environment (read once per digest); EnvBuildError when it is unusable."""
        cache_key = (topology_id, digest)
        found = self._specs.get(cache_key)
        if found is None:
            try:
                found = read_spec(self.code_root / topology_id)
            except EnvBuildError as exc:
                found = exc
            self._specs[cache_key] = found
        if isinstance(found, EnvBuildError):
            raise found
        return found

    def key(self, spec: EnvSpec) -> str:
        return reqs.environment_key(spec.requirements, os.path.realpath(self.python), self.python_version,
                                    self.pip_args, self.runtime_paths)

    def venv(self, spec: EnvSpec) -> Path | None:
        return self.root / self.key(spec) if spec.requirements else None

    def status(self, topology_id: str, digest: str) -> EnvStatus:
        """Whether the topology's worker may launch as far as its environment goes."""
        try:
            spec = self.spec(topology_id, digest)
        except EnvBuildError as exc:
            return EnvStatus(False, (0.0, f"topology environment refused: {exc}"))
        target = self.venv(spec)
        if target is None or (target / MARKER).is_file():
            return EnvStatus(True)
        with self._lock:
            if target.name in self._in_flight:
                return EnvStatus(False)
            return EnvStatus(False, self._failures.get(target.name))

    def request(self, topology_id: str, digest: str) -> None:
        """Start building the topology's venv unless it is built, being built, or failed
        less than ``supervisor.venv.retry.secs`` ago."""
        try:
            spec = self.spec(topology_id, digest)
        except EnvBuildError:
            return  # reported through status; a new digest is a new spec
        target = self.venv(spec)
        if target is None or (target / MARKER).is_file():
            return
        key = target.name
        with self._lock:
            failed = self._failures.get(key)
            if key in self._in_flight or (failed is not None and self.clock.time() - failed[0] < self.retry):
                return
            self._in_flight.add(key)
        threading.Thread(target=self._build_thread, args=(topology_id, spec, target), daemon=True,
                         name=f"venv-{key[:8]}").start()

    def launch_env(self, topology_id: str, digest: str, path: str) -> dict[str, str]:
        """The variables of a worker of the topology: ``topology.environment``, and its venv
        (``path``: the supervisor's PATH); EnvBuildError when the venv is not there."""
        spec = self.spec(topology_id, digest)
        out = dict(spec.variables)
        target = self.venv(spec)
        if target is None:
            return out
        try:
            os.utime(target / MARKER)  # last used: what cleanup keeps longest
        except OSError as exc:
            raise EnvBuildError(f"the topology's environment {target} is gone: {exc}") from None
        out.update({VENV_ENV: str(target), "VIRTUAL_ENV": str(target),
                    "PATH": str(target / "bin") + (os.pathsep + path if path else "")})
        return out

    # -- building ----------------------------------------------------------------------------
    def build_pids(self) -> set[int]:
        """The build processes running now: the supervisor's own children, not strays."""
        with self._lock:
            return set(self._pids)

    def _run(self, cmd: Sequence[str], deadline: float, log_file: Path, cwd: Path, env: Mapping[str, str],
             what: str, watched: Sequence[Path] = ()) -> None:
        """Run one build step, its output appended to ``log_file``; EnvBuildError when it fails,
        is still running at ``deadline`` or the files under ``watched`` grow past
        ``supervisor.venv.max.mb`` (then its whole process group is killed)."""
        left = deadline - self.clock.monotonic()
        if left <= 0:
            raise EnvBuildError(f"{what} did not start within supervisor.venv.build.timeout.secs")
        with open(log_file, "ab") as out, self._lock:  # known before the supervisor looks for strays
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            self._pids.add(proc.pid)
        try:
            code = None
            while code is None:
                try:
                    code = proc.wait(min(left, SIZE_CHECK_SECS))
                except subprocess.TimeoutExpired:
                    left = deadline - self.clock.monotonic()
                    if left <= 0:
                        _kill_group(proc)
                        raise EnvBuildError(f"{what} did not finish within supervisor.venv.build.timeout.secs; "
                                            f"its last lines:\n{_tail(log_file)}") from None
                    if watched:
                        self._check_size(watched, what, lambda: _kill_group(proc))
        finally:
            with self._lock:
                self._pids.discard(proc.pid)
        if code != 0:
            raise EnvBuildError(f"{what} exited {code}:\n{_tail(log_file)}")

    def _check_size(self, watched: Sequence[Path], what: str, stop: Callable[[], None] = lambda: None) -> None:
        """EnvBuildError (after ``stop()``) when the files under ``watched`` take more than
        ``supervisor.venv.max.mb``."""
        used = tree_bytes(watched, self.max_bytes)
        if used > self.max_bytes:
            stop()
            raise EnvBuildError(f"{what} took more than supervisor.venv.max.mb ({self.max_bytes // (1024 * 1024)} "
                                f"MB) of disk: {used // (1024 * 1024)} MB so far")

    def _build_thread(self, topology_id: str, spec: EnvSpec, target: Path) -> None:
        key = target.name
        started = self.clock.monotonic()
        try:
            self.build(spec, target)
            self.built += 1
            self.log.info("topology environment built", topology=topology_id, venv=str(target), source=spec.source,
                          requirements=len(spec.requirements), secs=round(self.clock.monotonic() - started, 1))
            with self._lock:
                self._failures.pop(key, None)
        except Exception as exc:  # noqa: BLE001 - a build thread must report, not vanish
            self.failed += 1
            text = str(exc) if isinstance(exc, EnvBuildError) else f"{type(exc).__name__}: {exc}"
            text = f"topology environment from {spec.source} could not be built: {text}"
            self.log.error("topology environment failed", topology=topology_id, venv=str(target), error=text)
            with self._lock:
                self._failures[key] = (self.clock.time(), text)
        finally:
            with self._lock:
                self._in_flight.discard(key)
            self.on_done()

    def build(self, spec: EnvSpec, target: Path) -> None:
        """Make the venv at ``target`` (EnvBuildError naming the step that failed)."""
        deadline = self.clock.monotonic() + self.timeout
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, self.root_mode)
        shutil.rmtree(target, ignore_errors=True)  # a build that did not finish
        log_file = self.root / f".{target.name}.log"
        log_file.unlink(missing_ok=True)
        scratch = self.root / f".{target.name}.tmp"  # pip's downloads and unpacked archives, counted
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(mode=0o700)
        try:
            self._build(spec, target, deadline, log_file, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _build(self, spec: EnvSpec, target: Path, deadline: float, log_file: Path, scratch: Path) -> None:
        env = without_daemon_secret_env(os.environ)
        env.pop("PYTHONPATH", None)
        env["PIP_NO_INPUT"] = "1"
        env["TMPDIR"] = str(scratch)
        self._run([self.python, "-m", "venv", "--without-pip", str(target)], deadline, log_file, self.root, env,
                  "making the venv")
        answer = self.root / f".{target.name}.site"
        self._run([str(target / "bin" / "python"), "-c", SITE_OF, str(answer)], deadline, log_file, self.root, env,
                  "asking the venv for its site-packages")
        site = answer.read_text(encoding="utf-8").strip()
        answer.unlink()
        if not site.startswith(os.path.join(str(target), "")) or not os.path.isdir(site):
            raise EnvBuildError(f"the new venv has no {site}")
        # squall's packages after the venv's own: pip sees them as installed, and a child
        # run by the venv's python imports squall, pystorm and streamparse from there.
        lines = [f"import sys, site; p = {p!r}; p in sys.path or site.addsitedir(p)\n" for p in self.runtime_paths]
        Path(site, RUNTIME_PTH).write_text("".join(lines), encoding="utf-8")
        requirements = target / "requirements.txt"
        requirements.write_text("\n".join(spec.requirements) + "\n", encoding="utf-8")
        python = target / "bin" / "python"
        self._run([str(python), "-m", "pip", *PIP_INSTALL, *self.pip_args, "-r", str(requirements)], deadline,
                  log_file, target, env, "pip install", watched=(target, scratch))
        self._check_size((target,), "pip install")
        open_to_workers(target)
        write_atomic(target / MARKER, json.dumps({"site": site, "python": self.python_version,
                                                  "requirements": list(spec.requirements)}).encode())
        os.chmod(target / MARKER, 0o644)

    # -- cleaning up -------------------------------------------------------------------------
    def cleanup(self, keep: set[str]) -> list[str]:
        """Forget the specs of topologies not in ``keep``; remove the venvs none of the kept
        topologies uses beyond the ``supervisor.venv.cache.max`` used last, and unfinished
        ones not being built. Returns the keys removed."""
        for cache_key in [k for k in self._specs if k[0] not in keep]:
            del self._specs[cache_key]
        used = set()
        for found in self._specs.values():
            if isinstance(found, EnvSpec) and found.requirements:
                used.add(self.key(found))
        with self._lock:
            busy = set(self._in_flight)
        try:
            entries = [e for e in self.root.iterdir() if e.is_dir() and not e.name.startswith(".")]
        except FileNotFoundError:
            return []
        spare: list[tuple[float, Path]] = []
        removed = []
        for entry in entries:
            if entry.name in used or entry.name in busy:
                continue
            try:
                spare.append((os.stat(entry / MARKER).st_mtime, entry))
            except OSError:  # unfinished, and no build of it is running
                spare.append((float("-inf"), entry))
        spare.sort(reverse=True)
        for _mtime, entry in spare[self.cache_max:] + [s for s in spare[:self.cache_max] if s[0] == float("-inf")]:
            shutil.rmtree(entry, ignore_errors=True)
            shutil.rmtree(self.root / f".{entry.name}.tmp", ignore_errors=True)
            (self.root / f".{entry.name}.log").unlink(missing_ok=True)
            removed.append(entry.name)
        return removed
