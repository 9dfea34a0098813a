"""The supervisor daemon, run as a real process against a real ZooKeeper, with real workers.

Nimbus's HTTP API is stood in for by a tiny ``http.server`` serving code bundles and taking
the supervisor's reports, and the
worker by a small script (``supervisor.worker.command``) that follows the worker contract's
process side: it writes ``pid``, reads its executors from the assignment in ZooKeeper, writes
``heartbeat.json`` every ``worker.heartbeat.frequency.secs`` and exits on SIGTERM. Control
files let a test make one worker ignore SIGTERM or stop heartbeating.
"""
from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from squall.daemons.nimbus.auth import token_hash
from squall.daemons.nimbus.secrets import new_topology_secrets
from squall.daemons.reports import SupervisorReport, parse_report
from squall.daemons.state import Assignment, ClusterState, PublishedTokens
from squall.daemons.supervisor import cgroups
from squall.testing.cluster import WORKERS_AS
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import free_port
from support.daemon_logs import log_events

pytestmark = pytest.mark.cluster

# Slots on free ports: a fixed 6700 collides with another run of this suite on the same host.
PORTS = [free_port(), free_port()]
WAIT = 20.0
SHUTDOWN_SLEEP = 1.5
WORKER_TIMEOUT = 2.0

FAKE_WORKER = '''\
"""Fake worker for the supervisor tests (the process side of the worker contract)."""
import json, os, signal, sys, time
from pathlib import Path

CONTROL = Path(sys.argv[0]).parent / "control"


def main():
    _, command, topology_id, supervisor_id, port, worker_id = sys.argv
    assert command == "start", command
    port = int(port)
    here = Path.cwd()
    (here / "pid").write_text(str(os.getpid()))
    if (CONTROL / "crash").exists() or (CONTROL / f"crash-{topology_id}").exists():
        sys.exit(3)
    stopping = []

    def on_term(signum, frame):
        (CONTROL / f"sigterm-{worker_id}").write_text(repr(time.time()))
        if not (CONTROL / f"ignore-sigterm-{worker_id}").exists():
            stopping.append(signum)

    signal.signal(signal.SIGTERM, on_term)
    from squall.config import build_config
    from squall.daemons.credentials import ENV_VAR, read_credentials
    from squall.daemons.state import ClusterState
    conf = build_config()  # SQUALL_CONF: the supervisor's config without its secrets
    creds = read_credentials(os.environ[ENV_VAR], topology_id)  # the topology's own
    state = ClusterState(conf, auth=creds.zk_auth()).start()
    try:
        assignment = state.assignment(topology_id)
    finally:
        state.close()
    executors = assignment.executors_on(supervisor_id, port) if assignment else []
    period = float(conf["worker.heartbeat.frequency.secs"])
    while not stopping:
        if not (CONTROL / f"silent-{worker_id}").exists():
            beat = {"time": time.time(), "topology_id": topology_id, "port": port,
                    "worker_id": worker_id, "pid": os.getpid(),
                    "executors": [list(e) for e in executors]}
            tmp = here / ".heartbeat.json.tmp"
            tmp.write_text(json.dumps(beat))
            os.replace(tmp, here / "heartbeat.json")
        time.sleep(period)
    (here / "heartbeat.json").unlink(missing_ok=True)


main()
'''





