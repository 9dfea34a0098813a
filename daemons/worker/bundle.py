"""The worker's view of an extracted code bundle: its conf.json and its topology."""
from __future__ import annotations

import json
import os
import site
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall import config as _config
from squall.daemons.requirements import environment_site
from squall.errors import SquallError
from squall.multilang.codedir import VENV_ENV, set_code_dir
from squall.topology import Topology, TopologyError


class WorkerError(SquallError, RuntimeError):
    """The worker cannot run (bad bundle, bad conf, cannot bind...); the text says why."""


def read_topology_conf(bundle: Path) -> dict[str, Any]:
    """The topology's conf.json, validated; WorkerError saying what is wrong."""
    path = bundle / "conf.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkerError(f"code bundle at {bundle} has no conf.json") from None
    except (OSError, ValueError) as exc:
        raise WorkerError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise WorkerError(f"{path} must hold a JSON object")
    try:
        return _config.validate(data)
    except _config.ConfigError as exc:
        raise WorkerError(f"{path}: {exc}") from None


def use_topology_venv(environ: Mapping[str, str] = os.environ) -> str | None:
    """Put the topology's own environment (``$SQUALL_TOPOLOGY_VENV``, built by the supervisor
    from its requirements file) on sys.path ahead of squall's; its site-packages, or None.
    What the worker imported already (squall and its dependencies) stays as it is."""
    venv = environ.get(VENV_ENV)
    if not venv:
        return None
    try:
        where = environment_site(venv)
    except (OSError, ValueError) as exc:
        raise WorkerError(f"the topology's environment {venv} cannot be used: {exc}") from None
    before = list(sys.path)
    site.addsitedir(where)  # with its .pth files; squall's own (the runtime's) are known already
    added = [p for p in sys.path if p not in before]
    sys.path[:] = added + before
    return where


def load_bundle_topology(bundle: Path) -> Topology:
    """Put the topology's environment, then the bundle's ``code/``, on sys.path and read
    ``topology.bin``."""
    code = bundle / "code"
    if not code.is_dir():
        raise WorkerError(f"code bundle at {bundle} has no code/ directory")
    use_topology_venv()
    if str(code) not in sys.path:
        sys.path.insert(0, str(code))
    set_code_dir(code)  # shell components run from here (Storm runs them from the jar's resources/)
    try:
        data = (bundle / "topology.bin").read_bytes()
    except OSError as exc:
        raise WorkerError(f"cannot read {bundle / 'topology.bin'}: {exc.strerror or exc}") from None
    try:
        return Topology.from_bytes(data)
    except TopologyError as exc:
        raise WorkerError(f"{bundle / 'topology.bin'}: {exc}") from None
    except Exception as exc:  # unpickling runs user imports (custom groupings)
        raise WorkerError(f"{bundle / 'topology.bin'} cannot be loaded from {code}: "
                          f"{type(exc).__name__}: {exc}") from None

