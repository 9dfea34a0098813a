"""Nimbus as a real process against a real ZooKeeper: submission checks, scheduling, kill,
status changes, rebalance, reassignment on lost supervisors and silent workers, failover.

Supervisors and workers are stood in for by what nimbus hears of them: SupervisorInfo nodes
written with ClusterState, and the reports supervisors post (support.reports) with their
workers' beats: nimbus only ever sees those.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import signal
import tarfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.daemons.nimbus.client import NimbusError
from squall.daemons.nimbus.code_store import build_bundle
from squall.daemons.nimbus.credentials import create
from squall.daemons.nimbus.process import NimbusProcess
from squall.daemons.state import (
    Assignment,
    ClusterState,
    ErrorInfo,
    SupervisorInfo,
    WorkerBeat,
)
from squall.loader import load_topology
from squall.runtime.stats import WorkerStats
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import TcpRelay
from support.reports import report_beats, send_report

pytestmark = pytest.mark.cluster

WAIT = 15.0
MAX_UPLOAD = 200_000
MONITOR_FREQ = 0.3

TOPOLOGY_FILE = '''\
from squall import Bolt, Spout, TopologyBuilder

CONFIG = {"topology.workers": 2}


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.collector, self.i = collector, 0

    def next_tuple(self):
        self.i += 1
        self.collector.emit([self.i])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


class Sink(Bolt):
    def execute(self, tuple):
        pass


def topology():
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(), 2)
    builder.set_bolt("sink", Sink(), 3, num_tasks=6).shuffle("numbers")
    return builder.build()
'''


# --- helpers -----------------------------------------------------------------------------




def make_bundle(folder: Path, conf: dict[str, Any] | None = None, name: str = "numbers") -> bytes:
    """A real bundle of TOPOLOGY_FILE (module name unique per call: loaded into this process)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"topo_{uuid.uuid4().hex[:10]}.py"
    path.write_text(TOPOLOGY_FILE, encoding="utf-8")
    (folder / "data.txt").write_text("shipped along\n", encoding="utf-8")
    topology, file_conf, _ = load_topology(path)
    return build_bundle(path, topology, {**file_conf, **(conf or {}), "topology.name": name})


