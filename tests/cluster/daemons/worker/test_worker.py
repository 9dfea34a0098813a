"""Real worker processes against a real ZooKeeper, exchanging tuples over ZeroMQ on 127.0.0.1
(the worker's decisions as plain functions are in tests/unit/daemons/worker/)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from squall.compiled import MODULES, pure_requested
from squall.config import build_config
from squall.daemons import local_state
from squall.daemons.credentials import ENV_VAR as CREDENTIALS_ENV
from squall.daemons.credentials import WorkerCredentials, without_daemon_secrets, write_credentials
from squall.daemons.launch_assignment import LaunchAssignment, write_launch_assignment
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.state import Assignment, ClusterState, TopologyInfo
from squall.daemons.supervisor.reporting import worker_beat
from squall.daemons.worker.zk_writer import ERROR_QUEUE_MAX, ZkWriter
from squall.loader import load_topology
from squall.model import executors as executors_of
from squall.model import system_topology, task_ids
from squall.testing.components import recorded
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import TcpRelay, free_port
from support.paths import TOPOLOGIES

TOPOLOGY_SOURCE = TOPOLOGIES / "numbers_topo.py"
WAIT = 30.0


# --- against a real ZooKeeper -------------------------------------------------------------

@pytest.mark.cluster
def test_zk_writer_throttles_errors(cluster_conf):
    conf = {**cluster_conf, "topology.max.error.report.per.interval": 3,
            "topology.error.throttle.interval.secs": 60}
    with ClusterState(conf) as state:
        writer = ZkWriter(state, "t1", 6700, "127.0.0.1", conf)
        writer.start()
        try:
            for i in range(10):
                writer.report_error("split", 3, f"boom {i}")
            writer.report_error("count", 4, "other component")
            wait_for(lambda: len(state.errors("t1")) == 4, 10, "four error reports")
        finally:
            writer.stop()
        errors = state.errors("t1")
        assert [e.error for e in errors if e.component == "split"] == ["boom 0", "boom 1", "boom 2"]
        assert all(e.host == "127.0.0.1" and e.port == 6700 for e in errors)


@pytest.mark.cluster
def test_zk_writer_holds_reports_through_an_outage_and_logs_it_once(cluster_conf, zk_server):
    relay = TcpRelay((zk_server.host, zk_server.port))
    conf = {**cluster_conf, "zookeeper.servers": ["127.0.0.1"], "zookeeper.port": relay.port,
            "topology.max.error.report.per.interval": 1000}
    state = ClusterState(conf).start()
    writer = ZkWriter(state, "t1", 6700, "127.0.0.1", conf)
    try:
        with capture_logs() as logs:
            writer.start()
            relay.cut()
            wait_for(lambda: not state.connected, 10, "the session cut off")
            for i in range(ERROR_QUEUE_MAX + 5):
                writer.report_error("split", 3, f"boom {i}")
            time.sleep(2.5)  # flush rounds while cut off: the reports wait
            assert writer.errors_written == 0
            relay.restore()
            wait_for(lambda: writer.errors_written == ERROR_QUEUE_MAX, 30, "the held reports written")
        warned = [e for e in logs if e["event"].startswith("ZooKeeper unavailable; error reports wait")]
        back = [e for e in logs if e["event"] == "error reports reach ZooKeeper again"]
        assert len(warned) == 1 and len(back) == 1 and back[0]["reports_dropped"] == 5
        kept = [e.error for e in state.errors("t1", "split")]
        assert kept[-1] == f"boom {ERROR_QUEUE_MAX - 1}" and writer.errors_dropped == 5
    finally:
        writer.stop()
        state.close()
        relay.close()


# --- real worker processes ---------------------------------------------------------------

class WorkerHarness:
    """A supervisor's part done by hand: bundle dir, supervisor conf, ZooKeeper records,
    and worker processes launched the way the supervisor launches them."""

    def __init__(self, tmp_path: Path, cluster_conf: dict[str, Any]) -> None:
        self.local = tmp_path / "supervisor"
        self.out = tmp_path / "out"
        self.out.mkdir()
        self.node = f"sup-{uuid.uuid4().hex[:8]}"
        self.topology_id = f"numbers-1-{int(time.time())}"
        self.cluster_conf = cluster_conf
        self.state = ClusterState(cluster_conf).start()
        self.secrets = new_topology_secrets()
        self.state.set_topology_secrets(self.topology_id, self.secrets)
        self.procs: list[subprocess.Popen] = []
        self.conf_path = self.local / "supervisor-conf.yaml"
        self.topology_conf: dict[str, Any] = {}
        self.executors: dict[tuple[int, int], str] = {}

    # -- set-up -------------------------------------------------------------------------
    def write_supervisor_conf(self, **extra: Any) -> None:
        self.local.mkdir(parents=True, exist_ok=True)
        conf = {**without_daemon_secrets(self.cluster_conf), "squall.local.dir": str(self.local),
                "supervisor.host": "127.0.0.1",
                "worker.heartbeat.frequency.secs": 0.2, "task.heartbeat.frequency.secs": 0.5,
                "task.refresh.poll.secs": 0.5, "zmq.linger.millis": 1000, **extra}
        self.conf_path.write_text(yaml.safe_dump(conf), encoding="utf-8")

    def write_bundle(self, **topology_conf: Any) -> None:
        """code/ (the topology module), topology.bin and conf.json, as the supervisor extracts them."""
        bundle = self.local / "topologies" / self.topology_id
        (bundle / "code").mkdir(parents=True)
        shutil.copy(TOPOLOGY_SOURCE, bundle / "code" / TOPOLOGY_SOURCE.name)
        topology, _, _ = load_topology(bundle / "code" / TOPOLOGY_SOURCE.name)
        (bundle / "topology.bin").write_bytes(topology.to_bytes())
        self.topology_conf = {"topology.name": "numbers", "test.out_dir": str(self.out),
                              "test.count": 300, **topology_conf}
        (bundle / "conf.json").write_text(json.dumps(self.topology_conf), encoding="utf-8")
        full = build_config(self.topology_conf, user_file=False)
        system = system_topology(topology, full)
        self.executors = executors_of(system, task_ids(system))

    def publish(self, placement: dict[tuple[int, int], int], status: str = "active") -> None:
        """TopologyInfo and an Assignment putting each executor on (this node, port)."""
        self.state.set_topology(TopologyInfo(self.topology_id, "numbers", status, 2,
                                             {"numbers": 1, "sink": 2}, "digest", time.time(),
                                             self.topology_conf))
        self.assign(placement)

    def assign(self, placement: dict[tuple[int, int], int], node: str | None = None) -> None:
        node = node or self.node
        self.state.set_assignment(Assignment(
            self.topology_id, {ex: (node, port) for ex, port in placement.items()},
            node_host={node: "127.0.0.1"}, executor_start={ex: time.time() for ex in placement},
            code_digest="digest"))

    def of(self, component: str) -> list[tuple[int, int]]:
        return sorted(ex for ex, comp in self.executors.items() if comp == component)

    # -- processes ----------------------------------------------------------------------
    def launch(self, port: int, worker_id: str | None = None, handed: Assignment | None = None) -> subprocess.Popen:
        """``handed``: the assignment a supervisor hands the worker (its fallback without ZooKeeper)."""
        worker_id = worker_id or uuid.uuid4().hex
        wdir = self.local / "workers" / worker_id
        wdir.mkdir(parents=True, exist_ok=True)
        if handed is not None:
            write_launch_assignment(wdir / "assignment.json", LaunchAssignment(handed, True))
        creds = WorkerCredentials(self.topology_id, self.secrets, self.state.auth.daemon_id)
        env = {**os.environ, "SQUALL_CONF": str(self.conf_path),
               CREDENTIALS_ENV: str(write_credentials(wdir, creds))}
        with open(wdir / "worker.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "squall.daemons.worker.main", "start", self.topology_id,
                 self.node, str(port), worker_id],
                cwd=wdir, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        proc.worker_dir = wdir  # type: ignore[attr-defined]
        self.procs.append(proc)
        return proc

    @staticmethod
    def log_of(proc: subprocess.Popen) -> str:
        path = proc.worker_dir / "worker.log"  # type: ignore[attr-defined]
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def wait_exit(self, proc: subprocess.Popen, timeout: float = WAIT) -> int:
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"worker {proc.pid} still running after {timeout}s:\n"
                                 f"{self.log_of(proc)[-4000:]}") from None

    def beat(self, port: int):
        """The beat of the latest worker launched on ``port`` as its supervisor would report
        it (from the worker's heartbeat and stats files); None when it has left none."""
        procs = [p for p in self.procs if p.args[-2] == str(port)]
        if not procs:
            return None
        layout = local_state.LocalLayout(self.local)
        worker_id = procs[-1].worker_dir.name  # type: ignore[attr-defined]
        try:
            heartbeat = local_state.read_heartbeat(layout, worker_id)
            stats = local_state.read_stats(layout, worker_id)
        except (OSError, ValueError):
            return None  # caught mid-replace or removed meanwhile: ask again
        beat = worker_beat(self.node, self.topology_id, port, self.executors_on(port), heartbeat, stats, 0.0)
        return beat.decoded() if beat is not None else None

    def executors_on(self, port: int) -> list[tuple[int, int]]:
        assignment = self.state.assignment(self.topology_id)
        return assignment.executors_on(self.node, port) if assignment else []

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()  # by PID
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.state.close()

    # -- the sink's and spout's files ----------------------------------------------------
    def sunk(self) -> list[int]:
        """The numbers the sink received, one per tuple."""
        return [values[0] for _, _, _, values in recorded(self.out)]

    def numbers(self, prefix: str) -> list[int]:
        out: list[int] = []
        for path in sorted(self.out.glob(f"{prefix}-*.txt")):
            out.extend(int(line) for line in path.read_text().split())
        return out

    def events(self) -> list[str]:
        return [line for p in sorted(self.out.glob("events-*.txt")) for line in p.read_text().split()]


@pytest.fixture
def harness(tmp_path: Path, cluster_conf: dict[str, Any]) -> Iterator[WorkerHarness]:
    h = WorkerHarness(tmp_path, cluster_conf)
    try:
        yield h
    finally:
        h.close()


def one_worker(harness: WorkerHarness, port: int, status: str = "active", **topology_conf: Any) -> None:
    harness.write_supervisor_conf()
    harness.write_bundle(**topology_conf)
    harness.publish({ex: port for ex in harness.executors}, status)


@pytest.mark.cluster
def test_reliable_tuples_complete_across_two_worker_processes(harness):
    port_a, port_b = free_port(), free_port()
    harness.write_supervisor_conf()
    harness.write_bundle(**{"topology.workers": 2})
    ackers = harness.of("__acker")
    assert len(ackers) == 2
    # The spout and one acker on A, both sink executors and the other acker on B: every
    # tuple, every ack and every ack-back crosses between the processes.
    placement = {ex: port_a for ex in harness.of("numbers") + ackers[:1]}
    placement.update({ex: port_b for ex in harness.of("sink") + ackers[1:]})
    harness.publish(placement)
    a = harness.launch(port_a)
    b = harness.launch(port_b)
    logs = lambda: harness.log_of(a)[-3000:] + "\n----\n" + harness.log_of(b)[-3000:]  # noqa: E731
    wait_for(lambda: len(harness.numbers("acked")) >= 300, 60, "all 300 tuple trees to complete", logs)
    time.sleep(0.5)  # anything extra (a duplicate) would show up now
    assert sorted(harness.numbers("acked")) == list(range(300))
    assert sorted(harness.sunk()) == list(range(300))
    assert a.poll() is None and b.poll() is None
    # Both left beats (for their supervisor's report) naming their own executors.
    assert sorted(harness.beat(port_a).executors) == sorted(harness.of("numbers") + ackers[:1])
    assert sorted(harness.beat(port_b).executors) == sorted(harness.of("sink") + ackers[1:])
    # The worker command runs the runtime's compiled modules (squall/compiled.py) when built.
    if shutil.which("cc") and not pure_requested():
        for proc in (a, b):
            loaded = next(line for line in harness.log_of(proc).splitlines() if "worker has finished loading" in line)
            assert all(module in loaded for module in MODULES), loaded
    for proc in (a, b):
        proc.send_signal(signal.SIGTERM)
    assert harness.wait_exit(a) == 0 and harness.wait_exit(b) == 0


@pytest.mark.cluster
def test_heartbeats_refresh_and_sigterm_stops_cleanly(harness):
    port = free_port()
    one_worker(harness, port)
    proc = harness.launch(port)
    wdir = proc.worker_dir
    hb_path = wdir / "heartbeat.json"
    wait_for(lambda: hb_path.exists(), WAIT, "the heartbeat file", lambda: harness.log_of(proc))
    assert (wdir / "pid").read_text() == str(proc.pid)
    first = json.loads(hb_path.read_text())
    assert first["pid"] == proc.pid and first["port"] == port and first["topology_id"] == harness.topology_id
    assert first["executors"] == [list(e) for e in sorted(harness.executors)]
    wait_for(lambda: json.loads(hb_path.read_text())["time"] > first["time"], 10, "a newer local heartbeat")

    beat = wait_for(lambda: harness.beat(port), 10, "the worker's beat for its supervisor's report")
    assert sorted(beat.executors) == sorted(harness.executors)
    wait_for(lambda: (b := harness.beat(port)) is not None and b.time > beat.time, 10, "a newer worker beat")
    stats = wait_for(lambda: harness.beat(port).stats.executors, 10, "executor stats in the beat")
    assert not harness.state.worker_beats(harness.topology_id)  # nothing per interval in ZooKeeper
    assert sorted(s.executor for s in stats) == sorted(harness.executors)

    proc.send_signal(signal.SIGTERM)
    assert harness.wait_exit(proc) == 0, harness.log_of(proc)
    assert harness.beat(port) is None
    assert not hb_path.exists() and not (wdir / "stats.json").exists()
    log = harness.log_of(proc)
    assert "worker stopping" in log and "SIGTERM" in log and "worker shut down" in log


@pytest.mark.cluster
def test_deactivate_stops_the_spout_and_activate_resumes_it(harness):
    port = free_port()
    one_worker(harness, port, **{"test.count": 10**9, "test.rate": 200})
    proc = harness.launch(port)
    logs = lambda: harness.log_of(proc)[-3000:]  # noqa: E731
    wait_for(lambda: len(harness.sunk()) >= 20, WAIT, "tuples flowing", logs)
    assert harness.events() == ["activate"]

    assert harness.state.set_topology_status(harness.topology_id, "inactive")
    wait_for(lambda: harness.events()[-1:] == ["deactivate"], 10, "the spout's deactivate", logs)
    # In-flight tuples may still land; then nothing more is emitted.
    settled = wait_for(lambda: _stable(lambda: len(harness.sunk()), 0.5), 10, "the sink to settle")
    time.sleep(1.5)
    assert len(harness.sunk()) == settled

    assert harness.state.set_topology_status(harness.topology_id, "active")
    wait_for(lambda: harness.events()[-1:] == ["activate"], 10, "the spout's activate", logs)
    wait_for(lambda: len(harness.sunk()) >= settled + 20, 10, "tuples flowing again", logs)
    assert proc.poll() is None


def _stable(read: Callable[[], int], secs: float) -> int | None:
    before = read()
    time.sleep(secs)
    return before if read() == before else None


@pytest.mark.cluster
def test_worker_exits_0_when_its_executors_leave_the_assignment(harness):
    port = free_port()
    one_worker(harness, port, **{"test.rate": 100})
    proc = harness.launch(port)
    wait_for(lambda: harness.beat(port), WAIT, "the worker beat", lambda: harness.log_of(proc))
    # Nimbus moved everything to another supervisor.
    harness.assign({ex: 6700 for ex in harness.executors}, node="another-supervisor")
    assert harness.wait_exit(proc, 15) == 0
    assert harness.beat(port) is None
    assert "assignment no longer names this worker" in harness.log_of(proc)


@pytest.mark.cluster
def test_worker_not_in_the_assignment_at_start_exits_0(harness):
    port, other = free_port(), free_port()
    one_worker(harness, port)
    # Its supervisor's copy names the slot (outdated): ZooKeeper, reachable, is authoritative.
    stale = Assignment(harness.topology_id, {ex: (harness.node, other) for ex in harness.executors})
    proc = harness.launch(other, handed=stale)  # a slot the assignment does not name
    assert harness.wait_exit(proc) == 0
    assert "names no executors" in harness.log_of(proc)


@pytest.mark.cluster
def test_a_worker_without_zookeeper_and_without_a_usable_handed_assignment_exits_1(harness):
    harness.write_supervisor_conf(**{"zookeeper.servers": ["127.0.0.1"], "zookeeper.port": free_port(),
                                     "zookeeper.connection.timeout.ms": 1000})
    harness.write_bundle()
    port = free_port()
    elsewhere = Assignment(harness.topology_id, {ex: (harness.node, port + 1) for ex in harness.executors})
    for handed, problem in ((None, "assignment.json does not exist"),
                            (elsewhere, f"names no executors on {harness.node}:{port}")):
        proc = harness.launch(port, handed=handed)
        assert harness.wait_exit(proc) == 1
        log = harness.log_of(proc)
        assert "ZooKeeper is unreachable and the supervisor's assignment cannot be used" in log
        assert problem in log


@pytest.mark.cluster
def test_missing_code_bundle_exits_1_with_a_clear_log_line(harness):
    port = free_port()
    one_worker(harness, port)
    shutil.rmtree(harness.local / "topologies" / harness.topology_id)
    proc = harness.launch(port)
    assert harness.wait_exit(proc) == 1
    log = harness.log_of(proc)
    assert f"code bundle for {harness.topology_id} not found at" in log
    assert str(harness.local / "topologies" / harness.topology_id) in log
    assert (proc.worker_dir / "pid").read_text() == str(proc.pid)  # written before anything else


@pytest.mark.cluster
def test_an_executor_that_cannot_start_ends_the_worker_with_1(harness):
    port = free_port()
    one_worker(harness, port, **{"test.fail_open": True})
    proc = harness.launch(port)
    assert harness.wait_exit(proc) == 1
    log = harness.log_of(proc)
    assert "refuses to open" in log
    # The failure was also reported to ZooKeeper for the UI/CLI.
    errors = wait_for(lambda: harness.state.errors(harness.topology_id, "numbers"), 10, "the error report")
    assert "refuses to open" in errors[0].error


@pytest.mark.cluster
def test_a_worker_cut_off_from_zookeeper_past_its_session_keeps_processing_and_resyncs(harness, zk_server):
    relay = TcpRelay((zk_server.host, zk_server.port))
    try:
        port = free_port()
        harness.write_supervisor_conf(**{"zookeeper.servers": ["127.0.0.1"], "zookeeper.port": relay.port})
        harness.write_bundle(**{"test.count": 1_000_000, "test.rate": 200})
        harness.publish({ex: port for ex in harness.executors})
        proc = harness.launch(port)
        wait_for(lambda: len(harness.numbers("acked")) > 50, WAIT, "acks before the cut", lambda: harness.log_of(proc))
        relay.cut()
        cut_at = time.time()
        acked_at_cut = len(harness.numbers("acked"))
        # Twice the session timeout (6 s): the session expires on the server meanwhile.
        time.sleep(12)
        assert proc.poll() is None, harness.log_of(proc)[-4000:]
        assert len(harness.numbers("acked")) > acked_at_cut + 500  # acks went on throughout
        # Its beat and stats went on too: they never needed ZooKeeper (its supervisor reports them).
        beat = harness.beat(port)
        assert beat.time > cut_at + 10 and beat.stats.time > cut_at + 8
        relay.restore()
        restored_at = time.time()
        wait_for(lambda: "ZooKeeper available again" in harness.log_of(proc), WAIT, "the end of the outage logged")
        log = harness.log_of(proc)
        assert "ZooKeeper unavailable; running on the last assignment" in log
        assert "timer callback raised" not in log
        assert proc.poll() is None and restored_at - cut_at >= 12
    finally:
        relay.close()


class TestCommandLine:
    def run(self, args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "squall.daemons.worker.main", *args],
                              env={**os.environ, **env}, cwd=cwd, capture_output=True, text=True,
                              timeout=60)

    def test_usage_errors_exit_2(self, tmp_path):
        result = self.run(["start", "t1", "sup", "not-a-port", "w1"], {}, tmp_path)
        assert result.returncode == 2 and "PORT" in result.stderr
        result = self.run(["start", "t1", "sup", "6700", "w1", "-c", "topology.workers=many"], {}, tmp_path)
        assert result.returncode == 2 and "topology.workers" in result.stderr
        result = self.run(["start", "t1", "sup", "6700", "../w1"], {}, tmp_path)  # names its log's dir
        assert result.returncode == 2 and "cannot be used as a worker id" in result.stderr

    def test_unreadable_supervisor_conf_exits_1(self, tmp_path):
        result = self.run(["start", "t1", "sup", "6700", "w1"], {"SQUALL_CONF": str(tmp_path / "nope.yaml")},
                          tmp_path)
        assert result.returncode == 1 and "nope.yaml" in result.stderr

    def test_logs_json_lines_unless_the_conf_names_a_format(self, tmp_path):
        conf = tmp_path / "supervisor-conf.yaml"
        conf.write_text(yaml.safe_dump({"squall.local.dir": str(tmp_path / "local")}))
        result = self.run(["start", "t1", "sup", "6700", "w1"], {"SQUALL_CONF": str(conf)}, tmp_path)
        assert result.returncode == 1
        # The worker writes its own (rotating) log file; nothing reaches the captured output.
        assert result.stdout == "" and result.stderr == ""
        log = tmp_path / "local" / "workers" / "w1" / "worker.log"
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        stop = [entry for entry in lines if entry["event"] == "worker stopping"]
        assert stop and stop[0]["exit_code"] == 1 and "code bundle for t1 not found" in stop[0]["reason"]
        assert stop[0]["daemon"] == "worker" and stop[0]["worker"] == "w1" and stop[0]["port"] == 6700
        assert (tmp_path / "local" / "workers" / "w1" / "pid").exists()
