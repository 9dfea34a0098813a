"""``squall dev-cluster``: ZooKeeper, nimbus and supervisors on this machine, for trying things.

Layout under DIR: ``squall.yaml`` (the client config: ``SQUALL_CONF=DIR/squall.yaml squall
submit ...``), ``security/`` (the API token file, a CA and nimbus's TLS certificate, made
afresh at every start), ``zookeeper/`` (its data survives restarts), ``nimbus/`` and
``supervisor-<i>/`` (each daemon's own ``squall.yaml`` and local dir) and ``logs/`` (0700, its
files 0600: a daemon's log names every topology, owner and id, and no worker may read it).
Secure by default: the API wants a token (the client config holds the admin token,
supervisors a supervisor token) and speaks TLS only; ZooKeeper is bounded and refuses
writes outside squall's root to clients without the daemons' credential
(``squall.cli.dev_zookeeper``); run as root, workers run as users of their own.
ZooKeeper runs as a child JVM started from the main thread (it dies with this process,
and is restarted, within a budget, if it dies first);
nimbus and the supervisors run as child processes in their own sessions, so Ctrl-C
reaches only this process, which then stops them by PID: SIGTERM, then SIGKILL.
"""
from __future__ import annotations

import ctypes
import os
import shutil
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

from squall.cli import dev_zookeeper
from squall.cli.zookeeper_server import ZooKeeperError, ZooKeeperServer, ensure_zookeeper_installed, free_port
from squall.command_line import LOG_FORMAT, Failure
from squall.config import TOKEN_ENV, load_defaults
from squall.daemons.local_state import private_dir
from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.auth import write_private
from squall.daemons.nimbus.client import NimbusClient, NimbusError
from squall.daemons.nimbus.credentials import CredentialsError, create, daemon_auth_conf
from squall.daemons.supervisor import launcher
from squall.daemons.supervisor.worker_user import ROOT_USER, WorkerAccounts
from squall.errors import SquallError

FIRST_SLOT_PORT = 6700
ZK_ROOT = "/squall"
READY_TIMEOUT_SECS = 60.0
# Daemons stop within this of SIGTERM (supervisors stop their workers, within their shutdown
# sleep, 3 s); with ZooKeeper's own stop the whole cluster is gone within 10 s of Ctrl-C.
STOP_GRACE_SECS = 7.0


class DevClusterError(SquallError, RuntimeError):
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


def workers_setting(conf: Mapping[str, Any], directory: Path) -> tuple[dict[str, Any], str | None]:
    """The supervisors' worker settings and what to tell the user about them.

    Run as root, workers get users of their own, with a copy of this Python and squall laid
    out for them when they cannot run the originals (a venv under /root: worker_runtime).
    Only when even that cannot work (the dev cluster's directory is closed to them, say) do
    they run as root, said loudly with the fix, rather than not starting."""
    accounts = WorkerAccounts.from_conf(conf)
    prefix, problem = launcher.resolve_worker_command(conf, accounts.probe_identity(), directory)
    if problem is None:
        return ({"supervisor.worker.command": prefix} if prefix != launcher.worker_prefix(conf) else {}), None
    fix = (f"start it with --dir in a directory every user may pass through (e.g. /var/tmp/{directory.name})"
           if launcher.PASSAGE_PROBLEM in problem else
           "run it where /var/cache/squall is writable (supervisor.worker.runtime.dir), or install squall "
           "where every user can read it (docs/install.md)")
    return {"supervisor.worker.user": ROOT_USER}, (
        f"SECURITY OFF: workers run as root, so topologies can read this dev cluster's tokens and "
        f"keys: {problem}. To run them as users of their own, {fix}.")


def _without_token(environ: Mapping[str, str]) -> dict[str, str]:
    """The daemons take their token from the configs written here: a client token in the
    shell's $SQUALL_TOKEN (which wins over a config file) must not reach them."""
    return {k: v for k, v in environ.items() if k != TOKEN_ENV}


class _Child:
    def __init__(self, name: str, argv: list[str], conf_path: Path, log_path: Path, cwd: Path) -> None:
        self.name, self.log_path = name, log_path
        private_dir(log_path.parent)
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)  # a log an older dev cluster left readable
        with os.fdopen(fd, "ab") as log_file:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, cwd=cwd,
                env={**_without_token(os.environ), "SQUALL_CONF": str(conf_path)}, start_new_session=True,
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


def squall_command() -> str:
    """How to run this squall from the user's shell: ``squall`` when that is what PATH finds
    (the environment is active), else the path of this environment's command."""
    exe = Path(sys.executable).parent / "squall"
    found = shutil.which("squall")
    if found is not None and Path(found).resolve() == exe.resolve():
        return "squall"
    relative = os.path.relpath(exe)
    return relative if not relative.startswith("..") else str(exe)