def members(bundle: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def tar_gz(files: dict[str, bytes], extra: list[tarfile.TarInfo] = ()) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return raw.getvalue()


def with_json(files: dict[str, bytes], name: str, edit: Callable[[dict], Any]) -> dict[str, bytes]:
    doc = json.loads(files[name])
    edit(doc)
    return {**files, name: json.dumps(doc).encode()}


def post(nimbus: NimbusProcess, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    conn = nimbus.connection()
    try:
        conn.request("POST", path, body=body, headers={**nimbus.auth_headers(), **(headers or {})})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def register(state: ClusterState, sid: str, ports: list[int], host: str | None = None) -> None:
    now = time.time()
    state.register_supervisor(SupervisorInfo(sid, host or f"host-{sid}", ports, now, [], now))


def slot_sizes(assignment: Assignment) -> Counter:
    return Counter(assignment.executors.values())


def while_beating(beat: Callable[[], None], wait: Callable[[], Any]) -> Any:
    """``beat()`` every 0.3 s on a thread of its own while ``wait()`` runs; what it returns."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            beat()
            stop.wait(0.3)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        return wait()
    finally:
        stop.set()
        thread.join(5)


def only_topology(state: ClusterState) -> str:
    ids = state.topology_ids()
    assert len(ids) == 1, ids
    return ids[0]


# --- fixtures ----------------------------------------------------------------------------

@pytest.fixture
def state(cluster_conf: dict[str, Any]) -> Iterator[ClusterState]:
    cs = ClusterState(cluster_conf).start()
    try:
        yield cs
    finally:
        cs.close()


@pytest.fixture
def start_nimbus(cluster_conf: dict[str, Any], tmp_path: Path) -> Iterator[Callable[..., NimbusProcess]]:
    """Start nimbus processes (SIGTERMed afterwards; a clean stop must exit 0)."""
    started: list[NimbusProcess] = []
    credentials = create(tmp_path / "security")  # one cluster: its nimbus processes share tokens

    def start(leader: bool = True, **overrides: Any) -> NimbusProcess:
        conf = {**cluster_conf, "nimbus.monitor.freq.secs": MONITOR_FREQ,
                "nimbus.code.max.upload.bytes": MAX_UPLOAD, "nimbus.task.launch.secs": 120,
                "nimbus.task.timeout.secs": 30, "nimbus.leader.poll.secs": 0.2, **overrides}
        proc = NimbusProcess(conf, tmp_path / f"nimbus-{len(started)}", credentials=credentials)
        started.append(proc)
        return proc.start(leader=leader)

    yield start
    codes = {}
    for proc in started:
        was_alive = proc.alive()
        code = proc.stop()
        if was_alive:
            codes[proc.address] = code
    assert all(c == 0 for c in codes.values()), f"nimbus exit codes on SIGTERM: {codes}"


# --- submission checks -------------------------------------------------------------------

def _symlink() -> tarfile.TarInfo:
    info = tarfile.TarInfo("code/link.py")
    info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    return info


def test_invalid_submissions_are_refused_and_write_nothing(start_nimbus, state, tmp_path):
    register(state, "s1", [7001, 7002])
    nimbus = start_nimbus()
    good = members(make_bundle(tmp_path / "code"))
    q = "/api/v1/topologies?name="
    n = q + "numbers"
    cases: list[tuple[str, str, bytes, int, str]] = [
        ("not gzip", n, b"definitely not a tarball", 400, "not a valid tar.gz"),
        ("gzip, not tar", n, gzip.compress(b"x" * 1000), 400, "not a valid tar.gz"),
        ("empty body", n, b"", 400, "empty upload"),
        ("no name", "/api/v1/topologies", tar_gz(good), 400, "missing topology name"),
        ("bad name", q + "a%2Fb", tar_gz(good), 400, "bad topology name"),
        ("dot name", q + "..", tar_gz(good), 400, "bad topology name"),
        ("parent path", n, tar_gz({**good, "code/../../evil.py": b"x"}), 400, "unsafe path"),
        ("absolute path", n, tar_gz({**good, "/etc/cron.d/evil": b"x"}), 400, "unsafe path"),
        ("symlink", n, tar_gz(good, [_symlink()]), 400, "not a regular file"),
        ("stray member", n, tar_gz({**good, "run.sh": b"x"}), 400, "unexpected bundle member"),
        ("no structure", n, tar_gz({k: v for k, v in good.items() if k != "structure.json"}),
         400, "lacks structure.json"),
        ("no code", n, tar_gz({k: v for k, v in good.items() if not k.startswith("code/")}),
         400, "no files under code/"),
        ("structure not json", n, tar_gz({**good, "structure.json": b"{nope"}), 400,
         "structure.json is not valid JSON"),
        ("structure shape", n, tar_gz({**good, "structure.json": b"[]"}), 400, "JSON object"),
        ("parallelism above tasks", n,
         tar_gz(with_json(good, "structure.json",
                          lambda d: d["components"]["sink"].update(parallelism=9))), 400,
         "exceeds num_tasks"),
        ("zero tasks", n,
         tar_gz(with_json(good, "structure.json",
                          lambda d: d["components"]["sink"].update(num_tasks=0))), 400, "num_tasks"),
        ("huge task count", n,
         tar_gz(with_json(good, "structure.json", lambda d: d["components"]["sink"].update(
             parallelism=1, num_tasks=10**7))), 400, "tasks in all"),
        ("no spout", n,
         tar_gz(with_json(good, "structure.json", lambda d: d["components"]["numbers"].update(
             kind="bolt"))), 400, "at least one spout"),
        ("unknown source", n,
         tar_gz(with_json(good, "structure.json", lambda d: d["components"]["sink"].update(
             inputs=[["ghost", "default", "shuffle"]]))), 400, "unknown component 'ghost'"),
        ("unknown stream", n,
         tar_gz(with_json(good, "structure.json", lambda d: d["components"]["sink"].update(
             inputs=[["numbers", "nope", "shuffle"]]))), 400, "does not declare"),
        ("system component id", n,
         tar_gz(with_json(good, "structure.json", lambda d: d["components"].update(
             __acker=d["components"]["sink"]))), 400, "bad component id"),
        ("unknown conf key", n,
         tar_gz(with_json(good, "conf.json", lambda d: d.update({"topology.bogus": 1}))), 400,
         "unknown config key 'topology.bogus'"),
        ("ill-typed conf", n,
         tar_gz(with_json(good, "conf.json", lambda d: d.update({"topology.workers": "two"}))), 400,
         "topology.workers"),
        ("conf names another topology", q + "other", tar_gz(good), 400, "names the topology 'numbers'"),
    ]
    for label, path, body, status, text in cases:
        code, reply = post(nimbus, path, body, {"Content-Type": "application/gzip"})
        assert code == status, (label, code, reply)
        assert text in reply["error"], (label, reply)
        assert state.topology_ids() == [], label
        assert state.assignment_ids() == [], label
    store = nimbus.code_dir
    assert not any(store.iterdir()), list(store.iterdir())
    # The same nimbus still accepts a good bundle.
    code, reply = post(nimbus, q + "numbers", tar_gz(good))
    assert code == 200, reply


def test_upload_over_the_limit_is_413(start_nimbus, state):
    nimbus = start_nimbus()
    code, reply = post(nimbus, "/api/v1/topologies?name=big", b"\0" * (MAX_UPLOAD + 1))
    assert code == 413 and "above the limit" in reply["error"]
    # Chunked (no Content-Length): refused the same way.
    conn = nimbus.connection()
    try:
        chunks = (b"\0" * 50_000 for _ in range(MAX_UPLOAD // 50_000 + 2))
        conn.request("POST", "/api/v1/topologies?name=big", body=chunks, encode_chunked=True,
                     headers=nimbus.auth_headers())
        resp = conn.getresponse()
        assert resp.status == 413, resp.status
        assert "above the limit" in json.loads(resp.read())["error"]
    finally:
        conn.close()
    assert state.topology_ids() == [] and state.assignment_ids() == []


def test_unknown_routes_and_methods_answer_json(start_nimbus):
    nimbus = start_nimbus()
    client = nimbus.client()
    with pytest.raises(NimbusError) as info:
        client.topology("nope")
    assert info.value.status == 404 and "no topology named 'nope'" in str(info.value)
    code, reply = post(nimbus, "/api/v1/cluster", b"{}")
    assert code == 405 and "not allowed" in reply["error"]
    code, reply = post(nimbus, "/api/v1/topologies/x/kill", b"[1, 2")
    assert (code, reply) == (404, {"error": "no topology named 'x'"})  # the body is not even read
    code, reply = post(nimbus, "/elsewhere", b"")
    assert code == 404 and "error" in reply


def abort_pending(pid: int) -> bool:
    """Whether SIGABRT waits, undelivered, for the process ``pid`` (its shared pending set)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        pending = next(int(line.split()[1], 16) for line in fh if line.startswith("ShdPnd:"))
    return bool(pending & (1 << (signal.SIGABRT - 1)))


def test_a_nimbus_that_outlives_its_stop_grace_leaves_its_threads_stacks(start_nimbus):
    """A stop that hangs says where: before the SIGKILL, faulthandler prints every thread."""
    nimbus = start_nimbus()
    assert nimbus.proc is not None
    # A hung stop, made sure: the nimbus is frozen through its grace (a fast shutdown can
    # finish in no time at all). Woken, it has SIGABRT and SIGTERM pending; the lower
    # number is delivered first, so faulthandler sees it where it was, in its main loop.
    pid = nimbus.proc.pid
    os.kill(pid, signal.SIGSTOP)

    def wake_once_aborted() -> None:
        wait_for(lambda: abort_pending(pid), 30, "the stop's SIGABRT")
        os.kill(pid, signal.SIGCONT)

    wake = threading.Thread(target=wake_once_aborted)
    wake.start()
    try:
        code = nimbus.stop(timeout=0.5)
    finally:
        wake.join()
    # faulthandler reads the other threads' frames while they run on: one that moves under it
    # can fault the dump part way (seen 2 in 12), which still ends the process and says so.
    assert code in (-signal.SIGABRT, -signal.SIGSEGV), (code, nimbus.log_tail())
    tail = nimbus.log_tail()
    assert "Fatal Python error: " in tail and "most recent call first" in tail, tail
    if code == -signal.SIGABRT:  # the whole dump, the main thread last
        assert "Fatal Python error: Aborted" in tail and "daemon.py" in tail, tail


# --- submit, kill, status ------------------------------------------------------------------

def test_submit_writes_topology_and_an_even_assignment(start_nimbus, state, tmp_path):
    for sid in ("a", "b", "c"):
        register(state, sid, [7001, 7002])
    nimbus = start_nimbus()
    bundle = make_bundle(tmp_path / "code", {"topology.workers": 3})
    reply = nimbus.client().submit("numbers", bundle)
    digest = hashlib.sha256(bundle).hexdigest()
    assert reply["name"] == "numbers" and reply["id"].startswith("numbers-") and reply["workers"] == 3
    info = state.topology(reply["id"])
    assert info is not None and info.status == "active" and info.num_workers == 3
    assert info.code_digest == digest
    assert info.conf["topology.name"] == "numbers" and info.conf["topology.acker.executors"] == 3
    assert info.component_parallelism == {"__acker": 3, "numbers": 2, "sink": 3}
    assignment = state.assignment(reply["id"])
    assert assignment is not None and assignment.code_digest == digest
    # 8 executors (2 spout, 3 sink, 3 ackers) over 3 slots, one per supervisor, sizes 3/3/2.
    assert len(assignment.executors) == 8
    assert sorted(slot_sizes(assignment).values()) == [2, 3, 3]
    assert sorted(node for node, _ in assignment.slots()) == ["a", "b", "c"]
    assert assignment.node_host == {"a": "host-a", "b": "host-b", "c": "host-c"}
    # Its own generated secrets, in a node only daemons can read (tests/test_security_zk.py).
    secrets = state.topology_secrets(reply["id"])
    assert secrets is not None and len(secrets.zk_password) >= 32
    tasks = sorted(t for s, e in assignment.executors for t in range(s, e + 1))
    assert tasks == list(range(1, 12))  # 2 + 6 + 3 tasks
    # The code is served back byte for byte, with its digest, and kept where the contract says.
    data, header = nimbus.client().download_bundle(reply["id"])
    assert data == bundle and header == digest
    stored = nimbus.code_dir / reply["id"] / "bundle.tar.gz"
    assert stored.read_bytes() == bundle
    # The name is taken while the topology lives.
    with pytest.raises(NimbusError) as err:
        nimbus.client().submit("numbers", bundle)
    assert err.value.status == 409 and "already running" in str(err.value)
    assert state.topology_ids() == [reply["id"]]
    listed = nimbus.client().topologies()
    assert [(t["name"], t["status"], t["workers"], t["executors"]) for t in listed] == [
        ("numbers", "active", 3, 8)]


def test_submit_without_supervisors_is_scheduled_when_slots_appear(start_nimbus, state, tmp_path):
    nimbus = start_nimbus()
    reply = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))
    assert reply["workers"] == 0 and "no free slots" in reply["warning"]
    assert state.assignment(reply["id"]) is None
    register(state, "late", [7001, 7002])
    assignment = wait_for(lambda: state.assignment(reply["id"]), what="an assignment")
    assert assignment.slots() == {("late", 7001), ("late", 7002)}


