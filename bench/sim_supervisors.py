"""Simulated supervisors for bench/scale_sim.py: many supervisors in one process, each doing
what a real one does towards ZooKeeper and nimbus, without running any worker.

A simulated supervisor registers its ephemeral node, watches its own parts of the
assignments (``ClusterState.watch_node_assignments``) and, every report interval, posts one
report to nimbus with a beat and realistic executor stats for every slot its parts name (the
workers it would run). Supervisors share a few ZooKeeper sessions (a session per supervisor
would cost the simulator a thread pair each); the ones meant to die get a session of their
own through a ``TcpRelay``, so that a death is the real thing: reports stop, and the
session is cut and expires on the server.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.reports import ReportedBeat, build_report
from squall.daemons.state import ClusterState, NodeAssignment, SupervisorInfo, WorkerBeat
from squall.daemons.supervisor.reporter import NimbusLink, ReportRefused
from squall.runtime.stats import WorkerStats
from squall.testing.zookeeper import TcpRelay


def executor_stats(ex: tuple[int, int], age: float) -> dict[str, Any]:
    """One executor's stats entry of the size and shape a worker writes."""
    n = int(age * 250)
    return {"executor": list(ex), "component": "work", "kind": "bolt", "emitted": {"default": n},
            "executed": n, "acked": n, "failed": 0, "busy_secs": round(age * 0.01, 6), "capacity": 0.01,
            "complete_latency_ms": {"p50": 1.25, "p99": 4.5}, "dropped": {}, "metrics": {}}


class SimSupervisor:
    """One simulated supervisor: its node, its parts as it last saw them, its report."""

    def __init__(self, sid: str, ports: list[int], state: ClusterState) -> None:
        self.sid, self.ports, self.state = sid, ports, state
        self.parts: dict[str, NodeAssignment | None] = {}
        self.launched: dict[tuple[str, int], float] = {}  # (topology, port) -> when its part was seen
        self.alive = True
        self.died_at: float | None = None
        self._lock = threading.Lock()

    def register(self) -> None:
        now = time.time()
        self.state.register_supervisor(SupervisorInfo(self.sid, f"host-{self.sid}", self.ports, now, [], now))
        self.state.watch_node_assignments(self.sid, self.on_parts)

    def on_parts(self, parts: dict[str, NodeAssignment | None]) -> None:
        now = time.time()
        with self._lock:
            self.parts = parts
            current = {(t, p) for t, part in parts.items() if part for p in part.ports}
            self.launched = {k: self.launched.get(k, now) for k in current}

    def slots(self) -> int:
        with self._lock:
            return len(self.launched)

    def report(self, now: float) -> bytes:
        beats = []
        with self._lock:
            for topology_id, part in self.parts.items():
                for port, executors in (part.ports.items() if part else ()):
                    age = now - self.launched.get((topology_id, port), now)
                    stats = {"executors": [executor_stats(ex, age) for ex in executors], "time": now,
                             "transport": {"bad_frames": 0, "refused_connections": 0}}
                    # As a real supervisor builds it: counters pulled out, stats as text.
                    beats.append(ReportedBeat.of(WorkerBeat(topology_id, self.sid, port, now, list(executors), age,
                                                            WorkerStats.from_dict(stats))))
        return build_report(self.sid, now, beats).to_json()


class Reporters:
    """Threads that post every live supervisor's report once per ``interval`` to nimbus, over
    kept-alive TLS connections (one per thread), spread evenly over the interval."""

    def __init__(self, sups: list[SimSupervisor], address: str, access: ApiAccess, interval: float,
                 threads: int = 8) -> None:
        self.sups, self.address, self.access, self.interval = sups, address, access, interval
        self.counts: Counter[str] = Counter()
        self.bytes = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(sups[i::threads],), daemon=True,
                                          name=f"reporter-{i}") for i in range(threads)]

    def start(self) -> Reporters:
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(10)

    def _run(self, mine: list[SimSupervisor]) -> None:
        link = NimbusLink(self.access, timeout=30.0)
        gap = self.interval / max(1, len(mine))
        next_at = time.monotonic()
        while not self._stop.is_set():
            for sup in mine:
                next_at += gap
                delay = next_at - time.monotonic()
                if delay > 0 and self._stop.wait(delay):
                    return
                if not sup.alive:
                    continue
                body = sup.report(time.time())
                try:
                    link.post(self.address, f"/supervisors/{sup.sid}/report", body)
                    result = "sent"
                except ReportRefused as exc:
                    result = f"refused:{exc.status}"
                except OSError:
                    result = "failed"
                with self._lock:
                    self.counts[result] += 1
                    self.bytes += len(body)
        link.close()


class SimCluster:
    """``n`` simulated supervisors with ``slots`` ports each; the last ``victims`` of them on
    sessions of their own (through relays) so that they can die for real."""

    def __init__(self, conf: Mapping[str, Any], zk_host: str, zk_port: int, n: int, slots: int,
                 victims: int, per_session: int = 50, victim_session_ms: int = 120_000) -> None:
        self.conf = dict(conf)
        self.states: list[ClusterState] = []
        self.relays: list[TcpRelay] = []
        self.sups: list[SimSupervisor] = []
        shared = n - victims
        for i in range(0, shared, per_session):
            state = ClusterState(self.conf).start()
            self.states.append(state)
            for k in range(i, min(i + per_session, shared)):
                self.sups.append(SimSupervisor(f"sim-{k:04d}", list(range(7000, 7000 + slots)), state))
        for k in range(shared, n):
            relay = TcpRelay((zk_host, zk_port))
            state = ClusterState({**self.conf, "zookeeper.port": relay.port,
                                  "zookeeper.session.timeout.ms": victim_session_ms}).start()
            self.relays.append(relay)
            self.states.append(state)
            self.sups.append(SimSupervisor(f"sim-{k:04d}", list(range(7000, 7000 + slots)), state))

    @property
    def victims(self) -> list[SimSupervisor]:
        return self.sups[len(self.sups) - len(self.relays):]

    def register(self) -> None:
        for sup in self.sups:
            sup.register()

    def kill(self, sup: SimSupervisor) -> None:
        """A host dying: its reports stop and its ZooKeeper connection is cut (the session
        expires on the server after its timeout)."""
        index = self.victims.index(sup)
        sup.alive = False
        sup.died_at = time.monotonic()
        self.relays[index].cut()

    def close(self) -> None:
        for state in self.states:
            state.close(timeout=2.0)
        for relay in self.relays:
            relay.close()