def make_bundle(tag: str = "v1") -> bytes:
    """A code bundle of the contract's shape (its content does not matter to the fake worker)."""
    members = {
        "code/topo.py": f"# topology {tag}\n".encode(),
        "topology.bin": f"pickled topology {tag}".encode(),
        "conf.json": json.dumps({"topology.name": "topo"}).encode(),
        "structure.json": json.dumps({"components": {}}).encode(),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BundleServer:
    """Nimbus's bundle endpoint (GET /api/v1/topologies/<id>/bundle) and the supervisors'
    reports (POST /api/v1/supervisors/<id>/report, kept parsed in ``reports``)."""

    def __init__(self) -> None:
        self.bundles: dict[str, bytes] = {}
        self.requests: dict[str, int] = {}
        self.reports: list[SupervisorReport] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # the reporter keeps its connection

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                parts = self.path.strip("/").split("/")
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if len(parts) != 5 or parts[:3] != ["api", "v1", "supervisors"] or parts[4] != "report":
                    self.send_error(404)
                    return
                owner.reports.append(parse_report(body, parts[3]))
                reply = json.dumps({"beats": len(owner.reports[-1].beats)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                parts = self.path.strip("/").split("/")
                if len(parts) != 5 or parts[:3] != ["api", "v1", "topologies"] or parts[4] != "bundle":
                    self.send_error(404)
                    return
                topology_id = parts[3]
                owner.requests[topology_id] = owner.requests.get(topology_id, 0) + 1
                data = owner.bundles.get(topology_id)
                if data is None:
                    self.send_error(404, f"no topology {topology_id}")
                    return
                self.send_response(200)
                self.send_header("Connection", "close")
                self.send_header("Content-Type", "application/gzip")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Squall-Digest", sha(data))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


METRICS_TOKEN = "prometheus-token-0123456789"


class Node:
    """One supervisor process (restartable) on its own local dir, and what it leaves on disk."""

    def __init__(self, tmp_path: Path, conf: dict[str, Any], server: BundleServer) -> None:
        self.tmp = tmp_path
        self.local = tmp_path / "supervisor"
        self.fake = tmp_path / "fake_worker.py"
        self.fake.write_text(FAKE_WORKER)
        self.control = tmp_path / "control"
        self.control.mkdir()
        self.log_path = tmp_path / "supervisor.log"
        self.conf_path = tmp_path / "squall.yaml"
        user_conf = {key: conf[key] for key in conf if key.startswith("zookeeper.")}
        user_conf.update({
            "squall.local.dir": str(self.local),
            "supervisor.slots.ports": PORTS,
            "supervisor.host": "127.0.0.1",
            "supervisor.monitor.frequency.secs": 0.5,
            "supervisor.heartbeat.frequency.secs": 0.5,
            "supervisor.worker.start.timeout.secs": 10,
            "supervisor.worker.timeout.secs": WORKER_TIMEOUT,
            "supervisor.worker.command": [sys.executable, str(self.fake)],
            **WORKERS_AS,
            "worker.heartbeat.frequency.secs": 0.2,
            "nimbus.host": "127.0.0.1",
            "nimbus.port": server.port,
            "supervisor.metrics.port": free_port(),
        })
        self.metrics_port = user_conf["supervisor.metrics.port"]
        self.conf_path.write_text(yaml.safe_dump(user_conf))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.seen_pids: set[int] = set()

    # -- the supervisor process --------------------------------------------------------------
    def start(self, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "SQUALL_CONF": str(self.conf_path)}
        with open(self.log_path, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "squall.daemons.supervisor.main", "--log-format", "json",
                 "-c", f"supervisor.worker.shutdown.sleep.secs={SHUTDOWN_SLEEP}", *args],
                cwd=self.tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def terminate(self, proc: subprocess.Popen[bytes], timeout: float = 15) -> int:
        proc.send_signal(signal.SIGTERM)
        return proc.wait(timeout)

    @property
    def id(self) -> str:
        path = self.local / "supervisor-id"
        return wait_for(lambda: path.is_file() and path.read_text().strip(), what="supervisor-id file")

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Its /metrics, parsed: (sample name, sorted labels) -> value."""
        req = urllib.request.Request(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                     headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        with urllib.request.urlopen(req, timeout=5) as reply:
            text = reply.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def events(self, event: str) -> list[dict[str, Any]]:
        return log_events(self.log_path, event)

    # -- its workers -------------------------------------------------------------------------
    def recorded(self) -> dict[int, dict[str, Any]]:
        """Port -> worker record from the supervisor's local state file."""
        try:
            data = json.loads((self.local / "supervisor-state.json").read_text())
        except (OSError, ValueError):
            return {}
        return {w["port"]: w for w in data["workers"]}

    def worker_dirs(self) -> set[str]:
        path = self.local / "workers"
        return {p.name for p in path.iterdir()} if path.is_dir() else set()

    def running(self, port: int, not_worker: str | None = None) -> dict[str, Any] | None:
        """The port's worker once it is alive and heartbeating (optionally another one)."""
        rec = self.recorded().get(port)
        if rec is None or rec["worker_id"] == not_worker or not psutil.pid_exists(rec["pid"]):
            return None
        self.seen_pids.add(rec["pid"])
        try:
            beat = json.loads((self.local / "workers" / rec["worker_id"] / "heartbeat.json").read_text())
        except (OSError, ValueError):
            return None
        return rec if time.time() - beat["time"] < WORKER_TIMEOUT else None

    def wait_running(self, port: int, not_worker: str | None = None) -> dict[str, Any]:
        return wait_for(lambda: self.running(port, not_worker), what=f"a running worker on port {port}")

    def kill_everything(self) -> None:
        """Teardown: the supervisors, then every worker this test may have left, by pid."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        pids = set(self.seen_pids) | {w["pid"] for w in self.recorded().values()}
        for pid_file in self.local.glob("workers/*/pid"):
            try:
                pids.add(int(pid_file.read_text()))
            except (OSError, ValueError):
                pass
        # Safety net: processes running this test's own fake-worker script (a unique path).
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if str(self.fake) in (proc.info["cmdline"] or []):
                pids.add(proc.info["pid"])
        for pid in pids:
            if is_fake_worker(pid, self.fake):
                os.kill(pid, signal.SIGKILL)
        for pid in pids:
            try:
                psutil.Process(pid).wait(5)
            except (psutil.Error, ChildProcessError):
                pass
        base = cgroups.supervisor_base(self.local)
        if base is not None:
            cgroups.end_tree(base)


def is_fake_worker(pid: int, script: Path) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE and str(script) in proc.cmdline()
    except psutil.Error:
        return False


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture
def server() -> Iterator[BundleServer]:
    srv = BundleServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def zk(cluster_conf: dict[str, Any]) -> Iterator[ClusterState]:
    state = ClusterState(cluster_conf).start()
    # What a leading nimbus publishes: the supervisor's /metrics takes this viewer's token.
    state.set_api_tokens(PublishedTokens(True, ((token_hash(METRICS_TOKEN), "prometheus", "viewer"),)))
    try:
        yield state
    finally:
        state.close()


@pytest.fixture
def node(tmp_path: Path, cluster_conf: dict[str, Any], server: BundleServer) -> Iterator[Node]:
    n = Node(tmp_path, cluster_conf, server)
    try:
        yield n
    finally:
        n.kill_everything()


def assign(zk: ClusterState, node_id: str, topology_id: str, digest: str, port: int,
           executors: tuple[tuple[int, int], ...] = ((1, 1), (2, 2))) -> None:
    now = time.time()
    if zk.topology_secrets(topology_id) is None:  # nimbus makes them at submit
        zk.set_topology_secrets(topology_id, new_topology_secrets())
    zk.set_assignment(Assignment(topology_id, {ex: (node_id, port) for ex in executors},
                                 {node_id: "127.0.0.1"}, {ex: now for ex in executors}, digest, 1))


def publish(server: BundleServer, topology_id: str, tag: str = "v1") -> str:
    data = make_bundle(tag)
    server.bundles[topology_id] = data
    return sha(data)


# --- tests ------------------------------------------------------------------------------------

def test_registers_keeps_its_id_and_is_marked_away_on_sigterm(node: Node, zk: ClusterState,
                                                               server: BundleServer) -> None:
    proc = node.start()
    sid = node.id
    info = wait_for(lambda: zk.supervisor(sid), what="the supervisor node")
    assert info.host == "127.0.0.1" and info.ports == PORTS and info.used_ports == []
    # Its heartbeat goes to nimbus (supervisor.heartbeat.frequency.secs 0.5), not to ZooKeeper:
    # reports arrive and the node is not rewritten.
    wait_for(lambda: len([r for r in server.reports if r.supervisor_id == sid]) >= 3, what="three reports")
    assert zk.supervisor(sid) == info
    effective = yaml.safe_load((node.local / "supervisor-conf.yaml").read_text())
    assert effective["squall.local.dir"] == str(node.local)
    assert effective["supervisor.worker.shutdown.sleep.secs"] == SHUTDOWN_SLEEP  # the -c override
    assert effective["supervisor.id"] == sid

    assert node.terminate(proc) == 0
    # Not deleted: a persistent node marked away, which nimbus honours for the restart grace.
    left = zk.supervisor(sid)
    assert left is not None and left.away and left.ports == PORTS
    assert zk.client.exists(f"{zk.root}/supervisors/{sid}").ephemeralOwner == 0

    proc = node.start()
    assert node.id == sid
    again = wait_for(lambda: (s := zk.supervisor(sid)) and not s.away and s,
                     what="the live supervisor node after a restart")
    assert again.started_at > info.started_at
    assert zk.client.exists(f"{zk.root}/supervisors/{sid}").ephemeralOwner != 0
    assert node.terminate(proc) == 0
    assert zk.supervisor(sid).away


def test_assignment_downloads_checks_and_launches(node: Node, zk: ClusterState, server: BundleServer) -> None:
    node.start()
    sid = node.id
    digest = publish(server, "topo-1-100")
    assign(zk, sid, "topo-1-100", digest, PORTS[0])
    rec = node.wait_running(PORTS[0])
    assert rec["topology_id"] == "topo-1-100" and rec["code_digest"] == digest
    assert rec["executors"] == [[1, 1], [2, 2]]
    code = node.local / "topologies" / "topo-1-100"
    assert (code / "topology.bin").read_bytes() == b"pickled topology v1"
    assert (code / "code" / "topo.py").is_file() and (code / "conf.json").is_file()
    beat = json.loads((node.local / "workers" / rec["worker_id"] / "heartbeat.json").read_text())
    assert beat["executors"] == [[1, 1], [2, 2]] and beat["pid"] == rec["pid"]
    proc = psutil.Process(rec["pid"])
    assert os.getpgid(rec["pid"]) == rec["pid"]  # its own process group
    assert proc.cmdline()[-5:] == ["start", "topo-1-100", sid, str(PORTS[0]), rec["worker_id"]]
    # Its own copy of the supervisor's config, without the daemons' secrets.
    conf_copy = node.local / "workers" / rec["worker_id"] / "squall.yaml"
    assert proc.environ()["SQUALL_CONF"] == str(conf_copy)
    assert conf_copy.read_bytes() == (node.local / "supervisor-conf.yaml").read_bytes()
    assert proc.environ()["SQUALL_WORKER_ID"] == rec["worker_id"]
    wait_for(lambda: zk.supervisor(sid).used_ports == [PORTS[0]], what="used_ports in the node")
    # Its reports to nimbus carry the worker's beat: the launch's topology, port and executors.
    report = wait_for(lambda: next((r for r in reversed(server.reports) if r.beats), None), what="a worker's beat")
    (beat,) = report.beats
    assert (beat.topology_id, beat.node, beat.port, beat.executors) == ("topo-1-100", sid, PORTS[0], [(1, 1), (2, 2)])

    def states() -> list[str]:
        return [e["state"] for e in node.events("slot state changed") if e.get("port") == PORTS[0]]

    # The slot logs RUNNING on the tick after it sees the heartbeat: wait for that line.
    wait_for(lambda: len(states()) >= 3, what="the slot's RUNNING state logged")
    assert states()[:3] == ["WAITING_FOR_BLOB", "WAITING_FOR_WORKER_START", "RUNNING"]
    assert server.requests["topo-1-100"] == 1
    launched = node.events("worker launched")
    assert launched[0]["supervisor"] == sid and launched[0]["worker"] == rec["worker_id"]


def test_digest_mismatch_is_refused_and_retried(node: Node, zk: ClusterState, server: BundleServer) -> None:
    node.start()
    sid = node.id
    good = make_bundle("good")
    server.bundles["topo-2-100"] = make_bundle("tampered")
    assign(zk, sid, "topo-2-100", sha(good), PORTS[0])

    def refusals() -> list[dict[str, Any]]:
        return [e for e in node.events("code download refused") if "digest mismatch" in e["error"]]

    wait_for(lambda: len(refusals()) >= 2, what="two refused downloads")
    assert refusals()[0]["level"] == "error" and sha(good) in refusals()[0]["error"]
    assert server.requests["topo-2-100"] >= 2
    assert node.recorded() == {} and node.worker_dirs() == set()
    assert not (node.local / "topologies" / "topo-2-100").exists()
    assert node.events("worker launched") == []

    server.bundles["topo-2-100"] = good  # nimbus serves the right code now: the retry succeeds
    rec = node.wait_running(PORTS[0])
    assert rec["code_digest"] == sha(good)


def test_killed_worker_is_relaunched(node: Node, zk: ClusterState, server: BundleServer) -> None:
    node.start()
    sid = node.id
    assign(zk, sid, "topo-3-100", publish(server, "topo-3-100"), PORTS[0])
    first = node.wait_running(PORTS[0])
    os.kill(first["pid"], signal.SIGKILL)
    second = node.wait_running(PORTS[0], not_worker=first["worker_id"])
    assert second["pid"] != first["pid"]
    assert first["worker_id"] not in node.worker_dirs()  # the dead worker's dir is cleaned
    assert server.requests["topo-3-100"] == 1  # code already there: no new download
    # Its output is kept: this test's worker prints before (and instead of) opening a
    # worker.log, so what the supervisor captured is archived as the early output.
    archived = list((node.local / "logs" / "workers").glob(f"*{first['worker_id']}-early.log"))
    assert len(archived) == 1 and archived[0].stat().st_size > 0
    m = node.metrics()
    assert m[("squall_supervisor_worker_launches_total", ())] == 2
    assert m[("squall_supervisor_worker_restarts_total", ())] == 1
    assert (m[("squall_supervisor_slots_used", ())], m[("squall_supervisor_slots_free", ())]) == (1, 1)
    assert m[("squall_supervisor_workers", ())] == 1


def test_silent_worker_is_killed_and_relaunched(node: Node, zk: ClusterState, server: BundleServer) -> None:
    node.start()
    sid = node.id
    assign(zk, sid, "topo-4-100", publish(server, "topo-4-100"), PORTS[1], executors=((3, 5),))
    first = node.wait_running(PORTS[1])
    (node.control / f"silent-{first['worker_id']}").touch()
    second = node.wait_running(PORTS[1], not_worker=first["worker_id"])
    assert (node.control / f"sigterm-{first['worker_id']}").exists()  # asked to stop, first
    wait_for(lambda: gone(first["pid"]), what="the silent worker to exit")
    assert second["executors"] == [[3, 5]]
    reasons = [e["reason"] for e in node.events("worker signalled") if e["worker"] == first["worker_id"]]
    assert reasons[0] == "heartbeat timed out"
    m = node.metrics()
    assert m[("squall_supervisor_worker_kills_total", (("signal", "SIGTERM"),))] >= 1
    assert m[("squall_supervisor_worker_launches_total", ())] == 2


def test_unassigned_workers_are_killed_and_cleaned(node: Node, zk: ClusterState, server: BundleServer) -> None:
    proc = node.start()
    sid = node.id
    assign(zk, sid, "topo-5-100", publish(server, "topo-5-100"), PORTS[0])
    assign(zk, sid, "topo-6-100", publish(server, "topo-6-100"), PORTS[1])
    polite = node.wait_running(PORTS[0])
    stubborn = node.wait_running(PORTS[1])
    (node.control / f"ignore-sigterm-{stubborn['worker_id']}").touch()

    zk.remove_assignment("topo-5-100")
    zk.remove_assignment("topo-6-100")
    marker = node.control / f"sigterm-{stubborn['worker_id']}"
    wait_for(marker.exists, what="SIGTERM to the stubborn worker")
    sigterm_at = float(marker.read_text())
    wait_for(lambda: gone(polite["pid"]), what="the polite worker to exit")
    # SIGTERM did not stop the stubborn one; it is still alive halfway through the shutdown sleep...
    while time.time() < sigterm_at + SHUTDOWN_SLEEP / 2:
        assert not gone(stubborn["pid"]), "the stubborn worker died before SIGKILL was due"
        time.sleep(0.05)
    # ... and SIGKILL ends it once the sleep is over.
    wait_for(lambda: gone(stubborn["pid"]), what="SIGKILL of the stubborn worker")
    wait_for(lambda: node.worker_dirs() == set() and node.recorded() == {}, what="worker dirs cleaned")
    wait_for(lambda: not any((node.local / "topologies").iterdir()), what="unassigned code removed")
    wait_for(lambda: zk.supervisor(sid).used_ports == [], what="no used ports")
    signals = [e["signal"] for e in node.events("worker signalled") if e["worker"] == stubborn["worker_id"]]
    assert signals[0] == "SIGTERM" and "SIGKILL" in signals
    assert node.terminate(proc) == 0


def test_restarted_supervisor_adopts_assigned_workers_and_kills_the_rest(
        node: Node, zk: ClusterState, server: BundleServer) -> None:
    proc = node.start()
    sid = node.id
    assign(zk, sid, "topo-7-100", publish(server, "topo-7-100"), PORTS[0])
    assign(zk, sid, "topo-8-100", publish(server, "topo-8-100"), PORTS[1])
    kept = node.wait_running(PORTS[0])
    dropped = node.wait_running(PORTS[1])

    assert node.terminate(proc) == 0
    assert zk.supervisor(sid).away
    time.sleep(WORKER_TIMEOUT / 2)  # the workers outlive their supervisor
    assert not gone(kept["pid"]) and not gone(dropped["pid"])
    zk.remove_assignment("topo-8-100")  # unassigned while no supervisor was watching
    launches_before = len(node.events("worker launched"))

    node.start()
    wait_for(lambda: (s := zk.supervisor(sid)) and not s.away, what="re-registration")
    wait_for(lambda: gone(dropped["pid"]), what="the no longer assigned worker to be killed")
    assert (node.control / f"sigterm-{dropped['worker_id']}").exists()
    wait_for(lambda: node.worker_dirs() == {kept["worker_id"]}, what="the killed worker's dir cleaned")
    # Past a whole worker timeout the adopted worker is still the same process, untouched.
    time.sleep(WORKER_TIMEOUT + 1)
    assert node.running(PORTS[0]) == kept
    assert not (node.control / f"sigterm-{kept['worker_id']}").exists()
    assert len(node.events("worker launched")) == launches_before
    assert [e["worker"] for e in node.events("worker adopted")] == [kept["worker_id"]]
    assert zk.supervisor(sid).used_ports == [PORTS[0]]


def test_waits_for_an_upgraded_nimbus_before_following_its_parts(node: Node, zk: ClusterState,
                                                                 server: BundleServer) -> None:
    """Against the layout an earlier nimbus writes (whole assignments only), a supervisor of
    this version has no parts to follow: it waits, unregistered, launching and killing
    nothing, until a nimbus of this version leads and writes them (docs/operations/upgrades.md)."""
    sid = "sup-upgraded"
    node.local.mkdir(parents=True)
    (node.local / "supervisor-id").write_text(sid + "\n")
    digest = publish(server, "topo-12-100")
    zk.set_topology_secrets("topo-12-100", new_topology_secrets())
    whole = Assignment("topo-12-100", {(1, 1): (sid, PORTS[0])}, {sid: "127.0.0.1"}, {(1, 1): time.time()}, digest, 1)
    zk.set_assignment(whole)  # then back to what an earlier nimbus would have left: no parts, no mark
    zk.client.delete(f"{zk.root}/node-assignments/{sid}", recursive=True)
    zk.client.delete(f"{zk.root}/layout")
    assert not zk.layout_current()
    node.start()
    waiting = ("the leading nimbus is of an earlier squall (it writes whole assignments only); this supervisor "
               "waits for an upgraded nimbus and leaves its workers alone meanwhile: upgrade every nimbus first "
               "(docs/operations/upgrades.md)")
    wait_for(lambda: node.events(waiting), what="the supervisor saying it waits")
    time.sleep(1.5)
    assert zk.supervisor(sid) is None and node.recorded() == {}  # not registered, nothing launched
    with ClusterState(zk.conf) as leader:  # what a nimbus of this version does on taking the lead
        leader.reconcile_node_parts(leader.assignments())
    rec = node.wait_running(PORTS[0])
    assert rec["topology_id"] == "topo-12-100" and zk.supervisor(sid) is not None


def test_kill_workers_on_exit_flag_stops_workers(node: Node, zk: ClusterState, server: BundleServer) -> None:
    proc = node.start("--kill-workers-on-exit")
    sid = node.id
    assign(zk, sid, "topo-9-100", publish(server, "topo-9-100"), PORTS[0])
    rec = node.wait_running(PORTS[0])
    assert node.terminate(proc) == 0
    assert gone(rec["pid"]) and node.worker_dirs() == set() and node.recorded() == {}
    assert zk.supervisor(sid) is None  # its workers are gone: no reason to keep its slots


def test_unreachable_zookeeper_exits_1(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    (tmp_path / "empty.yaml").write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "squall.daemons.supervisor.main", "-c", f"zookeeper.port={closed_port}",
         "-c", "zookeeper.connection.timeout.ms=1000", "-c", f"squall.local.dir={tmp_path / 'sup'}",
         *[arg for k, v in WORKERS_AS.items() for arg in ("-c", f"{k}={v}")]],
        cwd=tmp_path, env={**os.environ, "SQUALL_CONF": str(tmp_path / "empty.yaml")},
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "cannot connect to ZooKeeper" in result.stderr


@pytest.mark.parametrize("override", ["supervisor.bogus=1", "supervisor.slots.ports=oops", "novalue"])
def test_usage_errors_exit_2(tmp_path: Path, override: str) -> None:
    result = subprocess.run([sys.executable, "-m", "squall.daemons.supervisor.main", "-c", override],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "-c" in result.stderr


def test_a_negative_restart_grace_is_refused_naming_the_key(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "squall.daemons.supervisor.main", "-c",
                             "supervisor.restart.grace.secs=-5"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1 and "supervisor.restart.grace.secs" in result.stderr


def test_corrupt_state_file_kills_unrecorded_workers_and_starts_over(
        node: Node, zk: ClusterState, server: BundleServer) -> None:
    proc = node.start()
    sid = node.id
    assign(zk, sid, "topo-10-100", publish(server, "topo-10-100"), PORTS[0])
    first = node.wait_running(PORTS[0])
    assert node.terminate(proc) == 0
    (node.local / "supervisor-state.json").write_text("{not json")

    node.start()
    wait_for(lambda: gone(first["pid"]), what="the unrecorded worker to be killed")
    second = node.wait_running(PORTS[0], not_worker=first["worker_id"])
    assert second["topology_id"] == "topo-10-100"
    assert [e["level"] for e in node.events("local state file is malformed; set aside "
                                            "(unknown workers will be killed)")] == ["error"]
    assert list(node.local.glob("supervisor-state.json.corrupt-*"))
    assert [e["worker"] for e in node.events("killing unrecorded worker")] == [first["worker_id"]]
    assert first["worker_id"] not in node.worker_dirs()


def test_crash_looping_worker_is_relaunched_with_growing_delays(
        node: Node, zk: ClusterState, server: BundleServer) -> None:
    (node.control / "crash").touch()
    node.start()
    sid = node.id
    assign(zk, sid, "topo-11-100", publish(server, "topo-11-100"), PORTS[0])
    wait_for(lambda: len(node.events("worker launched")) >= 4, what="four launches")
    launched = [datetime.fromisoformat(e["timestamp"]) for e in node.events("worker launched")]
    gaps = [(b - a).total_seconds() for a, b in zip(launched, launched[1:])]
    assert gaps[1] >= 0.9 and gaps[2] >= 1.9, gaps  # held 1 s, then 2 s
    exits = node.events("worker exited")
    assert exits and all(e["exit_code"] == 3 and e["level"] == "warning" for e in exits)
    assert node.events("worker keeps dying; delaying its relaunch")

    (node.control / "crash").unlink()  # the cause is fixed: the next relaunch sticks
    node.wait_running(PORTS[0])


def test_a_crash_loops_back_off_is_not_the_next_topologys(node: Node, zk: ClusterState,
                                                          server: BundleServer) -> None:
    """A topology whose worker keeps dying is held longer each time; the topology placed on
    the slot next starts at once."""
    (node.control / "crash-topo-12-100").touch()
    node.start()
    sid = node.id
    assign(zk, sid, "topo-12-100", publish(server, "topo-12-100"), PORTS[0])
    wait_for(lambda: len(node.events("worker launched")) >= 5, what="five launches (then a 4 s hold)")
    zk.remove_assignment("topo-12-100")
    placed = time.monotonic()
    assign(zk, sid, "topo-13-100", publish(server, "topo-13-100"), PORTS[0])
    rec = node.wait_running(PORTS[0])
    took = time.monotonic() - placed
    assert rec["topology_id"] == "topo-13-100"
    assert took < 3.0, took  # a tick or two, not the 4 s (or more) the last one was held
    launched = [e for e in node.events("worker launched") if e["topology"] == "topo-13-100"]
    assert len(launched) == 1