def test_status_reports_executors_stats_and_errors(start_nimbus, state, tmp_path):
    register(state, "a", [7001])
    register(state, "b", [7001])
    nimbus = start_nimbus()
    tid = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))["id"]
    assignment = state.assignment(tid)
    now = time.time()
    beats = []
    for node, port in assignment.slots():
        execs = assignment.executors_on(node, port)
        stats = [{"component": "?", "executor": list(ex), "kind": "bolt",
                  "emitted": {"default": 10, "__ack_init": 99}, "executed": 4, "acked": 2, "failed": 1}
                 for ex in execs]
        beats.append(WorkerBeat(tid, node, port, now, execs, 12.0, WorkerStats.from_dict({"executors": stats})))
    report_beats(nimbus, beats)
    state.report_error(tid, ErrorInfo(now, "sink", 5, "host-a", 7001, "Traceback...\nValueError: boom"))
    st = nimbus.client().topology("numbers")
    assert st["id"] == tid and st["status"] == "active" and len(st["workers"]) == 2
    comps = {c["id"]: c for c in st["components"]}
    assert set(comps) == {"numbers", "sink", "__acker"}
    assert comps["numbers"]["kind"] == "spout" and comps["sink"]["kind"] == "bolt"
    assert len(comps["sink"]["executors"]) == 3
    for row in comps["sink"]["executors"]:
        assert row["host"] in ("host-a", "host-b") and row["port"] == 7001
        assert row["emitted"] == 10 and row["executed"] == 4 and row["uptime"] == 12.0
    assert comps["sink"]["emitted"] == 30 and comps["sink"]["acked"] == 6 and comps["sink"]["failed"] == 3
    assert "ValueError: boom" in comps["sink"]["last_error"]["error"]
    assert comps["numbers"]["last_error"] is None
    assert nimbus.client().topology(tid)["name"] == "numbers"  # by id too


