"""``squall dev-cluster``: ZooKeeper, nimbus and supervisors on this machine, for trying things.

Layout under DIR: ``squall.yaml`` (the client config: ``SQUALL_CONF=DIR/squall.yaml squall
submit ...``), ``security/`` (the API token file, a CA and nimbus's TLS certificate, made
afresh at every start), ``zookeeper/`` (its data survives restarts), ``nimbus/`` and
``supervisor-<i>/`` (each daemon's own ``squall.yaml`` and local dir) and ``logs/``.
Secure by default: the API wants a token (the client config holds the admin token,
supervisors a supervisor token) and speaks TLS only.
ZooKeeper runs as a child JVM started from the main thread (it dies with this process);
nimbus and the supervisors run as child processes in their own sessions, so Ctrl-C
reaches only this process, which then stops them by PID: SIGTERM, then SIGKILL.
"""
from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click
import yaml

from squall.cli.zookeeper_server import ZooKeeperError, ZooKeeperServer, ensure_zookeeper_installed, free_port
from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.auth import write_private
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.daemons.nimbus.credentials import CredentialsError, create, daemon_auth_conf

FIRST_SLOT_PORT = 6700
READY_TIMEOUT_SECS = 60.0
STOP_GRACE_SECS = 15.0  # supervisors stop their workers first (SIGTERM grace) before exiting


class DevClusterError(RuntimeError):
    """The dev cluster could not start; the message says which part and where its log is."""


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _child_setup() -> None:  # pragma: no cover - runs in the forked child
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG: never outlive the dev cluster


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def pick_slot_ports(count: int, per: int, start: int = FIRST_SLOT_PORT) -> list[list[int]]:
    """``count`` ranges of ``per`` consecutive free ports, the ranges apart from each other."""
    ranges: list[list[int]] = []
    port = start
    while len(ranges) < count:
        if port + per > 65535:
            raise DevClusterError(f"cannot find {count} ranges of {per} free ports from {start}")
        block = list(range(port, port + per))
        if all(_port_free(p) for p in block):
            ranges.append(block)
            port += per + 10  # leave a gap so ranges are easy to tell apart
        else:
            port += 1
    return ranges


def _write_yaml(path: Path, data: Mapping[str, Any]) -> Path:
    """Every config here holds a secret (a token, the ZooKeeper credential): owner only."""
    write_private(path, yaml.safe_dump(dict(data), sort_keys=True))
    return path


def zookeeper_security(directory: Path) -> dict[str, Any]:
    """The daemons' ZooKeeper credential (generated once, kept in ``DIR/zookeeper-auth.yaml``,
    mode 0600, so a restarted dev cluster can still read its nodes); CURVE is on by default."""
    path = directory / "zookeeper-auth.yaml"
    if path.is_file():
        return dict(yaml.safe_load(path.read_text(encoding="utf-8")))
    auth = daemon_auth_conf()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        yaml.safe_dump(auth, fh)
    return auth


class _Child:
    def __init__(self, name: str, argv: list[str], conf_path: Path, log_path: Path, cwd: Path) -> None:
        self.name, self.log_path = name, log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd,
                env={**os.environ, "SQUALL_CONF": str(conf_path)}, start_new_session=True,
                preexec_fn=_child_setup)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 5) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def terminate(self) -> None:
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def wait_or_kill(self, deadline: float) -> None:
        try:
            self.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            click.echo(f"{self.name} (pid {self.proc.pid}) did not stop in time: SIGKILL", err=True)
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)


def _daemon_argv(command: str, log_format: str | None) -> list[str]:
    argv = [sys.executable, "-m", "squall.cli", command]
    return argv + (["--log-format", log_format] if log_format else [])


def _wait_ready(client: NimbusClient, children: list[_Child], supervisors: int, stop: threading.Event) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_SECS
    last = "nimbus did not answer"
    while time.monotonic() < deadline and not stop.is_set():
        for child in children:
            if not child.alive():
                raise DevClusterError(f"{child.name} exited with code {child.proc.returncode} "
                                      f"(log {child.log_path}): {child.log_tail()}")
        try:
            info = client.cluster()
            registered = len(info["supervisors"])
            if info["nimbus"]["leader"] and registered >= supervisors:
                return
            last = f"{registered} of {supervisors} supervisors registered"
        except NimbusError as exc:
            last = str(exc)
        stop.wait(0.3)
    if not stop.is_set():
        raise DevClusterError(f"the dev cluster was not ready within {READY_TIMEOUT_SECS:g}s: {last}")


