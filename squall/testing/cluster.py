"""A real cluster of daemon processes on this machine, for tests and benchmarks.

``ProcessCluster`` runs one nimbus and N supervisors as child processes against a given
ZooKeeper, each with its own local dir and config file, and can kill, restart and inspect
them. The cluster is secured as ``squall dev-cluster`` is (tokens and TLS, made under
``base_dir/security``), or as docker-compose.yml does it from a ``squall secure-init``
directory; ``client`` and ``cli()`` act as its admin. Every process it starts is stopped by
PID on ``stop()``, workers included (a supervisor leaves its workers running when it stops, as Storm's does).
"""
from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from squall.cli.security import CLIENT_FILE, DAEMON_ENV_FILE, read_env_file
from squall.daemons.credentials import without_daemon_secrets
from squall.daemons.nimbus.access import TOKEN_ENV, ApiAccess
from squall.daemons.nimbus.auth import write_private
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.daemons.nimbus.credentials import (
    CA_CERT,
    NIMBUS_CERT,
    NIMBUS_KEY,
    SUPERVISOR_CERT,
    SUPERVISOR_KEY,
    TOKENS_FILE,
    ClusterCredentials,
    create,
    daemon_auth_conf,
)
from squall.daemons.supervisor import cgroups
from squall.testing.zookeeper import free_port

# Short periods so failures are noticed in seconds, not minutes.
FAST = {
    "nimbus.monitor.freq.secs": 1,
    "nimbus.task.timeout.secs": 5,
    "nimbus.supervisor.timeout.secs": 5,
    "nimbus.task.launch.secs": 20,
    "supervisor.monitor.frequency.secs": 0.5,
    "supervisor.heartbeat.frequency.secs": 1,
    "supervisor.worker.start.timeout.secs": 30,
    "supervisor.worker.timeout.secs": 5,
    "supervisor.worker.shutdown.sleep.secs": 1,
    "worker.heartbeat.frequency.secs": 0.5,
    "task.heartbeat.frequency.secs": 1,
    "worker.metrics.frequency.secs": 1,
    "task.refresh.poll.secs": 1,
    "zookeeper.session.timeout.ms": 4000,
    "squall.log.format": "json",
}


# Run as root, a supervisor gives workers users of their own, which cannot run an interpreter
# kept where other users cannot read it (a Python under /root, as on many test hosts): the
# harness runs them as root (SECURITY OFF, said in the supervisors' logs). A test of that
# isolation passes {"supervisor.worker.user": None} and a supervisor_prefix that makes the
# interpreter readable.
WORKERS_AS = {"supervisor.worker.user": "root"} if os.geteuid() == 0 else {}


def _outer_env() -> dict[str, str]:
    """This process's environment without $SQUALL_TOKEN: it would win over the token in the
    configs the harness writes."""
    return {k: v for k, v in os.environ.items() if k != TOKEN_ENV}