def test_kill_removes_all_state_and_code(start_nimbus, state, tmp_path):
    register(state, "a", [7001, 7002])
    nimbus = start_nimbus()
    client = nimbus.client()
    tid = client.submit("numbers", make_bundle(tmp_path / "code"))["id"]
    state.worker_beat(WorkerBeat(tid, "a", 7001, time.time(), [(1, 1)], 1.0))
    state.report_error(tid, ErrorInfo(time.time(), "sink", 3, "h", 7001, "boom"))
    reply = client.kill("numbers", wait_secs=1.0)
    assert reply["status"] == "killed" and reply["wait_secs"] == 1.0
    assert state.topology(tid).status == "killed"
    assert state.assignment(tid) is not None  # still there during the wait
    with pytest.raises(NimbusError) as err:
        client.activate("numbers")
    assert err.value.status == 409
    wait_for(lambda: state.topology_ids() == [] and state.assignment_ids() == [], what="removal")
    assert state.worker_beats(tid) == {} and state.errors(tid) == []
    with pytest.raises(NimbusError) as err:
        client.download_bundle(tid)
    assert err.value.status == 404
    assert not (nimbus.code_dir / tid).exists()
    # The name is free again; an immediate kill removes at once.
    tid2 = client.submit("numbers", make_bundle(tmp_path / "code2"))["id"]
    assert tid2 != tid
    client.kill("numbers", wait_secs=0)
    assert state.topology_ids() == [] and state.assignment_ids() == []
    with pytest.raises(NimbusError) as err:
        client.kill("numbers")
    assert err.value.status == 404


