"""ClusterState against a real ZooKeeper: records, malformed data, watches, expiry, election."""
from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
from kazoo.client import KazooClient
from structlog.testing import capture_logs

from squall.daemons.state import (
    Assignment,
    ClusterState,
    ClusterStateError,
    ErrorInfo,
    SupervisorInfo,
    TopologyInfo,
    WorkerBeat,
)
from squall.daemons.state.records import encode
from squall.runtime.stats import WorkerStats
from squall.testing.waiting import wait_for
from squall.testing.zookeeper import drop_connection, expire_session

pytestmark = pytest.mark.cluster

WAIT = 15.0  # upper bound for anything ZooKeeper-driven to show up





class Recorder:
    """Collects callback values; ``wait_for`` polls the latest one with a deadline."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> None:
        with self._lock:
            self.values.append(value)

    @property
    def last(self) -> Any:
        with self._lock:
            return self.values[-1] if self.values else None

    def wait_for(self, predicate: Callable[[Any], bool], what: str) -> Any:
        def check() -> bool:
            with self._lock:
                return bool(self.values) and predicate(self.values[-1])
        wait_for(check, what=what)
        return self.last


@pytest.fixture
def make_state(cluster_conf: dict[str, Any]) -> Iterator[Callable[..., ClusterState]]:
    states: list[ClusterState] = []

    def make(**overrides: Any) -> ClusterState:
        state = ClusterState({**cluster_conf, **overrides}).start()
        states.append(state)
        return state

    yield make
    for state in states:
        state.close()


@pytest.fixture
def state(make_state: Callable[..., ClusterState]) -> ClusterState:
    return make_state()


def topo(tid: str = "wc-1-100", status: str = "active") -> TopologyInfo:
    return TopologyInfo(id=tid, name="wc", status=status, num_workers=2,
                        component_parallelism={"spout": 2, "count": 4}, code_digest="sha256:ab",
                        submitted_at=1700000000.5, conf={"topology.workers": 2, "nested": {"a": [1]}})


def assignment(tid: str = "wc-1-100", version: int = 1) -> Assignment:
    return Assignment(
        topology_id=tid,
        executors={(1, 2): ("sup-a", 6700), (3, 3): ("sup-b", 6701), (4, 6): ("sup-a", 6700)},
        node_host={"sup-a": "10.0.0.1", "sup-b": "10.0.0.2"},
        executor_start={(1, 2): 10.0, (3, 3): 11.5, (4, 6): 12.0},
        code_digest="sha256:ab", version=version)


def supervisor(sid: str = "5f0e-sup", used: list[int] | None = None) -> SupervisorInfo:
    return SupervisorInfo(id=sid, host="127.0.0.1", ports=[6700, 6701], started_at=100.0,
                          used_ports=used or [], time=101.0)


# --- round trips -----------------------------------------------------------------------

def test_topology_round_trip_and_status(state: ClusterState) -> None:
    info = topo()
    state.set_topology(info)
    state.set_topology(topo("other-2-200", status="inactive"))
    assert state.topology(info.id) == info
    assert state.topology_ids() == ["other-2-200", "wc-1-100"]
    assert set(state.topologies()) == {"other-2-200", "wc-1-100"}
    assert state.set_topology_status(info.id, "killed") is True
    assert state.topology(info.id).status == "killed"
    assert state.set_topology_status("missing", "active") is False
    with pytest.raises(ValueError, match="status"):
        state.set_topology_status(info.id, "paused")
    state.remove_topology(info.id)
    assert state.topology(info.id) is None
    assert state.topology_ids() == ["other-2-200"]


def test_assignment_round_trip(state: ClusterState) -> None:
    a = assignment()
    state.set_assignment(a)
    got = state.assignment(a.topology_id)
    assert got == a
    assert got.slots() == {("sup-a", 6700), ("sup-b", 6701)}
    assert got.executors_on("sup-a", 6700) == [(1, 2), (4, 6)]
    assert state.assignment_ids() == [a.topology_id]
    assert state.assignments() == {a.topology_id: a}
    state.remove_assignment(a.topology_id)
    assert state.assignment(a.topology_id) is None
    state.remove_assignment(a.topology_id)  # removing twice is fine


def test_supervisor_is_ephemeral_and_refreshable(state: ClusterState, zk_client: KazooClient) -> None:
    info = supervisor()
    state.register_supervisor(info)
    assert state.supervisors() == {info.id: info}
    _, stat = zk_client.get(f"{state.root}/supervisors/{info.id}")
    assert stat.ephemeralOwner == state.client.client_id[0]
    refreshed = supervisor(used=[6700])
    state.register_supervisor(refreshed)
    assert state.supervisor(info.id) == refreshed
    state.unregister_supervisor(info.id)
    assert state.supervisors() == {}


def test_supervisor_node_goes_with_the_session(make_state: Callable[..., ClusterState]) -> None:
    owner, observer = make_state(), make_state()
    owner.register_supervisor(supervisor())
    assert set(observer.supervisors()) == {"5f0e-sup"}
    owner.close()
    # Gone when the session ends: at once on a close the server heard, else when it expires.
    deadline = time.monotonic() + 15
    while observer.supervisors() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert observer.supervisors() == {}


def test_worker_beats_round_trip(state: ClusterState) -> None:
    beats = [WorkerBeat("wc-1-100", "5f0e-sup", port, time=50.0 + port, executors=[(1, 2), (3, 3)],
                        uptime=12.5, stats=WorkerStats.from_dict(
                            {"executors": [{"executor": [1, 2], "emitted": {"default": 10}}], "time": 50.0}))
             for port in (6700, 6701)]
    for beat in beats:
        state.worker_beat(beat)
    assert state.worker_beats("wc-1-100") == {("5f0e-sup", b.port): b for b in beats}
    newer = WorkerBeat("wc-1-100", "5f0e-sup", 6700, time=99.0, executors=[(1, 2)], uptime=60.0)
    state.worker_beat(newer)
    assert state.worker_beats("wc-1-100")[("5f0e-sup", 6700)] == newer
    state.remove_worker_beat("wc-1-100", "5f0e-sup", 6701)
    assert list(state.worker_beats("wc-1-100")) == [("5f0e-sup", 6700)]
    assert state.worker_beats("no-such-topology") == {}


def test_errors_keep_the_last_n(make_state: Callable[..., ClusterState]) -> None:
    state = make_state(**{"topology.errors.kept": 3})
    for i in range(5):
        state.report_error("wc-1-100", ErrorInfo(time=float(i), component="count", task=3,
                                                 host="h1", port=6700, error=f"boom {i}"))
    state.report_error("wc-1-100", ErrorInfo(time=2.5, component="spout", task=1, host="h1",
                                             port=6701, error="x" * 20000))
    kept = state.errors("wc-1-100", "count")
    assert [e.error for e in kept] == ["boom 2", "boom 3", "boom 4"]
    assert kept[0] == ErrorInfo(2.0, "count", 3, "h1", 6700, "boom 2")
    everything = state.errors("wc-1-100")
    assert [(e.component, e.time) for e in everything] == [
        ("count", 2.0), ("spout", 2.5), ("count", 3.0), ("count", 4.0)]
    assert everything[1].error.endswith("[truncated]") and len(everything[1].error) < 9000
    state.report_error("wc-1-100", ErrorInfo(9.0, "count", 3, "h1", 6700, "late"), kept=1)
    assert [e.error for e in state.errors("wc-1-100", "count")] == ["late"]
    assert state.errors("no-such-topology") == []


def test_bad_names_are_refused(state: ClusterState) -> None:
    with pytest.raises(ValueError, match="node name"):
        state.set_topology(topo("a/b"))
    with pytest.raises(ValueError, match="node name"):
        state.remove_worker_beat("t", "..", 6700)


def test_unreachable_zookeeper_is_a_clear_error(cluster_conf: dict[str, Any]) -> None:
    from squall.testing.zookeeper import free_port

    conf = {**cluster_conf, "zookeeper.port": free_port(), "zookeeper.connection.timeout.ms": 500}
    with pytest.raises(ClusterStateError, match="cannot connect"):
        ClusterState(conf).start()


# --- malformed data --------------------------------------------------------------------

def test_malformed_data_is_skipped_with_a_warning(state: ClusterState, zk_client: KazooClient) -> None:
    root = state.root
    state.set_topology(topo())
    state.set_assignment(assignment())
    state.register_supervisor(supervisor())
    state.report_error("wc-1-100", ErrorInfo(1.0, "count", 3, "h", 6700, "good"))
    garbage = {
        f"{root}/topologies/not-json": b"\xff\x00garbage",
        f"{root}/topologies/old-version": b'{"v": 0, "id": "old-version"}',
        f"{root}/topologies/bad-status": (
            b'{"v":1,"id":"x","name":"x","status":"sleeping","num_workers":1,'
            b'"component_parallelism":{},"code_digest":"","submitted_at":0,"conf":{}}'),
        f"{root}/assignments/wrong-shape": b'{"v":1,"topology_id":"w","executors":[[1,2,"n"]],'
                                           b'"node_host":{},"executor_start":[],"code_digest":"","version":1}',
        f"{root}/assignments/a-list": b"[1, 2, 3]",
        f"{root}/supervisors/empty": b"",
        # Deep nesting made json raise RecursionError past the decoder (supervisor crash loop).
        f"{root}/assignments/deep": b'{"v":1,"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        f"{root}/topologies/deep-conf": b'{"v":1,"conf":' + b'{"a":' * 200 + b"1" + b"}" * 200 + b"}",
        # A range far outside any topology: a worker would iterate it.
        f"{root}/assignments/huge-range": b'{"v":1,"topology_id":"h","executors":[[1,4000000000000,"n",1]],'
                                          b'"node_host":{},"executor_start":[],"code_digest":"","version":1}',
        f"{root}/supervisors/away-not-bool": b'{"v":1,"id":"s","host":"h","ports":[1],"started_at":0,'
                                             b'"used_ports":[],"away":"yes"}',
        f"{root}/workerbeats/wc-1-100/n-6700": b'{"v":1}',
    }
    for path, data in garbage.items():
        zk_client.create(path, data, makepath=True)
    # One bad entry inside an otherwise good error list.
    zk_client.set(f"{root}/errors/wc-1-100/count",
                  b'{"v":1,"errors":[{"time":"soon"},{"time":2.0,"component":"count","task":3,'
                  b'"host":"h","port":6700,"error":"kept"}]}')

    with capture_logs() as logs:
        assert set(state.topologies()) == {"wc-1-100"}
        assert state.topology("not-json") is None
        assert state.topology("old-version") is None
        assert set(state.assignments()) == {"wc-1-100"}
        assert state.assignment("wrong-shape") is None
        assert state.assignment("deep") is None and state.assignment("huge-range") is None
        assert set(state.supervisors()) == {"5f0e-sup"}
        assert state.worker_beats("wc-1-100") == {}
        assert [e.error for e in state.errors("wc-1-100")] == ["kept"]

    warned = {entry["path"] for entry in logs if entry["log_level"] == "warning"}
    assert warned >= set(garbage) | {f"{root}/errors/wc-1-100/count"}
    assert all(entry["reason"] for entry in logs if entry["log_level"] == "warning")
    assert state.malformed_reads >= len(garbage) + 1


def test_watches_skip_malformed_children(state: ClusterState, zk_client: KazooClient) -> None:
    seen = Recorder()
    state.watch_assignments(seen)
    seen.wait_for(lambda v: v == {}, "initial empty assignments")
    zk_client.create(f"{state.root}/assignments/junk", b"not json")
    state.set_assignment(assignment())
    seen.wait_for(lambda v: set(v) == {"wc-1-100"}, "the good assignment only")
    assert all(set(v) <= {"wc-1-100"} for v in seen.values)


# --- watches ---------------------------------------------------------------------------

def test_watch_assignments_fires_on_set_and_data_changes(state: ClusterState,
                                                         make_state: Callable[..., ClusterState]) -> None:
    nimbus = make_state()
    seen = Recorder()
    state.watch_assignments(seen)
    seen.wait_for(lambda v: v == {}, "initial empty assignments")
    nimbus.set_assignment(assignment("t1", version=1))
    seen.wait_for(lambda v: set(v) == {"t1"}, "t1 assigned")
    nimbus.set_assignment(assignment("t1", version=2))
    seen.wait_for(lambda v: v["t1"].version == 2, "t1 data change")
    nimbus.set_assignment(assignment("t2"))
    seen.wait_for(lambda v: set(v) == {"t1", "t2"}, "t2 added")
    nimbus.remove_assignment("t1")
    seen.wait_for(lambda v: set(v) == {"t2"}, "t1 removed")
    # Never a partial view: every delivered assignment is complete, and no value twice in a row.
    assert all(isinstance(a, Assignment) for v in seen.values for a in v.values())
    assert all(a != b for a, b in zip(seen.values, seen.values[1:]))


def test_watch_topology_and_cancel(state: ClusterState) -> None:
    seen = Recorder()
    handle = state.watch_topology("wc-1-100", seen)
    seen.wait_for(lambda v: v is None, "initially absent")
    state.set_topology(topo())
    seen.wait_for(lambda v: v is not None and v.status == "active", "created")
    state.set_topology_status("wc-1-100", "inactive")
    seen.wait_for(lambda v: v is not None and v.status == "inactive", "deactivated")
    state.remove_topology("wc-1-100")
    seen.wait_for(lambda v: v is None, "removed")
    handle.cancel()
    count = len(seen.values)
    state.set_topology(topo())
    probe = Recorder()
    state.watch_topology("wc-1-100", probe)  # proves the write is visible to a fresh watch
    probe.wait_for(lambda v: v is not None, "new watch sees it")
    assert len(seen.values) == count


def test_watch_assignment_of_one_topology(state: ClusterState) -> None:
    seen = Recorder()
    state.watch_assignment("t1", seen)
    seen.wait_for(lambda v: v is None, "absent")
    state.set_assignment(assignment("t2"))
    state.set_assignment(assignment("t1", version=4))
    seen.wait_for(lambda v: v is not None and v.version == 4, "assigned")


def test_watch_supervisors(state: ClusterState, make_state: Callable[..., ClusterState]) -> None:
    other = make_state()
    sups = Recorder()
    state.watch_supervisors(sups)
    sups.wait_for(lambda v: v == {}, "no supervisors")
    other.register_supervisor(supervisor())
    sups.wait_for(lambda v: set(v) == {"5f0e-sup"}, "supervisor registered")
    other.register_supervisor(supervisor(used=[6701]))
    sups.wait_for(lambda v: v["5f0e-sup"].used_ports == [6701], "supervisor refreshed")
    other.close()
    sups.wait_for(lambda v: v == {}, "supervisor gone with its session")


def test_a_raising_callback_does_not_stop_the_watch(state: ClusterState) -> None:
    seen = Recorder()

    def flaky(value: dict[str, Assignment]) -> None:
        seen(value)
        raise RuntimeError("callback bug")

    state.watch_assignments(flaky)
    state.set_assignment(assignment("t1"))
    seen.wait_for(lambda v: set(v) == {"t1"}, "first change")
    state.set_assignment(assignment("t2"))
    seen.wait_for(lambda v: set(v) == {"t1", "t2"}, "second change")


# --- connection loss and session expiry ------------------------------------------------

def test_supervisor_node_comes_back_after_session_expiry(state: ClusterState, zk_client: KazooClient) -> None:
    state.register_supervisor(supervisor())
    old_session = state.client.client_id[0]
    expire_session(state.client)
    new_session = state.client.client_id[0]
    assert new_session != old_session

    def owned_by_new_session(path: str) -> bool:
        stat = zk_client.exists(path)
        return stat is not None and stat.ephemeralOwner == new_session

    wait_for(lambda: owned_by_new_session(f"{state.root}/supervisors/5f0e-sup"), what="supervisor node back")
    assert state.supervisors() == {"5f0e-sup": supervisor()}


def test_watches_fire_after_session_expiry(state: ClusterState, make_state: Callable[..., ClusterState]) -> None:
    nimbus = make_state()
    assignments, topology = Recorder(), Recorder()
    state.watch_assignments(assignments)
    state.watch_topology("t1", topology)
    assignments.wait_for(lambda v: v == {}, "initial")
    expire_session(state.client)
    # A change made while the session was gone is seen, and so are later ones.
    nimbus.set_assignment(assignment("t1", version=1))
    assignments.wait_for(lambda v: set(v) == {"t1"}, "assignment after expiry")
    nimbus.set_assignment(assignment("t1", version=2))
    assignments.wait_for(lambda v: v["t1"].version == 2, "data change after expiry")
    nimbus.set_topology(topo("t1"))
    topology.wait_for(lambda v: v is not None, "topology after expiry")
    expire_session(state.client)
    nimbus.remove_assignment("t1")
    assignments.wait_for(lambda v: v == {}, "removal after a second expiry")


def test_watches_and_ephemerals_survive_a_dropped_connection(
        state: ClusterState, make_state: Callable[..., ClusterState], zk_client: KazooClient) -> None:
    nimbus = make_state()
    state.register_supervisor(supervisor())
    seen = Recorder()
    state.watch_assignments(seen)
    session = state.client.client_id[0]
    drop_connection(state.client)
    assert state.client.client_id[0] == session
    nimbus.set_assignment(assignment("t1"))
    seen.wait_for(lambda v: set(v) == {"t1"}, "assignment after reconnect")
    assert zk_client.exists(f"{state.root}/supervisors/5f0e-sup").ephemeralOwner == session


# --- nimbus election -------------------------------------------------------------------

def test_one_nimbus_leads_and_the_other_takes_over(make_state: Callable[..., ClusterState]) -> None:
    a, b, reader = make_state(), make_state(), make_state()
    gained: list[str] = []
    ended = {"nimbus-a": threading.Event(), "nimbus-b": threading.Event()}

    def leader(name: str) -> Callable[[threading.Event], None]:
        def on_leadership(lost: threading.Event) -> None:
            gained.append(name)
            lost.wait()  # lead until leadership ends
            ended[name].set()
        return on_leadership

    ea = a.elect_nimbus("nimbus-a", leader("nimbus-a"))
    wait_for(lambda: ea.is_leader, what="first contender leads")
    eb = b.elect_nimbus("nimbus-b", leader("nimbus-b"))
    wait_for(lambda: len(reader.nimbus_contenders()) == 2, what="two contenders")
    assert reader.nimbus_contenders() == ["nimbus-a", "nimbus-b"]
    assert reader.nimbus_leader() == "nimbus-a"
    assert ea.is_leader and not eb.is_leader and gained == ["nimbus-a"]

    a.close()
    assert ended["nimbus-a"].is_set()
    wait_for(lambda: eb.is_leader, what="second contender takes over")
    assert reader.nimbus_leader() == "nimbus-b"
    assert gained == ["nimbus-a", "nimbus-b"]


def test_leadership_is_lost_with_the_session(make_state: Callable[..., ClusterState]) -> None:
    a, b = make_state(), make_state()
    lost_events: list[threading.Event] = []
    ea = a.elect_nimbus("nimbus-a", lost_events.append)  # returns at once; leadership is kept
    wait_for(lambda: ea.is_leader, what="a leads")
    eb = b.elect_nimbus("nimbus-b", lambda lost: None)
    wait_for(lambda: len(b.nimbus_contenders()) == 2, what="b queued")
    assert ea.is_leader, "leadership must outlive a callback that returns"

    expire_session(a.client)
    assert lost_events[0].is_set()
    wait_for(lambda: eb.is_leader, what="b takes over after a's session expired")
    assert not ea.is_leader
    # a queues again behind b in its new session.
    wait_for(lambda: b.nimbus_contenders() == ["nimbus-b", "nimbus-a"], what="a queued again")
    eb.cancel()
    wait_for(lambda: ea.is_leader, what="a leads again after b steps down")
    assert a.nimbus_leader() == "nimbus-a"


def test_no_leader_without_contenders(state: ClusterState) -> None:
    assert state.nimbus_leader() is None
    assert state.nimbus_contenders() == []


# --- teardown --------------------------------------------------------------------------

def test_teardown_removes_everything_of_one_topology(state: ClusterState, zk_client: KazooClient) -> None:
    for tid in ("doomed-1-1", "kept-2-2"):
        state.set_topology(topo(tid))
        state.set_assignment(assignment(tid))
        state.worker_beat(WorkerBeat(tid, "5f0e-sup", 6700, 1.0, [(1, 2)], 1.0))
        state.report_error(tid, ErrorInfo(1.0, "count", 3, "h", 6700, "boom"))

    state.teardown_topology("doomed-1-1")

    root = state.root
    for part in ("topologies", "assignments", "workerbeats", "errors"):
        assert zk_client.exists(f"{root}/{part}/doomed-1-1") is None, part
        assert zk_client.exists(f"{root}/{part}/kept-2-2") is not None, part
    assert state.topology_ids() == ["kept-2-2"]
    state.teardown_topology("doomed-1-1")  # idempotent


# --- each supervisor's parts of the assignments --------------------------------------------------

def part_ports(state: ClusterState, node: str) -> dict[str, dict[int, list[tuple[int, int]]]]:
    return {t: p.ports for t, p in state.node_assignments(node).items() if p is not None}


def test_each_supervisor_gets_its_part_and_only_changed_parts_are_written(state: ClusterState,
                                                                         zk_client: KazooClient) -> None:
    state.set_assignment(assignment())
    assert part_ports(state, "sup-a") == {"wc-1-100": {6700: [(1, 2), (4, 6)]}}
    assert part_ports(state, "sup-b") == {"wc-1-100": {6701: [(3, 3)]}}
    assert state.layout_current()
    b_path = f"{state.root}/node-assignments/sup-b/wc-1-100"
    b_version = zk_client.exists(b_path).version
    moved = assignment(version=2)
    moved.executors[(1, 2)] = ("sup-c", 6700)  # one executor moves from a to c: b is untouched
    state.set_assignment(moved, assignment())
    assert part_ports(state, "sup-a") == {"wc-1-100": {6700: [(4, 6)]}}
    assert part_ports(state, "sup-c") == {"wc-1-100": {6700: [(1, 2)]}}
    assert zk_client.exists(b_path).version == b_version
    gone = Assignment("wc-1-100", {(1, 2): ("sup-c", 6700)}, {}, {}, "sha256:ab", 3)
    state.set_assignment(gone)  # the previous one read from ZooKeeper
    assert part_ports(state, "sup-a") == {} and part_ports(state, "sup-b") == {}
    state.remove_assignment("wc-1-100")
    assert part_ports(state, "sup-c") == {} and state.assignment("wc-1-100") is None


def test_a_supervisor_watching_its_parts_sees_malformed_ones_as_such(state: ClusterState,
                                                                    zk_client: KazooClient) -> None:
    seen = Recorder()
    state.watch_node_assignments("sup-a", seen)
    seen.wait_for(lambda v: v == {}, "no parts yet")
    state.set_assignment(assignment())
    seen.wait_for(lambda v: set(v) == {"wc-1-100"} and v["wc-1-100"] is not None, "its part")
    zk_client.set(f"{state.root}/node-assignments/sup-a/wc-1-100", b"{damaged")
    seen.wait_for(lambda v: v == {"wc-1-100": None}, "the part, unreadable, still there")


def test_a_malformed_assignment_is_rebuilt_from_the_parts(state: ClusterState, zk_client: KazooClient) -> None:
    state.set_assignment(assignment())
    zk_client.set(f"{state.root}/assignments/wc-1-100", b"not json")
    rebuilt = state.assignment_from_parts("wc-1-100")
    assert rebuilt is not None and rebuilt.executors == assignment().executors
    assert rebuilt.code_digest == "sha256:ab" and rebuilt.version == 0
    # Written over it later, the old parts are found by looking under every node.
    state.set_assignment(Assignment("wc-1-100", {(3, 3): ("sup-b", 6701)}, {}, {}, "sha256:ab", 1))
    assert part_ports(state, "sup-a") == {} and part_ports(state, "sup-b") == {"wc-1-100": {6701: [(3, 3)]}}
    assert state.assignment_from_parts("no-such") is None


def test_a_cluster_of_the_previous_layout_is_brought_to_this_one(state: ClusterState,
                                                                 zk_client: KazooClient) -> None:
    # What an earlier nimbus left: whole assignments, no parts, no layout mark.
    zk_client.create(f"{state.root}/assignments/wc-1-100", b'{"v":1,' + json.dumps(assignment().to_dict())[1:].encode())
    assert not state.layout_current() and part_ports(state, "sup-a") == {}
    zk_client.create(f"{state.root}/node-assignments/sup-z/gone-1-1", b'{"v":1,"topology_id":"gone-1-1",'
                     b'"code_digest":"d","ports":[[1,[[1,1,1]]]]}', makepath=True)  # a stale part
    fresh = ClusterState(state.conf).start()  # a new leader: no layout mark written by this client yet
    try:
        writes = fresh.reconcile_node_parts(fresh.assignments())
    finally:
        fresh.close()
    assert writes == 3  # two parts written, the stale one deleted
    assert state.layout_current()
    assert part_ports(state, "sup-a") == {"wc-1-100": {6700: [(1, 2), (4, 6)]}}
    assert zk_client.exists(f"{state.root}/node-assignments/sup-z") is None  # emptied node removed


def test_cached_reads_follow_every_change(state: ClusterState) -> None:
    state.set_assignment(assignment())
    first = state.assignments()
    assert state.assignments()["wc-1-100"] is first["wc-1-100"]  # unchanged: not decoded again
    state.set_assignment(assignment(version=2), assignment())
    assert state.assignments()["wc-1-100"].version == 2
    state.remove_assignment("wc-1-100")
    assert state.assignments() == {}


def _packets_received(zk_server: Any, port: int) -> int:
    """Requests the server took on the connection from local ``port`` (its ``stat`` list)."""
    match = re.search(rf":{port}\[\d+\]\([^)]*recved=(\d+)", zk_server.four_letter("stat"))
    assert match, f"no connection from port {port} in the server's stat"
    return int(match.group(1))


def test_unchanged_reads_ask_zookeeper_nothing(make_state: Callable[..., ClusterState], zk_server: Any) -> None:
    """Nimbus reads every topology and assignment each round: while none changes, the reads
    are served from what the watches keep, with no request to ZooKeeper per node."""
    mine = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port == zk_server.port}
    state = make_state()
    port, = {c.laddr.port for c in psutil.Process().net_connections("tcp")
             if c.raddr and c.raddr.port == zk_server.port} - mine
    for i in range(20):
        state.set_topology(topo(f"t{i}-1-1"))
        state.set_assignment(assignment(f"t{i}-1-1"))
    first = state.assignments(), state.topology_entries(), state.assignment_ids()
    before = _packets_received(zk_server, port)
    for _ in range(20):
        assert (state.assignments(), state.topology_entries(), state.assignment_ids()) == first
    assert _packets_received(zk_server, port) - before < 10  # a ping or two; polling took 20 x 40


def test_cached_reads_see_other_clients_changes(state: ClusterState, zk_client: KazooClient) -> None:
    """Changes made by another client (another nimbus, an operator) reach the cached reads
    through their watches, after a session expiry too."""
    state.set_topology(topo())
    state.set_assignment(assignment())
    assert state.assignments()["wc-1-100"].version == 1
    path = f"{state.root}/assignments/wc-1-100"
    zk_client.set(path, encode(path, assignment(version=2).to_dict()))
    wait_for(lambda: state.assignments()["wc-1-100"].version == 2, WAIT, "a change by another client")
    other = f"{state.root}/assignments/other-2-2"
    zk_client.create(other, encode(other, assignment("other-2-2").to_dict()))
    wait_for(lambda: "other-2-2" in state.assignments(), WAIT, "a node created by another client")
    zk_client.delete(other)
    wait_for(lambda: "other-2-2" not in state.assignments(), WAIT, "a node deleted by another client")
    assert state.assignment_ids() == ["wc-1-100"]
    expire_session(state.client)
    zk_client.set(path, encode(path, assignment(version=3).to_dict()))
    wait_for(lambda: state.assignments()["wc-1-100"].version == 3, WAIT, "a change after a session expiry")
    tpath = f"{state.root}/topologies/wc-1-100"
    zk_client.set(tpath, encode(tpath, topo(status="inactive").to_dict()))
    wait_for(lambda: state.topology_entries()["wc-1-100"].status == "inactive", WAIT, "a topology's new status")