def example_topology() -> str:
    """The word count example as a path from here, when this squall runs from its checkout."""
    example = Path(__file__).resolve().parents[2] / "examples" / "wordcount.py"
    if not example.is_file():
        return "YOUR_TOPOLOGY.py"
    relative = os.path.relpath(example)
    return relative if not relative.startswith("..") else str(example)


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
        zk_auth = zookeeper_security(directory)
        try:
            ensure_zookeeper_installed()
            zk = dev_zookeeper.locked_server(directory / "zookeeper")
            zk.start(timeout=dev_zookeeper.START_TIMEOUT_SECS)  # main thread: the JVM dies with this process
            dev_zookeeper.lock(zk, zk_auth, ZK_ROOT)
        except ZooKeeperError as exc:
            raise DevClusterError(f"ZooKeeper: {exc}") from None
        try:
            creds = create(directory / "security", hosts=["127.0.0.1", "localhost"])
        except CredentialsError as exc:
            raise DevClusterError(str(exc)) from None
        nimbus_port = free_port()
        base = {"zookeeper.servers": [zk.host], "zookeeper.port": zk.port, "zookeeper.root": ZK_ROOT,
                "nimbus.host": "127.0.0.1", "nimbus.port": nimbus_port}
        client = {**base, **creds.client_conf()}
        client_conf = _write_yaml(directory / "squall.yaml", client)
        base["supervisor.logviewer.port"] = 0
        daemon_base = {**base, **zk_auth}
        logs_dir = directory / "logs"
        nimbus_dir = directory / "nimbus"
        nimbus_conf = _write_yaml(nimbus_dir / "squall.yaml", {**daemon_base, **creds.nimbus_conf(),
                                                               "squall.local.dir": str(nimbus_dir)})
        children.append(_Child("nimbus", _daemon_argv("nimbus", log_format), nimbus_conf,
                               logs_dir / "nimbus.log", nimbus_dir))
        workers_as, warning = workers_setting(load_defaults(), directory)
        if warning:
            click.echo(warning, err=True)
        port_ranges = pick_slot_ports(supervisors, slots)
        metrics_ports = [free_port() for _ in port_ranges]
        for i, (ports, metrics_port) in enumerate(zip(port_ranges, metrics_ports), start=1):
            sup_dir = directory / f"supervisor-{i}"
            conf_path = _write_yaml(sup_dir / "squall.yaml", {
                **daemon_base, **creds.supervisor_conf(), **workers_as, "squall.local.dir": str(sup_dir),
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
        squall = squall_command()
        click.echo(
            f"squall dev cluster is up in {directory}\n"
            f"  ZooKeeper    {zk.hosts} (data in {zk.work_dir})\n"
            f"  nimbus       https://127.0.0.1:{nimbus_port}/api/v1/cluster (log {logs_dir / 'nimbus.log'})\n"
            f"  web UI       https://127.0.0.1:{nimbus_port}/ (CA {creds.ca_file}; token in {client_conf})\n"
            f"  security     API tokens and TLS material in {creds.directory}\n"
            f"  supervisors  {supervisors} x {slots} slots (ports {ranges}), logs in {logs_dir}\n"
            f"  metrics      https://127.0.0.1:{nimbus_port}/metrics and "
            f"{', '.join(f'https://127.0.0.1:{p}/metrics' for p in metrics_ports)} (same CA and token)\n"
            f"Use it from another terminal with:\n"
            f"  export SQUALL_CONF={client_conf}\n"
            f"  {squall} submit {example_topology()}\n"
            f"  {squall} list; {squall} status wordcount; {squall} kill wordcount\n"
            f"Press Ctrl-C to stop.")
        return _watch(children, dev_zookeeper.Keeper(zk), stop)
    finally:
        _stop_all(children)
        if zk is not None:
            zk.stop(timeout=3.0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if children or zk is not None:
            click.echo("squall dev cluster stopped")


def _watch(children: list[_Child], keeper: dev_zookeeper.Keeper, stop: threading.Event) -> int:
    """Until stopped: report daemons that exit, and restart ZooKeeper when it dies (on this,
    the main thread); 1 once ZooKeeper is beyond its restart budget."""
    reported: set[str] = set()
    while not stop.wait(1.0):
        for child in children:
            if not child.alive() and child.name not in reported:
                reported.add(child.name)
                click.echo(f"{child.name} exited with code {child.proc.returncode} "
                           f"(log {child.log_path}): {child.log_tail()}", err=True)
        said = keeper.check(time.monotonic())
        if said:
            click.echo(said, err=True)
        if keeper.given_up:
            return 1
    return 0


def _stop_all(children: list[_Child]) -> None:
    """Every daemon at once (supervisors stop their workers; nothing needs nimbus to stop),
    SIGKILL what lingers; ZooKeeper stops after them."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECS
    for child in children:
        child.wait_or_kill(deadline)


@click.command("dev-cluster")
@click.option("--supervisors", "num_supervisors", type=click.IntRange(min=1, max=32), default=2,
              show_default=True, help="Number of supervisors.")
@click.option("--slots-per-supervisor", type=click.IntRange(min=1, max=64), default=4, show_default=True,
              help="Worker slots (ports) per supervisor.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default="squall-dev-cluster",
              show_default=True, help="Directory for configs, state and logs.")
@LOG_FORMAT
def dev_cluster(num_supervisors: int, slots_per_supervisor: int, directory: str, log_format: str | None) -> None:
    """Run ZooKeeper, nimbus and supervisors on this machine until Ctrl-C."""
    try:
        code = run_dev_cluster(Path(directory), num_supervisors, slots_per_supervisor, log_format)
    except DevClusterError as exc:
        raise Failure(str(exc)) from None
    if code:
        raise SystemExit(code)


COMMANDS = [dev_cluster]