def test_activate_and_deactivate_flip_status(start_nimbus, state, tmp_path):
    register(state, "a", [7001])
    nimbus = start_nimbus()
    client = nimbus.client()
    tid = client.submit("numbers", make_bundle(tmp_path / "code"))["id"]
    assert client.deactivate("numbers")["status"] == "inactive"
    assert state.topology(tid).status == "inactive"
    assert client.deactivate("numbers")["status"] == "inactive"  # idempotent
    assert client.activate(tid)["status"] == "active"
    assert state.topology(tid).status == "active"


def test_rebalance_two_to_three_workers_and_parallelism(start_nimbus, state, tmp_path):
    for sid in ("a", "b"):
        register(state, sid, [7001, 7002])
    nimbus = start_nimbus()
    client = nimbus.client()
    tid = client.submit("numbers", make_bundle(tmp_path / "code"))["id"]
    assert len(state.assignment(tid).slots()) == 2
    client.deactivate("numbers")
    reply = client.rebalance("numbers", num_workers=3, wait_secs=0)
    assert reply["status"] == "inactive" and reply["workers"] == 3  # back to its previous status
    assignment = state.assignment(tid)
    assert len(assignment.slots()) == 3 and assignment.version == 2
    assert sorted(slot_sizes(assignment).values()) == [2, 2, 3]  # 7 executors
    info = state.topology(tid)
    assert info.status == "inactive" and info.num_workers == 3
    # More sink executors (6 tasks): 2 spout + 6 sink + 2 ackers (fixed at submit).
    reply = client.rebalance("numbers", executors={"sink": 6}, wait_secs=0)
    assignment = state.assignment(tid)
    assert len(assignment.executors) == 10 and len(assignment.slots()) == 3
    assert state.topology(tid).component_parallelism["sink"] == 6
    for bad, text in [({"sink": 7}, "executors of 'sink'"), ({"nope": 1}, "no component 'nope'")]:
        with pytest.raises(NimbusError) as err:
            client.rebalance("numbers", executors=bad, wait_secs=0)
        assert err.value.status == 400 and text in str(err.value)
    with pytest.raises(NimbusError) as err:
        client.rebalance("numbers", num_workers=0)
    assert err.value.status == 400
    # With a wait the topology is "rebalancing" meanwhile, then settles.
    reply = client.rebalance("numbers", num_workers=2, wait_secs=0.5)
    assert reply["status"] == "rebalancing" and state.topology(tid).status == "rebalancing"
    wait_for(lambda: len(state.assignment(tid).slots()) == 2 and state.topology(tid).status == "inactive",
             what="the delayed rebalance")


