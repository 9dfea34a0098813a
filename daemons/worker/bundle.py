"""The worker's view of an extracted code bundle: its conf.json and its topology."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from squall import config as _config
from squall.errors import SquallError
from squall.multilang.codedir import set_code_dir
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


def load_bundle_topology(bundle: Path) -> Topology:
    """Put the bundle's ``code/`` on sys.path and read ``topology.bin``."""
    code = bundle / "code"
    if not code.is_dir():
        raise WorkerError(f"code bundle at {bundle} has no code/ directory")
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

