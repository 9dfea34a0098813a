"""The ZooKeeper that ``squall dev-cluster`` starts: a local client without credentials cannot
fill it, its data is private, and when it dies the dev cluster says so and restarts it."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from squall.testing.zookeeper import four_letter_word

pytestmark = pytest.mark.cluster

ONE_MB = b"x" * 1_000_000


class DevCluster:
    """``squall dev-cluster`` as a child process, its output collected by a thread."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.proc = subprocess.Popen([sys.executable, "-m", "squall.cli", "dev-cluster", "--supervisors", "1",
                                      "--slots-per-supervisor", "1", "--dir", str(directory)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.lines.append(line)

    def wait_for_line(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if text in line:
                    return line
            assert self.proc.poll() is None, "".join(self.lines)
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} within {timeout}s:\n" + "".join(self.lines))

    def zookeeper(self) -> psutil.Process:
        (jvm,) = [p for p in psutil.Process(self.proc.pid).children(recursive=True)
                  if "org.apache.zookeeper.server.quorum.QuorumPeerMain" in p.cmdline()]
        return jvm

    def squall(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "SQUALL_CONF": str(self.directory / "squall.yaml")}
        return subprocess.run([sys.executable, "-m", "squall.cli", *args], env=env, capture_output=True,
                              text=True, timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            everything = psutil.Process(self.proc.pid).children(recursive=True)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            for proc in everything:
                try:
                    proc.kill()
                except psutil.Error:
                    pass


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[DevCluster]:
    cluster = DevCluster(tmp_path / "dev")
    try:
        cluster.wait_for_line("Press Ctrl-C to stop.", 120)
        yield cluster
    finally:
        cluster.stop()


def flood(port: int, paths: list[str]) -> dict[str, int]:
    """83 one-megabyte nodes at each path prefix from a client without credentials:
    outcome name -> count."""
    anon = KazooClient(hosts=f"127.0.0.1:{port}", timeout=10)
    anon.start(timeout=10)
    outcomes: dict[str, int] = {}
    try:
        for prefix in paths:
            for i in range(83):
                try:
                    anon.create(f"{prefix}flood-{i}", ONE_MB)
                    outcome = "created"
                except NoAuthError:
                    outcome = "refused"
                except Exception as exc:  # noqa: BLE001 - what happened is the result
                    outcome = type(exc).__name__
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
    finally:
        anon.stop()
        anon.close()
    return outcomes


def test_a_local_client_without_credentials_cannot_fill_zookeeper_and_a_killed_one_comes_back(dev):
    port = yaml.safe_load((dev.directory / "squall.yaml").read_text())["zookeeper.port"]
    targets = ["/", "/zookeeper/", "/zookeeper/quota/", "/squall/"]
    assert flood(port, targets) == {"refused": 83 * len(targets)}
    assert four_letter_word("127.0.0.1", port, "ruok") == "imok"
    assert dev.squall("list").returncode == 0  # nimbus still answers

    # Its data (every topology's password and CURVE key) is the owner's alone.
    work = dev.directory / "zookeeper"
    files = [p for p in (work / "data").rglob("*") if p.is_file()]
    assert any(p.name.startswith("log.") for p in files), files
    assert stat.S_IMODE(work.stat().st_mode) == 0o700
    for path in [work / "data", *(p for p in (work / "data").rglob("*") if p.is_dir())]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in [*files, work / "zoo.cfg", work / "zookeeper.log"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path

    # Killed, it is reported and restarted on the same port, still locked.
    jvm = dev.zookeeper()
    jvm.kill()
    dev.wait_for_line(f"ZooKeeper (pid {jvm.pid}) exited", 30)
    dev.wait_for_line("ZooKeeper restarted", 60)
    assert dev.zookeeper().pid != jvm.pid
    assert four_letter_word("127.0.0.1", port, "ruok") == "imok"
    assert flood(port, ["/"]) == {"refused": 83}
    deadline = time.monotonic() + 60
    while dev.squall("list").returncode != 0:  # nimbus reconnects
        assert time.monotonic() < deadline, "nimbus did not answer after ZooKeeper came back"
        time.sleep(0.5)