# --- the monitor -----------------------------------------------------------------------------

def test_lost_supervisor_moves_its_executors(start_nimbus, state, cluster_conf, tmp_path):
    register(state, "a", [7001, 7002])
    other = ClusterState(cluster_conf).start()
    try:
        register(other, "b", [7001, 7002])
        # Right after connecting nimbus holds reassignments for the task timeout: keep it short.
        nimbus = start_nimbus(**{"nimbus.task.timeout.secs": 1})
        tid = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))["id"]
        before = state.assignment(tid)
        assert {node for node, _ in before.slots()} == {"a", "b"}
        time.sleep(1.5)
        other.unregister_supervisor("b")  # the node disappears
        gone = time.monotonic()
        after = wait_for(lambda: (a := state.assignment(tid)) and {n for n, _ in a.slots()} == {"a"} and a,
                         what="executors to leave b")
        assert time.monotonic() - gone < MONITOR_FREQ + 3.0
        assert after.slots() == {("a", 7001), ("a", 7002)} and set(after.executors) == set(before.executors)
        # Executors already on a kept their place and start time.
        for ex, slot in before.executors.items():
            if slot[0] == "a":
                assert after.executors[ex] == slot and after.executor_start[ex] == before.executor_start[ex]
    finally:
        other.close()


def test_silent_worker_executors_are_reassigned(start_nimbus, state, tmp_path):
    for sid in ("a", "b"):
        register(state, sid, [7001, 7002])
    nimbus = start_nimbus(**{"nimbus.task.launch.secs": 1.5, "nimbus.task.timeout.secs": 1.5})
    tid = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))["id"]
    first = state.assignment(tid)
    healthy, silent = sorted(first.slots())

    def beat() -> None:  # only the healthy worker beats (its supervisor reports it)
        execs = first.executors_on(*healthy)
        send_report(nimbus, healthy[0], [WorkerBeat(tid, healthy[0], healthy[1], time.time(), execs, 1.0)])

    moved = while_beating(beat, lambda: wait_for(lambda: (a := state.assignment(tid)) and a.version > first.version
                                                 and a, what="a new assignment"))
    for ex in first.executors_on(*healthy):
        assert moved.executors[ex] == healthy
    for ex in first.executors_on(*silent):
        assert moved.executors[ex] not in (silent, healthy)