class ProcessCluster:
    def __init__(self, zk_port: int, root: str, base_dir: Path, supervisors: int = 2, slots: int = 2,
                 conf: Mapping[str, Any] | None = None, supervisor_prefix: Sequence[str] = (),
                 secure_init_dir: Path | None = None,
                 supervisor_hosts: Sequence[tuple[str, list[str]]] | None = None,
                 python: str | None = None) -> None:
        """Secured like a real cluster: API tokens and TLS, a generated daemons' ZooKeeper
        credential and CURVE between workers (``conf`` may turn the last two off, e.g. to
        measure their cost); ``supervisor_prefix`` goes before the supervisors' command.
        With ``secure_init_dir`` (made by ``squall secure-init``) the material is that, as in
        docker-compose.yml: the daemons get its ``supervisor.env`` as their environment and
        no token or ZooKeeper password in their configs (``conf`` names the ZooKeeper user).
        ``supervisor_hosts``: per supervisor, its ``supervisor.host`` and the prefix that
        starts it there (another network namespace: tests/support/netns.py); the TLS
        certificates then name those hosts and ``nimbus.host``. ``python``: the interpreter
        the daemons run with (another installed squall; settable between restarts, as in a
        rolling upgrade), default this one."""
        self.base = Path(base_dir)
        self.base.mkdir(parents=True, exist_ok=True)
        self.supervisor_hosts = list(supervisor_hosts or [])
        self.python = python or sys.executable
        self.env: dict[str, str]
        if secure_init_dir is None:
            hosts = ["127.0.0.1", "localhost", str((conf or {}).get("nimbus.host", "127.0.0.1")),
                     *(host for host, _ in self.supervisor_hosts)]
            self.credentials, self.env, zk_auth = create(self.base / "security", list(dict.fromkeys(hosts))), {}, \
                daemon_auth_conf()
        else:
            (self.credentials, self.env), zk_auth = _from_secure_init(Path(secure_init_dir)), {}
        self.common = {"zookeeper.servers": ["127.0.0.1"], "zookeeper.port": zk_port, "zookeeper.root": root,
                       "nimbus.host": "127.0.0.1", "nimbus.port": free_port(), "supervisor.host": "127.0.0.1",
                       "supervisor.logviewer.port": 0,
                       **FAST, **WORKERS_AS, **zk_auth, **(conf or {})}
        client = {**without_daemon_secrets(self.common), **self.credentials.client_conf()}
        self.client_conf = self._write(self.base / "client.yaml", client)
        self.n_supervisors, self.slots = supervisors, slots
        self.supervisor_prefix = list(supervisor_prefix)  # e.g. a namespace to run supervisors in
        self.nimbus: subprocess.Popen | None = None
        self.supervisors: list[subprocess.Popen | None] = [None] * supervisors
        self.client = NimbusClient(str(self.common["nimbus.host"]), self.common["nimbus.port"], timeout=30,
                                   access=ApiAccess.from_conf(client))

    @staticmethod
    def _write(path: Path, data: Mapping[str, Any]) -> Path:
        write_private(path, yaml.safe_dump(dict(data)))  # configs hold tokens
        return path

    def _spawn(self, name: str, command: str, conf: Mapping[str, Any], prefix: Sequence[str] = ()) -> subprocess.Popen:
        cfg = self._write(self.base / f"{name}.yaml", conf)
        log = open(self.base / f"{name}.log", "ab")
        env = {**_outer_env(), **self.env, "SQUALL_CONF": str(cfg)}
        proc = subprocess.Popen([*prefix, self.python, "-m", "squall.cli", command],
                                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.base, start_new_session=True)
        log.close()
        return proc

    def _daemon(self, security: Mapping[str, Any]) -> dict[str, Any]:
        """A daemon's security settings; the token stays out when its environment has it."""
        return {k: v for k, v in security.items() if not (k == "squall.token" and TOKEN_ENV in self.env)}

    def supervisor_dir(self, i: int) -> Path:
        return self.base / f"supervisor-{i}"

    def start(self, timeout: float = 60) -> "ProcessCluster":
        self.start_nimbus()
        for i in range(self.n_supervisors):
            self.start_supervisor(i)
        self.wait_for(lambda: len(self.client.cluster().get("supervisors", [])) == self.n_supervisors, timeout,
                      "supervisors registered")
        return self

    def start_nimbus(self, timeout: float = 60) -> None:
        self.nimbus = self._spawn("nimbus", "nimbus", {**self.common, **self._daemon(self.credentials.nimbus_conf()),
                                                       "squall.local.dir": str(self.base / "nimbus")})
        self.wait_for(self._nimbus_up, timeout, "nimbus answering")

    def _nimbus_up(self) -> bool:
        if self.nimbus is not None and self.nimbus.poll() is not None:
            raise AssertionError(f"nimbus exited with {self.nimbus.returncode}: see {self.base / 'nimbus.log'}")
        try:
            self.client.cluster()
            return True
        except (NimbusError, OSError):
            return False

    def start_supervisor(self, i: int) -> None:
        ports = [free_port() for _ in range(self.slots)]
        conf = {**self.common, **self._daemon(self.credentials.supervisor_conf()),
                "squall.local.dir": str(self.supervisor_dir(i)),
                "supervisor.slots.ports": ports, "supervisor.metrics.port": free_port()}
        prefix = self.supervisor_prefix
        if i < len(self.supervisor_hosts):
            conf["supervisor.host"], prefix = self.supervisor_hosts[i]
        prev = self.base / f"supervisor-{i}.yaml"
        if prev.exists():  # a restart keeps its slots and its metrics port
            kept = yaml.safe_load(prev.read_text())
            conf["supervisor.slots.ports"] = kept["supervisor.slots.ports"]
            conf["supervisor.metrics.port"] = kept["supervisor.metrics.port"]
        self.supervisors[i] = self._spawn(f"supervisor-{i}", "supervisor", conf, prefix)

    def metrics_port(self, i: int) -> int:
        """The port of supervisor ``i``'s /metrics."""
        return int(yaml.safe_load((self.base / f"supervisor-{i}.yaml").read_text())["supervisor.metrics.port"])

    def scrape(self, token: str) -> str:
        """Every supervisor's ``/metrics`` text, read over the cluster's TLS with ``token``
        (e.g. ``credentials.add_user("prom", "viewer")``)."""
        ctx = ssl.create_default_context(cafile=str(self.credentials.ca_file))
        text = ""
        for i in range(self.n_supervisors):
            req = urllib.request.Request(f"https://127.0.0.1:{self.metrics_port(i)}/metrics",
                                         headers={"Authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=10, context=ctx) as reply:
                text += reply.read().decode()
        return text

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {**_outer_env(), "SQUALL_CONF": str(self.client_conf)}
        return subprocess.run([sys.executable, "-m", "squall.cli", *args], capture_output=True, text=True,
                              env=env, timeout=timeout, cwd=self.base)

    def state_namespace(self, name: str) -> str:
        """Where topology ``name`` keeps its checkpointed state (nimbus chose it at submit)."""
        return str(self.client.topology_conf(name)["conf"].get("topology.state.namespace") or name)

    def worker_pids(self, i: int | None = None) -> dict[str, int]:
        """worker id -> pid of live workers (of supervisor ``i``, or all)."""
        out = {}
        for k in range(self.n_supervisors) if i is None else [i]:
            for pidfile in (self.supervisor_dir(k) / "workers").glob("*/pid"):
                try:
                    pid = int(pidfile.read_text().strip())
                except (OSError, ValueError):
                    continue
                if _alive(pid):
                    out[pidfile.parent.name] = pid
        return out

    def kill_supervisor(self, i: int, with_workers: bool = True) -> None:
        """``kill -9`` a supervisor (and its workers): a host dying."""
        pids = list(self.worker_pids(i).values()) if with_workers else []
        proc = self.supervisors[i]
        if proc is not None:
            proc.kill()
            proc.wait(10)
        for pid in pids:
            signal_pid(pid, signal.SIGKILL)

    def wait_for(self, condition, timeout: float, what: str, interval: float = 0.1) -> Any:
        """Wait until ``condition()`` is truthy; that value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = condition()
                if value:
                    return value
            except (NimbusError, OSError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {what}; logs in {self.base}")
            time.sleep(interval)

    def stop(self) -> None:
        workers = list(self.worker_pids().values())
        for proc in [*self.supervisors, self.nimbus]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [*self.supervisors, self.nimbus]:
            if proc is not None:
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        for pid in workers:
            signal_pid(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        for pid in workers:
            signal_pid(pid, signal.SIGKILL)
        for i in range(self.n_supervisors):  # what workers left behind, and the cgroups
            base = cgroups.supervisor_base(self.supervisor_dir(i))
            if base is not None:
                cgroups.end_tree(base)

    def __enter__(self) -> "ProcessCluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _from_secure_init(directory: Path) -> tuple[ClusterCredentials, dict[str, str]]:
    """The credentials ``squall secure-init`` made in ``directory`` (the admin token from its
    client config) and the daemons' environment (its env file)."""
    env = read_env_file(directory / DAEMON_ENV_FILE)
    admin = yaml.safe_load((directory / CLIENT_FILE).read_text(encoding="utf-8"))["squall.token"]
    creds = ClusterCredentials(directory, directory / TOKENS_FILE, admin, env[TOKEN_ENV], directory / CA_CERT,
                               directory / NIMBUS_CERT, directory / NIMBUS_KEY,
                               directory / SUPERVISOR_CERT, directory / SUPERVISOR_KEY)
    return creds, env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:  # a zombie child of ours is not alive
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def signal_pid(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid``; a process already gone is fine."""
    try:
        os.kill(pid, sig)
    except OSError:
        pass