def run_dev_cluster(directory: Path, supervisors: int, slots: int, log_format: str | None = None) -> int:
    """Start everything, print how to use it, run until SIGINT/SIGTERM, stop everything."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    children: list[_Child] = []
    zk: ZooKeeperServer | None = None
    try:
        try:
            ensure_zookeeper_installed()
            zk = ZooKeeperServer(work_dir=directory / "zookeeper")
            zk.start(timeout=60)  # from the main thread: the JVM dies with this process
        except ZooKeeperError as exc:
            raise DevClusterError(f"ZooKeeper: {exc}") from None
        try:
            creds = create(directory / "security", hosts=["127.0.0.1", "localhost"])
        except CredentialsError as exc:
            raise DevClusterError(str(exc)) from None
        nimbus_port = free_port()
        base = {"zookeeper.servers": [zk.host], "zookeeper.port": zk.port, "zookeeper.root": "/squall",
                "nimbus.host": "127.0.0.1", "nimbus.port": nimbus_port}
        client = {**base, **creds.client_conf()}
        client_conf = _write_yaml(directory / "squall.yaml", client)
        base["supervisor.logviewer.port"] = 0
        daemon_base = {**base, **zookeeper_security(directory)}
        logs_dir = directory / "logs"
        nimbus_dir = directory / "nimbus"
        nimbus_conf = _write_yaml(nimbus_dir / "squall.yaml", {**daemon_base, **creds.nimbus_conf(),
                                                               "squall.local.dir": str(nimbus_dir)})
        children.append(_Child("nimbus", _daemon_argv("nimbus", log_format), nimbus_conf,
                               logs_dir / "nimbus.log", nimbus_dir))
        port_ranges = pick_slot_ports(supervisors, slots)
        metrics_ports = [free_port() for _ in port_ranges]
        for i, (ports, metrics_port) in enumerate(zip(port_ranges, metrics_ports), start=1):
            sup_dir = directory / f"supervisor-{i}"
            conf_path = _write_yaml(sup_dir / "squall.yaml", {
                **daemon_base, **creds.supervisor_conf(), "squall.local.dir": str(sup_dir),
                "supervisor.slots.ports": ports,
                "supervisor.host": "127.0.0.1", "supervisor.metrics.port": metrics_port})
            # The dev cluster owns its workers: they stop with their supervisor.
            argv = _daemon_argv("supervisor", log_format) + ["--kill-workers-on-exit"]
            children.append(_Child(f"supervisor-{i}", argv, conf_path,
                                   logs_dir / f"supervisor-{i}.log", sup_dir))
        _wait_ready(NimbusClient("127.0.0.1", nimbus_port, timeout=5, access=ApiAccess.from_conf(client)),
                    children, supervisors, stop)
        if stop.is_set():
            return 0
        ranges = ", ".join(f"{r[0]}-{r[-1]}" for r in port_ranges)
        click.echo(
            f"squall dev cluster is up in {directory}\n"
            f"  ZooKeeper    {zk.hosts} (data in {zk.work_dir})\n"
            f"  nimbus       https://127.0.0.1:{nimbus_port}/api/v1/cluster (log {logs_dir / 'nimbus.log'})\n"
            f"  web UI       https://127.0.0.1:{nimbus_port}/ (CA {creds.ca_file}; token in {client_conf})\n"
            f"  security     API tokens and TLS material in {creds.directory}\n"
            f"  supervisors  {supervisors} x {slots} slots (ports {ranges}), logs in {logs_dir}\n"
            f"  metrics      https://127.0.0.1:{nimbus_port}/metrics and "
            f"{', '.join(f'https://127.0.0.1:{p}/metrics' for p in metrics_ports)} (same CA and token)\n"
            f"Use it with:\n"
            f"  export SQUALL_CONF={client_conf}\n"
            f"  squall submit examples/wordcount.py\n"
            f"  squall list; squall status wordcount; squall kill wordcount\n"
            f"Press Ctrl-C to stop.")
        reported: set[str] = set()
        while not stop.wait(1.0):
            for child in children:
                if not child.alive() and child.name not in reported:
                    reported.add(child.name)
                    click.echo(f"{child.name} exited with code {child.proc.returncode} "
                               f"(log {child.log_path}): {child.log_tail()}", err=True)
        return 0
    finally:
        _stop_all(children)
        if zk is not None:
            zk.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if children or zk is not None:
            click.echo("squall dev cluster stopped")


def _stop_all(children: list[_Child]) -> None:
    """Supervisors first (they stop their workers), then nimbus; SIGKILL what lingers."""
    sups = [c for c in children if c.name != "nimbus"]
    for child in sups:
        child.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECS
    for child in sups:
        child.wait_or_kill(deadline)
    for child in children:
        if child.name == "nimbus":
            child.terminate()
            child.wait_or_kill(time.monotonic() + STOP_GRACE_SECS)
