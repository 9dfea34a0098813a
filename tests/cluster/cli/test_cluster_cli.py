"""The cluster commands of the ``squall`` CLI, run as real processes against a real nimbus.

Exit codes are part of the interface: 0 ok, 1 failure (one line, no traceback), 2 usage.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.daemons.nimbus.process import NimbusProcess
from squall.daemons.state import ClusterState, ErrorInfo, SupervisorInfo, WorkerBeat
from squall.runtime.stats import WorkerStats
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import free_port
from support import dev_cluster
from support.paths import TOPOLOGIES
from support.reports import report_beats

pytestmark = pytest.mark.cluster

TOPOLOGY_FILE = TOPOLOGIES / "words_topo.py"


def squall(conf_path: Path | None, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SQUALL_CONF"}
    if conf_path is not None:
        env["SQUALL_CONF"] = str(conf_path)
    return subprocess.run([sys.executable, "-m", "squall.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def assert_failure(result: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert text in result.stderr, result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.fixture
def nimbus(cluster_conf: dict[str, Any], tmp_path: Path) -> Iterator[NimbusProcess]:
    proc = NimbusProcess({**cluster_conf, "nimbus.monitor.freq.secs": 0.3}, tmp_path / "nimbus")
    proc.start(leader=True)
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log_tail()


@pytest.fixture
def state(cluster_conf: dict[str, Any]) -> Iterator[ClusterState]:
    cs = ClusterState(cluster_conf).start()
    try:
        yield cs
    finally:
        cs.close()


@pytest.fixture
def topology_file(tmp_path: Path) -> Path:
    folder = tmp_path / "app"
    folder.mkdir()
    path = folder / "words_topology.py"
    path.write_text(TOPOLOGY_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    return path


def test_submit_list_status_rebalance_kill(nimbus, state, topology_file):
    now = time.time()
    for sid in ("s1", "s2"):
        state.register_supervisor(SupervisorInfo(sid, f"{sid}.example", [7001, 7002], now, [], now))
    conf = nimbus.client_conf_path
    result = squall(conf, "submit", str(topology_file), "--name", "words", "-c", "topology.workers=2")
    assert result.returncode == 0, result.stderr
    assert "submitted topology words as words-" in result.stdout
    tid = state.topology_ids()[0]
    info = state.topology(tid)
    assert info.conf["topology.workers"] == 2 and info.conf["topology.name"] == "words"
    assert info.conf["topology.acker.executors"] == 2  # resolved by the CLI, in conf.json

    result = squall(conf, "list")
    assert result.returncode == 0, result.stderr
    header, row = result.stdout.strip().splitlines()
    assert header.split() == ["NAME", "ID", "OWNER", "STATUS", "WORKERS", "EXECUTORS", "UPTIME"]
    assert row.split()[:6] == ["words", tid, "admin", "active", "2", "5"]  # 1 spout, 2 count, 2 ackers
    listed = json.loads(squall(conf, "list", "--json").stdout)
    assert [(t["name"], t["id"], t["workers"]) for t in listed] == [("words", tid, 2)]

    # What supervisors would report of their workers: beats with executor stats; and an error.
    assignment = state.assignment(tid)
    beats = []
    for node, port in assignment.slots():
        execs = assignment.executors_on(node, port)
        stats = [{"executor": list(ex), "emitted": {"default": 7}, "executed": 3, "acked": 1, "failed": 0,
                  "dropped": {"bad_ids": 2}} for ex in execs]
        wire = {"executors": stats, "transport": {"dropped": {"bad_frame": 9}}}
        beats.append(WorkerBeat(tid, node, port, time.time(), execs, 65.0, WorkerStats.from_dict(wire)))
    report_beats(nimbus, beats)
    state.report_error(tid, ErrorInfo(time.time(), "count", 2, "s1.example", 7001,
                                      "Traceback (most recent call last):\nKeyError: 'word'"))
    # --wait 0: one beat gives no rates, and no second one comes, so status would wait out its
    # 30 s for a young topology's rates (tests/cluster/cli/test_operate_cli.py tests that wait).
    result = squall(conf, "status", "words", "--wait", "0")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"topology words ({tid}): active, 2 workers" in out
    assert "count (bolt)" in out and "words (spout)" in out
    for node, port in assignment.slots():
        assert f"{node}.example:{port}" in out
    assert "1m5s" in out  # worker uptime
    assert "KeyError: 'word'" in out and "task 2 on s1.example:7001" in out
    assert out.splitlines()[1].split()[-1] == "DROPPED"
    assert "bad_ids 2" in out and "bad_frame 9" in out
    status = json.loads(squall(conf, "status", "words", "--json", "--wait", "0").stdout)
    count = next(c for c in status["components"] if c["id"] == "count")
    assert count["emitted"] == 14 and count["executed"] == 6 and len(count["executors"]) == 2
    assert count["dropped"] == 4 and count["executors"][0]["dropped_by_cause"] == {"bad_ids": 2}
    assert all(w["dropped_by_cause"] == {"bad_frame": 9} for w in status["workers"])

    assert "is inactive" in squall(conf, "deactivate", "words").stdout
    assert state.topology(tid).status == "inactive"
    assert "is active" in squall(conf, "activate", "words").stdout
    result = squall(conf, "rebalance", "words", "-n", "3", "-e", "count=1", "--wait", "0")
    assert result.returncode == 0, result.stderr
    assert "rebalanced topology words: 3 workers" in result.stdout
    assert len(state.assignment(tid).slots()) == 3 and len(state.assignment(tid).executors) == 4

    result = squall(conf, "kill", "words", "--wait", "0")
    assert result.returncode == 0 and "killed topology words" in result.stdout
    assert state.topology_ids() == [] and state.assignment_ids() == []
    assert squall(conf, "list").stdout.strip() == "no topologies"
    assert_failure(squall(conf, "status", "words"), 1, "no topology named 'words'")
    assert_failure(squall(conf, "kill", "words"), 1, "no topology named 'words'")


# Every command's usage errors and unreachable nimbus, in-process: tests/unit/cli/test_exit_codes.py.
def test_nimbus_down_is_exit_1_naming_the_address(tmp_path):
    port = free_port()
    conf = tmp_path / "squall.yaml"
    conf.write_text(yaml.safe_dump({"nimbus.host": "127.0.0.1", "nimbus.port": port}), encoding="utf-8")
    result = squall(conf, "list")
    assert_failure(result, 1, f"cannot reach nimbus at 127.0.0.1:{port}")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_usage_errors_are_exit_2(tmp_path):
    conf = tmp_path / "squall.yaml"
    conf.write_text("{}", encoding="utf-8")
    result = squall(conf, "rebalance", "x", "-n", "0")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr


def test_bad_topology_file_is_exit_1(tmp_path, nimbus):
    broken = tmp_path / "broken_topo.py"
    broken.write_text("def topology(:\n", encoding="utf-8")
    assert_failure(squall(nimbus.client_conf_path, "submit", str(broken)), 1, "broken_topo.py")
    empty = tmp_path / "empty_topo.py"
    empty.write_text("X = 1\n", encoding="utf-8")
    assert_failure(squall(nimbus.client_conf_path, "submit", str(empty)), 1, "defines no topology() function")


def test_submit_refused_by_nimbus_is_exit_1(nimbus, topology_file):
    result = squall(nimbus.client_conf_path, "submit", str(topology_file), "--name", "bad/name")
    assert_failure(result, 1, "bad topology name")


# --- `squall nimbus` as a process: exit codes -------------------------------------------

def _nimbus_cmd(conf: dict[str, Any], tmp_path: Path) -> subprocess.Popen[str]:
    path = tmp_path / "nimbus.yaml"
    path.write_text(yaml.safe_dump(conf), encoding="utf-8")
    env = {**os.environ, "SQUALL_CONF": str(path)}
    return subprocess.Popen([sys.executable, "-m", "squall.cli", "nimbus"], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_nimbus_exits_1_when_its_port_is_taken(cluster_conf, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _nimbus_cmd({**cluster_conf, "nimbus.port": port}, tmp_path)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "nimbus cannot listen" in out and "Traceback" not in out


def test_nimbus_exits_1_without_zookeeper(tmp_path):
    conf = {"zookeeper.port": free_port(), "zookeeper.connection.timeout.ms": 1000,
            "nimbus.port": free_port(), "squall.local.dir": str(tmp_path / "local")}
    proc = _nimbus_cmd(conf, tmp_path)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1, out
    assert "cannot connect to ZooKeeper" in out and "Traceback" not in out
    # No zookeeper.auth.*: said loudly, before anything else.
    assert "SECURITY OFF: ZooKeeper authentication is OFF" in out


# --- `squall dev-cluster`: the whole stack on this machine --------------------------------

def test_dev_cluster_runs_a_topology_and_stops_cleanly(tmp_path, topology_file):
    import psutil

    directory = tmp_path / "dev"
    with dev_cluster.running([sys.executable, "-m", "squall.cli", "dev-cluster", "--supervisors", "2",
                              "--slots-per-supervisor", "1", "--dir", str(directory)], 90) as (proc, banner):
        conf = directory / "squall.yaml"
        assert f"export SQUALL_CONF={conf}" in banner
        # It locks ZooKeeper before anything connects: no warning that the lock makes untrue.
        assert "lets clients without credentials write outside" not in banner, banner
        # The daemons' logs name every topology, owner and id: theirs alone.
        logs = directory / "logs"
        assert logs.stat().st_mode & 0o777 == 0o700
        assert {p.name: p.stat().st_mode & 0o777 for p in logs.iterdir()} == \
            {"nimbus.log": 0o600, "supervisor-1.log": 0o600, "supervisor-2.log": 0o600}
        daemons = psutil.Process(proc.pid).children(recursive=True)
        assert len(daemons) >= 4  # ZooKeeper, nimbus, two supervisors
        result = squall(conf, "submit", str(topology_file), "--name", "words", "-c", "topology.workers=2")
        assert result.returncode == 0, result.stderr

        def emitted() -> int:
            status = json.loads(squall(conf, "status", "words", "--json").stdout)
            return sum(c["emitted"] for c in status["components"] if c["id"] == "words")

        deadline = time.monotonic() + 60
        while emitted() == 0:
            assert time.monotonic() < deadline, (directory / "logs" / "supervisor-1.log").read_text()
            time.sleep(0.5)
        status = json.loads(squall(conf, "status", "words", "--json").stdout)
        slot_ports = set()
        for i in (1, 2):
            sup_conf = yaml.safe_load((directory / f"supervisor-{i}" / "squall.yaml").read_text())
            slot_ports.update(sup_conf["supervisor.slots.ports"])
        assert {w["port"] for w in status["workers"]} == slot_ports  # one worker per supervisor
        # The banner names nimbus's and each supervisor's /metrics; each supervisor runs one worker.
        # They take the client's token and CA, and refuse a caller without the token.
        urls = re.findall(r"https://127\.0\.0\.1:\d+/metrics", banner)
        assert len(urls) == 3, banner
        client = yaml.safe_load(conf.read_text())
        ctx = ssl.create_default_context(cafile=client["nimbus.tls.ca.file"])
        for url in urls[1:]:
            req = urllib.request.Request(url, headers={"Authorization": f"Bearer {client['squall.token']}"})
            with urllib.request.urlopen(req, timeout=5, context=ctx) as reply:
                assert "\nsquall_supervisor_workers 1.0\n" in reply.read().decode()
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(url, timeout=5, context=ctx)
            assert err.value.code == 401
        # Secure by default: ZooKeeper closed to a client without the daemons' credential,
        # which only the daemons' (0600) configs hold, and the workers talk CURVE.
        client_conf = yaml.safe_load(conf.read_text())
        assert "zookeeper.auth.password" not in client_conf
        sup_file = directory / "supervisor-1" / "squall.yaml"
        assert yaml.safe_load(sup_file.read_text())["zookeeper.auth.password"]
        assert sup_file.stat().st_mode & 0o077 == 0
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoAuthError
        anon = KazooClient(hosts=f"127.0.0.1:{client_conf['zookeeper.port']}", timeout=10)
        anon.start(timeout=10)
        try:
            with pytest.raises(NoAuthError):
                anon.get_children("/squall/assignments")
        finally:
            anon.stop()
            anon.close()
        everything = psutil.Process(proc.pid).children(recursive=True)  # now with the workers
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        asked = time.monotonic()
        out, _ = proc.communicate(timeout=60)
        took = time.monotonic() - asked
        assert proc.returncode == 0, out
        assert "squall dev cluster stopped" in out
        # Every daemon stopped on its own (no SIGKILL), the whole cluster within 10 s.
        assert "SIGKILL" not in out and took < 10, (took, out)
        gone, alive = psutil.wait_procs(everything, timeout=10)
        assert not alive, [p.pid for p in alive]


def test_a_missing_daemon_module_does_not_break_the_cli(monkeypatch):
    from click.testing import CliRunner

    from squall.cli import main
    from squall.cli.cluster import LazyCommand

    monkeypatch.setitem(sys.modules, "squall.daemons.ghost", None)  # import fails: no such module
    ghost = LazyCommand("ghost", "squall.daemons.ghost:ghost_command", "A daemon not installed here.")
    monkeypatch.setitem(main.commands, "ghost", ghost)
    runner = CliRunner()
    listing = runner.invoke(main, ["--help"])
    assert listing.exit_code == 0 and "ghost" in listing.output and "supervisor" in listing.output
    result = runner.invoke(main, ["ghost"])
    assert result.exit_code == 1 and "`squall ghost` is not available" in result.output


def test_status_shows_rates_from_beats_and_watch_redraws(cluster_conf, tmp_path):
    nimbus = NimbusProcess({**cluster_conf, "nimbus.monitor.freq.secs": 0.3}, tmp_path / "nimbus")
    nimbus.start(leader=True)
    state = ClusterState(cluster_conf).start()
    try:
        now = time.time()
        state.register_supervisor(SupervisorInfo("s1", "s1.example", [7001], now, [], now))
        conf = nimbus.client_conf_path  # the CLI: admin token and CA
        assert squall(conf, "submit", str(TOPOLOGY_FILE), "--name", "words").returncode == 0
        tid = state.topology_ids()[0]
        assignment = state.assignment(tid)
        execs = assignment.executors_on("s1", 7001)
        # Task ids: the acker (1), count (2, 3), words (4), one executor each.
        assert sorted(execs) == [(1, 1), (2, 2), (3, 3), (4, 4)]

        def beat(t: float, n: int) -> None:
            # What a worker writes: totals since start, read at t. Each count executor executes
            # n, words emits n.
            stats = [{"executor": list(ex), "emitted": {"default": n} if ex == (4, 4) else {},
                      "executed": n if ex in ((2, 2), (3, 3)) else 0, "acked": 0, "failed": 0} for ex in execs]
            report_beats(nimbus, [WorkerBeat(tid, "s1", 7001, time.time(), execs, 30.0,
                                             WorkerStats.from_dict({"executors": stats, "time": t}))])

        start = time.time() - 20
        beat(start, 1000)
        # --wait 0: rates need a second beat, which comes only after this look.
        first = json.loads(squall(conf, "status", "words", "--json", "--wait", "0").stdout)
        count = next(c for c in first["components"] if c["id"] == "count")
        assert count["executed"] == 2000 and count["rates"] is None  # one sample: no rate yet
        beat(start + 10, 1000 + 2500)  # 250 tuples/s over the 10 s between the two reads
        st = json.loads(squall(conf, "status", "words", "--json").stdout)
        count = next(c for c in st["components"] if c["id"] == "count")
        words = next(c for c in st["components"] if c["id"] == "words")
        assert count["rates"]["executed"] == 500.0 and words["rates"]["emitted"] == 250.0
        assert count["executors"][0]["rates"]["executed"] == 250.0 and st["rate_window_secs"] == 60.0
        # Only additions: every key the JSON had before is still there.
        assert {"emitted", "executed", "acked", "failed", "executors", "last_error", "kind"} <= set(count)

        human = squall(conf, "status", "words").stdout
        row = next(line for line in human.splitlines() if line.startswith("count (bolt)"))
        assert row.split()[-9:-1] == ["0", "0", "7,000", "500", "0", "0", "0", "0"]

        # --watch redraws until Ctrl-C, then exits 0.
        env = {**os.environ, "SQUALL_CONF": str(conf), "PYTHONFAULTHANDLER": "1"}
        proc = subprocess.Popen([sys.executable, "-m", "squall.cli", "status", "words", "--watch",
                                 "--interval", "0.5"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        shown: list[str] = []

        def read() -> None:
            for line in proc.stdout:
                shown.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        frames = lambda: "".join(shown).split("every 0.5s, Ctrl-C to stop")  # noqa: E731
        try:
            wait_for(lambda: len(frames()) >= 3, 60, "two frames drawn", lambda: "".join(shown))
            beat(start + 20, 1000 + 5000)
            wait_for(lambda: "12,000" in frames()[-2], 30, "a frame with the new beat", lambda: "".join(shown))
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
                hung = False
            except subprocess.TimeoutExpired:
                # Seen once in a full run (2026-11-29): have faulthandler print every thread's
                # stack (PYTHONFAULTHANDLER, set above) so the next one says where it hung, and end it.
                hung = True
                proc.send_signal(signal.SIGABRT)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            reader.join(10)
            err = proc.stderr.read()
        assert not hung, f"squall status --watch did not exit within 20 s of Ctrl-C:\n{err}"
        assert proc.returncode == 0, err
        out = "".join(shown)
        assert len(frames()) >= 4, out
        assert "7,000" in frames()[1] and "12,000" in frames()[-2], out  # the later frames saw the new beat
        assert "Traceback" not in err

        usage = squall(conf, "status", "words", "--watch", "--json")
        assert usage.returncode == 2 and "--watch" in usage.stderr
    finally:
        state.close()
        assert nimbus.stop() == 0, nimbus.log_tail()
