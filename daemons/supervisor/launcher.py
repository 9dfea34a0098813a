"""Starting one worker process: its directory and files, whom it runs as, where it lives.

A worker starts in its own session (signals meant for the supervisor do not reach it) and,
before it execs, joins its cgroup and drops to its identity (``worker_user``), so nothing it
runs is ever outside its group or runs as the supervisor. Its directory holds what the
supervisor hands it: a copy of the supervisor's config without the daemons' secrets
(``SQUALL_CONF``), its topology's credentials (``SQUALL_WORKER_CREDENTIALS``, read and
removed at its start) and the assignment it is launched for; ``SQUALL_WORKER_ID`` names it
to every process it starts. What it prints before its own log is set up goes to
``worker.out``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from squall.daemons import local_state
from squall.daemons.credentials import ENV_VAR as CREDENTIALS_ENV
from squall.daemons.credentials import WorkerCredentials, without_daemon_secret_env, write_credentials
from squall.daemons.supervisor import worker_files, worker_runtime
from squall.daemons.supervisor.containment import WORKER_ID_ENV, Containment
from squall.daemons.supervisor.worker_user import WorkerIdentity
from squall.errors import SquallError

DEFAULT_WORKER_COMMAND = (sys.executable, "-m", "squall.daemons.worker.main")
WORKER_CONF = "squall.yaml"
PROBE_TIMEOUT_SECS = 60.0
NO_PASSAGE = 17  # the probe's exit code: its user cannot pass through to the local dir
PASSAGE_PROBLEM = "cannot pass through"


class LaunchError(SquallError, RuntimeError):
    """The worker could not be started; the message says why."""


def worker_prefix(conf: Mapping[str, Any]) -> list[str]:
    return list(conf.get("supervisor.worker.command") or DEFAULT_WORKER_COMMAND)


def launch(cmd: Sequence[str], wdir: Path, layout: local_state.LocalLayout, worker_id: str,
           worker_conf: bytes, credentials: WorkerCredentials, launch_file: Path,
           who: WorkerIdentity | None, containment: Containment,
           memory_max: int | None, topology_env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Prepare ``wdir`` and start the worker there; LaunchError (or OSError) when it fails.
    ``launch_file`` is the assignment written for it (it may not exist); ``topology_env``:
    its topology's variables and venv (``environments.launch_env``), under squall's own."""
    wdir.mkdir(parents=True, exist_ok=True)
    conf_file = wdir / WORKER_CONF
    local_state.write_atomic(conf_file, worker_conf)
    env = without_daemon_secret_env(os.environ)  # the supervisor's token and password stay here
    env.update(topology_env or {})
    env.update({"SQUALL_CONF": str(conf_file), WORKER_ID_ENV: worker_id,
                CREDENTIALS_ENV: str(write_credentials(wdir, credentials))})
    # Opened while the directory is still the supervisor's: nothing can be planted there yet.
    out = open(layout.worker_early_output(worker_id), "ab")  # noqa: SIM115 - closed below
    fd = None
    try:
        if who is not None:
            for path in (conf_file, Path(env[CREDENTIALS_ENV]), launch_file):
                if path.exists():
                    worker_files.give(path, who, 0o600)
            worker_files.give(wdir, who, 0o700)
            env = who.environ(env, str(wdir))
        setup, fd = containment.prepare(worker_id, memory_max, who)
        return subprocess.Popen(list(cmd), cwd=wdir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=setup)
    except subprocess.SubprocessError as exc:  # the setup failed in the child
        raise LaunchError(f"cannot start the worker as uid {who.uid if who else os.getuid()}: {exc}") from None
    finally:
        out.close()
        if fd is not None:
            os.close(fd)


def probe(prefix: Sequence[str], who: WorkerIdentity, reach: Path | None = None) -> str | None:
    """Whether ``who`` can start a worker with ``prefix`` (a Python running squall's worker
    main: that Python and squall must be readable by that user) and pass through ``reach``
    (where the supervisor's local dir is, or the nearest part of it that exists): None if so, else
    why not. A command of the operator's own is trusted to work for its user."""
    if list(prefix[1:]) != list(DEFAULT_WORKER_COMMAND[1:]):
        return None
    setup, _ = Containment().prepare("probe", None, who)
    check = ("import os, sys\ntry:\n    sys.argv[1:] and os.chdir(sys.argv[1])\nexcept OSError:\n"
             f"    sys.exit({NO_PASSAGE})\nimport squall.daemons.worker.main")
    where = [] if reach is None else [str(_existing(reach))]
    try:
        result = subprocess.run([prefix[0], "-c", check, *where], cwd="/",
                                env={"PATH": os.environ.get("PATH", ""), "HOME": "/"},
                                capture_output=True, timeout=PROBE_TIMEOUT_SECS, preexec_fn=setup)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"uid {who.uid} cannot run {prefix[0]}: {exc}"
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).decode(errors="replace").strip().splitlines()[-1:]
        if where and result.returncode == NO_PASSAGE:
            return f"uid {who.uid} {PASSAGE_PROBLEM} {where[0]} to its worker's directory"
        return f"uid {who.uid} cannot run {prefix[0]} with squall: {' '.join(tail) or result.returncode}"
    return None


def _existing(path: Path) -> Path:
    """``path`` or its nearest existing parent (a local dir not made yet)."""
    while not path.exists() and path.parent != path:
        path = path.parent
    return path


def resolve_worker_command(conf: Mapping[str, Any], who: WorkerIdentity | None,
                           reach: Path | None = None) -> tuple[list[str], str | None]:
    """The command prefix that starts workers as ``who`` and what stands in the way (None:
    nothing). With the default command and an interpreter ``who`` cannot run (one in a
    private home), the workers' runtime is laid out under ``supervisor.worker.runtime.dir``
    (worker_runtime) and its Python is used instead."""
    prefix = worker_prefix(conf)
    if who is None:
        return prefix, None
    problem = probe(prefix, who, reach)
    if problem is None or conf.get("supervisor.worker.command") or PASSAGE_PROBLEM in problem:
        return prefix, problem  # nothing to do, the operator's own command, or no Python would help
    try:
        python = worker_runtime.prepare(Path(conf["supervisor.worker.runtime.dir"]))
    except worker_runtime.WorkerRuntimeError as exc:
        return prefix, f"{problem}, and {exc}"
    runtime_prefix = [str(python), *DEFAULT_WORKER_COMMAND[1:]]
    return runtime_prefix, probe(runtime_prefix, who, reach)
