"""A nimbus child process with its own config and log file, stopped by PID (tests and tools).

``NimbusProcess(conf, work_dir).start()`` writes ``work_dir/squall.yaml`` (``conf`` plus a
free ``nimbus.port`` unless one is passed, and a relative ``squall.local.dir`` made absolute under
``work_dir``), runs
``python -m squall.cli nimbus`` with ``SQUALL_CONF`` pointing at it, and returns once the API
answers. ``stop()`` sends SIGTERM, then SIGKILL after a grace, and returns the exit code; a
nimbus that outlives the grace first prints every thread's stack to its log (faulthandler, on
SIGABRT), which ``log_tail`` then shows.

Secured like any cluster: unless ``conf`` names a token file already, it runs with the
``credentials`` given (shared by several nimbus processes of one cluster) or makes its own
under ``work_dir/security``; ``client()`` then presents the admin token and checks TLS.
"""
from __future__ import annotations

import http.client
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from squall.daemons.nimbus.access import TOKEN_ENV, ApiAccess
from squall.daemons.nimbus.auth import write_private
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.daemons.nimbus.credentials import ClusterCredentials, create
from squall.daemons.timers import SYSTEM_CLOCK, sleep


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class NimbusProcess:
    """One ``squall nimbus`` child process."""

    def __init__(self, conf: Mapping[str, Any], work_dir: str | os.PathLike[str],
                 port: int | None = None, credentials: ClusterCredentials | None = None) -> None:
        self.work_dir = Path(work_dir)
        self.conf = dict(conf)
        self.credentials = credentials
        if credentials is None and not self.conf.get("nimbus.auth.tokens.file"):
            self.credentials = create(self.work_dir / "security")
        if self.credentials is not None:
            self.conf.update(self.credentials.nimbus_conf())
        self.conf.setdefault("nimbus.host", "127.0.0.1")
        self.conf["nimbus.port"] = port or _free_port()
        # A relative local dir would be relative to the child's cwd: make that explicit.
        local = Path(str(self.conf.get("squall.local.dir") or "local"))
        self.conf["squall.local.dir"] = str(local if local.is_absolute() else self.work_dir / local)
        self.conf_path = self.work_dir / "squall.yaml"
        self.client_conf_path = self.work_dir / "client.yaml"  # for the CLI: admin token and CA
        self.log_path = self.work_dir / "nimbus.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.tail_lines = 15

    @property
    def address(self) -> str:
        return f"{self.conf['nimbus.host']}:{self.conf['nimbus.port']}"

    @property
    def code_dir(self) -> Path:
        """Where this nimbus keeps bundles: ``<local dir>/nimbus/topologies``."""
        return Path(self.conf["squall.local.dir"]) / "nimbus" / "topologies"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def client_conf(self, token: str | None = None) -> dict[str, Any]:
        """A client's config for this nimbus: address, the admin token (or ``token``), the CA."""
        conf = {"nimbus.host": self.conf["nimbus.host"], "nimbus.port": self.conf["nimbus.port"]}
        return {**conf, **(self.credentials.client_conf(token) if self.credentials else {})}

    def connection(self, timeout: float = 10.0) -> http.client.HTTPConnection:
        """A raw HTTP(S) connection to the API (for requests the client would not send)."""
        host, port = str(self.conf["nimbus.host"]), int(self.conf["nimbus.port"])
        access = ApiAccess.from_conf(self.client_conf())
        if access.ssl_context is not None:
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=access.ssl_context)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def auth_headers(self, token: str | None = None) -> dict[str, str]:
        """``Authorization`` for the admin token (or ``token``); empty on an open nimbus."""
        return ApiAccess.from_conf(self.client_conf(token)).headers()

    def client(self, timeout: float = 10.0, token: str | None = None) -> NimbusClient:
        """A client of this nimbus with the admin token (or ``token``) and its CA."""
        return NimbusClient(str(self.conf["nimbus.host"]), int(self.conf["nimbus.port"]), timeout,
                            ApiAccess.from_conf(self.client_conf(token)))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 30.0, leader: bool = False) -> NimbusProcess:
        """Spawn and wait until the API answers (and, with ``leader``, until this one leads)."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.conf_path, yaml.safe_dump(self.conf, sort_keys=True))  # it holds a token
        write_private(self.client_conf_path, yaml.safe_dump(self.client_conf(), sort_keys=True))
        env = {k: v for k, v in os.environ.items() if k != TOKEN_ENV}  # its token is in its config
        env["SQUALL_CONF"] = str(self.conf_path)
        env["PYTHONFAULTHANDLER"] = "1"  # SIGABRT prints every thread's stack (a stop that hangs)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "squall.cli", "nimbus"], stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work_dir)
        # The pid check makes sure the answer comes from this process, not another on the port.
        self.wait_until(lambda info: info["nimbus"].get("pid") == self.pid
                        and (not leader or info["nimbus"]["is_leader"]), timeout,
                        "leadership" if leader else "the API")
        return self

    def wait_until(self, predicate: Any, timeout: float, what: str) -> dict[str, Any]:
        """Poll GET /cluster until ``predicate(info)``; RuntimeError with the log tail if not."""
        deadline = SYSTEM_CLOCK.monotonic() + timeout
        client = self.client(timeout=2.0)
        last = ""
        while SYSTEM_CLOCK.monotonic() < deadline:
            if not self.alive():
                raise RuntimeError(f"nimbus exited with code {self.proc.returncode if self.proc else None}: "
                                   f"{self.log_tail()}")
            try:
                info = client.cluster()
                if predicate(info):
                    return info
            except NimbusError as exc:
                last = str(exc)
            sleep(0.05)
        raise RuntimeError(f"nimbus at {self.address} did not reach {what} within {timeout}s "
                           f"({last}): {self.log_tail()}")

    def log_tail(self, lines: int | None = None) -> str:
        """The log's last ``lines`` (default 15; more after a stop that hung: the stacks)."""
        lines = lines or self.tail_lines
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, SIGKILL after ``timeout``; the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._dump_stacks()
                self.kill()
            except ProcessLookupError:
                pass
        return self.proc.wait()

    def _dump_stacks(self) -> None:
        """Have a nimbus that did not stop write where each of its threads is (faulthandler
        prints them to the log on SIGABRT and the process ends), so the failure says why."""
        assert self.proc is not None
        try:
            os.kill(self.proc.pid, signal.SIGABRT)
            self.proc.wait(5.0)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        self.tail_lines = 200

    def kill(self) -> None:
        """SIGKILL (a crash, as far as the cluster can tell)."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