def test_workers_and_supervisors_of_an_earlier_squall_are_heard_through_zookeeper(start_nimbus, state, tmp_path):
    """A rolling upgrade (docs/operations/upgrades.md): supervisors of the earlier version
    refresh their node instead of reporting, and their workers write beats to ZooKeeper.
    Past the supervisor and task timeouts, the beating worker keeps its executors; only the
    silent one's move."""
    for sid in ("a", "b"):
        register(state, sid, [7001, 7002])
    nimbus = start_nimbus(**{"nimbus.task.launch.secs": 1.5, "nimbus.task.timeout.secs": 1.5,
                             "nimbus.supervisor.timeout.secs": 2})
    tid = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))["id"]
    first = state.assignment(tid)
    healthy, silent = sorted(first.slots())

    def earlier_squall() -> None:
        for sid in ("a", "b"):
            register(state, sid, [7001, 7002])  # a node refresh: the old supervisor's heartbeat
        state.worker_beat(WorkerBeat(tid, healthy[0], healthy[1], time.time(), first.executors_on(*healthy), 1.0))

    def moved_then_latest() -> tuple[Assignment, Assignment]:
        moved = wait_for(lambda: (a := state.assignment(tid)) and a.version > first.version and a,
                         what="a new assignment")
        time.sleep(3)  # past both timeouts again (the moved executors' new slot beats neither)
        return moved, state.assignment(tid)

    moved, latest = while_beating(earlier_squall, moved_then_latest)
    for ex in first.executors_on(*healthy):
        assert moved.executors[ex] == healthy and latest.executors[ex] == healthy
    for ex in first.executors_on(*silent):
        assert moved.executors[ex] not in (silent, healthy)


def test_after_reconnecting_nimbus_reassigns_nothing_for_the_task_timeout(start_nimbus, state, tmp_path,
                                                                            zk_server):
    """Workers that could not beat while ZooKeeper was away are not dead: a nimbus back in
    its session waits nimbus.task.timeout.secs before judging them (the old nimbus moved
    them on its first round)."""
    relay = TcpRelay((zk_server.host, zk_server.port))
    for sid in ("a", "b"):
        register(state, sid, [7001, 7002])
    nimbus = start_nimbus(**{"zookeeper.port": relay.port, "nimbus.task.launch.secs": 1,
                             "nimbus.task.timeout.secs": 3})
    tid = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))["id"]
    first = state.assignment(tid)
    beating = threading.Event()
    beating.set()
    stop = threading.Event()

    def beat() -> None:  # the supervisors' reports, paused while "ZooKeeper is away" for them too
        while not stop.is_set():
            if beating.is_set():
                for node in {n for n, _ in first.slots()}:  # a standby's 503 while cut off: ignored
                    send_report(nimbus, node, [WorkerBeat(tid, n, p, time.time(), first.executors_on(n, p), 1.0)
                                               for n, p in first.slots() if n == node])
            stop.wait(0.3)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        time.sleep(2)  # past the launch grace: the beats are what keeps the executors
        beating.clear()
        relay.cut()
        time.sleep(4)  # less than the 6 s session: nimbus keeps its session and leadership
        relay.restore()
        time.sleep(1.5)
        beating.set()
        time.sleep(5)  # past the grace and many monitor rounds
        assert state.assignment(tid).version == first.version
        log = nimbus.log_path.read_text()
        assert log.count("no reassignment until workers could be heard") == 2  # start, reconnect
    finally:
        stop.set()
        thread.join(5)
        relay.close()


def test_malformed_nodes_do_not_stop_nimbus(start_nimbus, state, zk_client, zk_root, tmp_path):
    register(state, "a", [7001])
    zk_client.create(f"{zk_root}/supervisors/junk", b"\xff not json")
    zk_client.create(f"{zk_root}/topologies/junk-1-1", b'{"v": 1, "id": 3}')
    nimbus = start_nimbus()
    tid = nimbus.client().submit("numbers", make_bundle(tmp_path / "code"))["id"]
    # Listed (issue 20: a damaged node must not hide a topology), as what it is.
    assert [(t["id"], t["status"]) for t in nimbus.client().topologies()] == [
        ("junk-1-1", "unreadable"), (tid, "active")]
    assert [s["id"] for s in nimbus.client().cluster()["supervisors"]] == ["a"]
    assert state.assignment(tid).slots() == {("a", 7001)}


# --- leader election -------------------------------------------------------------------------

