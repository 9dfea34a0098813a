"""What a supervisor hands to one worker: a config without the daemons' secrets, and the
topology's own credentials in a file only the worker's owner can read.

The worker's config (``SQUALL_CONF``) is the supervisor's effective config minus
``DAEMON_SECRET_KEYS``, and its environment the supervisor's minus ``DAEMON_SECRET_ENV``.
The topology's ZooKeeper password, the daemons' digest identity (a hash, for the ACLs of the
nodes the worker creates) and the topology's CURVE key pair go to
``workers/<id>/credentials.json`` (mode 0600), named by ``SQUALL_WORKER_CREDENTIALS``; the
worker reads it at start and removes it.
"""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.config import TOKEN_ENV
from squall.daemons.fields import as_str, field_value
from squall.daemons.local_state import read_private, write_atomic
from squall.daemons.state.acls import PASSWORD_ENV, ZkAuth
from squall.daemons.state.records import TopologySecrets, check_name
from squall.messaging import CurveKeys

ENV_VAR = "SQUALL_WORKER_CREDENTIALS"
FILE_NAME = "credentials.json"
FORMAT_VERSION = 1
MAX_FILE_BYTES = 64 * 1024
# Keys a worker (and the user code in it) must never see.
DAEMON_SECRET_KEYS = ("zookeeper.auth.user", "zookeeper.auth.password", "squall.token")
# Environment variables a worker must never inherit: the daemons' API token and ZooKeeper password.
DAEMON_SECRET_ENV = (TOKEN_ENV, PASSWORD_ENV)


def without_daemon_secrets(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``conf`` without the daemons' secrets: what workers (and clients) may read."""
    return {k: v for k, v in conf.items() if k not in DAEMON_SECRET_KEYS}


def without_daemon_secret_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the daemons' secrets: the environment a worker starts from."""
    return {k: v for k, v in environ.items() if k not in DAEMON_SECRET_ENV}


@dataclass(frozen=True)
class WorkerCredentials:
    """One topology's credentials as a worker holds them."""

    topology_id: str
    secrets: TopologySecrets
    daemon_id: str | None  # the daemons' ZooKeeper digest identity; None: ZooKeeper auth off

    def zk_auth(self) -> ZkAuth:
        return ZkAuth.for_worker(self.topology_id, self.secrets.zk_password, self.daemon_id)

    def curve_keys(self) -> CurveKeys:
        return CurveKeys(self.secrets.curve_public, self.secrets.curve_secret)

    def to_json(self) -> bytes:
        return json.dumps({"v": FORMAT_VERSION, "topology": self.topology_id,
                           "daemon_id": self.daemon_id, **self.secrets.to_dict()}).encode()

    @classmethod
    def from_json(cls, data: bytes) -> WorkerCredentials:
        """ValueError naming the problem when ``data`` is not a credentials file."""
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict) or obj.get("v") != FORMAT_VERSION:
            raise ValueError(f"expected a version {FORMAT_VERSION} credentials object")
        daemon_id = obj.get("daemon_id")
        if daemon_id is not None:
            as_str(daemon_id, "daemon_id")
        return cls(check_name(field_value(obj, "topology"), "topology"),
                   TopologySecrets.from_dict(obj), daemon_id)

    def __repr__(self) -> str:  # never print secrets
        return f"WorkerCredentials(topology_id={self.topology_id!r})"


def write_credentials(worker_dir: Path, creds: WorkerCredentials) -> Path:
    """Write the file a worker reads (0600 from its creation); returns its path."""
    path = Path(worker_dir) / FILE_NAME
    write_atomic(path, creds.to_json())
    return path


def read_credentials(path: str | os.PathLike[str], topology_id: str) -> WorkerCredentials:
    """Read a worker's credentials file and remove it; ValueError/OSError naming the problem.

    The file must be the caller's own and readable by nobody else, and be for ``topology_id``."""
    path = Path(path)
    data = read_private(path, MAX_FILE_BYTES)
    try:
        creds = WorkerCredentials.from_json(data)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    if creds.topology_id != topology_id:
        raise ValueError(f"{path} holds credentials of {creds.topology_id!r}, not {topology_id!r}")
    try:
        path.unlink()
    except OSError:
        pass  # best effort: it stays 0600 in the worker's own dir
    return creds