def test_two_nimbus_one_leads_and_failover(start_nimbus, state, tmp_path):
    register(state, "a", [7001, 7002])
    first = start_nimbus()
    second = start_nimbus(leader=False)
    info = second.client().cluster()
    assert info["nimbus"]["leader"] == first.address and not info["nimbus"]["is_leader"]
    assert info["nimbus"]["contenders"] == [first.address, second.address]
    bundle = make_bundle(tmp_path / "code")
    # A write at the standby is answered 503 naming the leader...
    code, reply = post(second, "/api/v1/topologies?name=numbers", bundle)
    assert code == 503 and reply["leader"] == first.address
    assert state.topology_ids() == []
    # ...and the client follows it there.
    tid = second.client().submit("numbers", bundle)["id"]
    assert state.topology(tid).status == "active"
    # Reads work at the standby, and it copies the code from the leader.
    assert second.client().topology("numbers")["id"] == tid
    wait_for(lambda: (second.code_dir / tid / "bundle.tar.gz").is_file(),
             what="the standby's code sync")
    first.kill()  # a crash: its session ends only by timeout
    second.wait_until(lambda i: i["nimbus"]["is_leader"], WAIT, "leadership after failover")
    data, _ = second.client().download_bundle(tid)
    assert data == bundle
    second.client().kill("numbers", wait_secs=0)
    assert state.topology_ids() == [] and state.assignment_ids() == []


def test_bundle_layout_is_deterministic_and_skips_caches(tmp_path):
    folder = tmp_path / "app"
    (folder / "__pycache__").mkdir(parents=True)
    (folder / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref", encoding="utf-8")
    (folder / "lib").mkdir()
    (folder / "lib" / "helpers.py").write_text("X = 1\n", encoding="utf-8")
    path = folder / f"topo_{uuid.uuid4().hex[:10]}.py"
    path.write_text(TOPOLOGY_FILE, encoding="utf-8")
    topology, conf, _ = load_topology(path)
    first = build_bundle(path, topology, {**conf, "topology.name": "numbers"})
    time.sleep(1.1)  # a later mtime must not change the bytes
    path.touch()
    assert build_bundle(path, topology, {**conf, "topology.name": "numbers"}) == first
    files = members(first)
    assert sorted(files) == ["code/lib/helpers.py", f"code/{path.name}", "conf.json", "structure.json",
                             "topology.bin"]
    assert json.loads(files["conf.json"]) == {"topology.workers": 2, "topology.name": "numbers"}
    structure = json.loads(files["structure.json"])["components"]
    assert structure["sink"] == {"parallelism": 3, "num_tasks": 6, "kind": "bolt",
                                 "inputs": [["numbers", "default", "shuffle"]], "streams": {}}
    assert structure["numbers"]["streams"] == {"default": ["n"]}


# --- damaged but not lost (issue 20) -----------------------------------------------------------

def test_a_malformed_topology_node_stays_listed_keeps_its_name_and_is_killable_by_id(
        start_nimbus, state, zk_client, zk_root, tmp_path):
    register(state, "a", [7001, 7002])
    nimbus = start_nimbus()
    client = nimbus.client()
    bundle = make_bundle(tmp_path / "code")
    tid = client.submit("numbers", bundle)["id"]
    placed = state.assignment(tid)
    zk_client.set(f"{zk_root}/topologies/{tid}", b'{"v": 1, "id": 3}')  # damaged, not gone
    rows = client.topologies()
    assert [(r["id"], r["name"], r["status"], r["workers"]) for r in rows] == [(tid, "numbers", "unreadable", 2)]
    # The name stays taken: a second "numbers" would run next to the first.
    with pytest.raises(NimbusError) as err:
        client.submit("numbers", make_bundle(tmp_path / "code2"))
    assert err.value.status == 409 and "kill it by id" in str(err.value)
    with pytest.raises(NimbusError) as err:
        client.topology("numbers")
    assert err.value.status == 409 and f"squall kill {tid}" in str(err.value)
    time.sleep(5 * MONITOR_FREQ)  # rounds pass: its assignment (its workers) stays as it was
    assert state.assignment(tid) == placed and state.topology_ids() == [tid]
    with pytest.raises(NimbusError) as err:
        client.kill("numbers", wait_secs=0)  # by name: which one is meant is unknowable
    assert err.value.status == 409
    assert client.kill(tid, wait_secs=0)["id"] == tid
    assert state.topology_ids() == [] and state.assignment_ids() == []
    assert client.submit("numbers", bundle)["name"] == "numbers"  # the name is free again
