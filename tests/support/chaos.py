"""The chaos harness: a real cluster carrying a durable stream of ids while faults hit it.

``ChaosCluster`` starts its own ZooKeeper (so it can pause, stop and restart it), a nimbus and
two supervisors (``ProcessCluster``), and submits ``chaos_topology/ids.py``: a spout whose
acked ids survive its worker in a SQLite ledger, a relay bolt and a store bolt writing every
id it receives to files. The fault methods do what an unlucky day does (SIGKILL a worker,
send hostile frames to every slot port, SIGKILL a supervisor with its workers, restart it,
pause or stop ZooKeeper); the observation methods count acked and stored ids, duplicates,
worker launches and live worker processes. The chaos test and the recovery benchmark
(``bench/recovery.py``) are both built from these pieces.
"""
from __future__ import annotations

import collections
import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import yaml

from squall.daemons import local_state
from squall.daemons.nimbus.client import NimbusError
from squall.daemons.state import Assignment, ClusterState
from squall.testing.cluster import ProcessCluster, signal_pid
from squall.testing.zookeeper import ZooKeeperServer
from support.paths import CHAOS_TOPOLOGY

TOPOLOGY = CHAOS_TOPOLOGY / "ids.py"
NAME = "chaos"

# Short periods so faults are noticed in seconds (the ProcessCluster FAST set, plus these).
CHAOS_CONF = {
    "nimbus.task.launch.secs": 15,
    "supervisor.restart.grace.secs": 30,
}


@dataclass(frozen=True)
class WorkerInfo:
    """A live worker process as its supervisor's local state shows it."""

    supervisor: int
    worker_id: str
    port: int
    pid: int
    executors: frozenset[tuple[int, int]]


@dataclass
class Tally:
    """What reached the store and the ledger."""

    acked: int
    stored: int  # distinct ids stored
    lines: int  # store lines (a duplicate is a line beyond the first for an id)
    missing: int  # ids not stored

    @property
    def duplicates(self) -> int:
        return self.lines - self.stored


class ChaosCluster:
    """ZooKeeper + nimbus + two supervisors + the chaos topology, under ``base``."""

    def __init__(self, base: Path, ids: int, rate: float, supervisors: int = 2, slots: int = 3,
                 conf: dict[str, Any] | None = None, host: str = "127.0.0.1",
                 supervisor_hosts: list[tuple[str, list[str]]] | None = None, python: str | None = None) -> None:
        """``host``: where ZooKeeper and nimbus listen; ``supervisor_hosts``: per supervisor,
        its host and the prefix that starts it there; ``python``: the daemons' interpreter
        (``ProcessCluster``)."""
        self.base = Path(base)
        self.ids, self.rate = ids, rate
        self.data = self.base / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.host, self.supervisor_hosts, self.python = host, supervisor_hosts, python
        self.zk = ZooKeeperServer(host=host, tick_time=500, min_session_timeout=1000, work_dir=self.base / "zk")
        self._zk_port: int | None = None  # kept by zookeeper_down for zookeeper_up
        self.n_supervisors, self.slots = supervisors, slots
        self.conf = {**CHAOS_CONF, **(conf or {})}
        self.cluster: ProcessCluster | None = None
        self._store_cache: dict[Path, tuple[int, list[str]]] = {}
        self._counts: collections.Counter[int] = collections.Counter()

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> ChaosCluster:
        self.zk.start(timeout=60)
        conf = {"zookeeper.servers": [self.host], "nimbus.host": self.host, **self.conf}
        self.cluster = ProcessCluster(self.zk.port, "/squall", self.base / "cluster", supervisors=self.n_supervisors,
                                      slots=self.slots, conf=conf, supervisor_hosts=self.supervisor_hosts,
                                      python=self.python)
        self.cluster.start()
        return self

    def submit(self, workers: int = 3) -> None:
        res = self.c.cli("submit", str(TOPOLOGY), "--name", NAME, "-c", f"topology.workers={workers}",
                         "-c", f"chaos.dir={self.data}", "-c", f"chaos.ids={self.ids}",
                         "-c", f"chaos.rate={self.rate}")
        if res.returncode != 0:
            raise AssertionError(f"submit failed: {res.stdout}{res.stderr}")

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.zk.pid is not None:
            signal_pid(self.zk.pid, signal.SIGCONT)  # a paused server must be able to stop
        self.zk.stop()

    def __enter__(self) -> ChaosCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def c(self) -> ProcessCluster:
        assert self.cluster is not None, "start() first"
        return self.cluster

    # -- observations -------------------------------------------------------------------
    def assignment(self) -> Assignment:
        """The chaos topology's assignment, read with the daemons' credential."""
        with ClusterState(self.c.common) as state:
            (assignment,) = state.assignments().values()
            return assignment

    def acked(self) -> int:
        path = self.data / "ledger.sqlite"
        if not path.exists():
            return 0
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
            try:
                return int(db.execute("SELECT COUNT(*) FROM acked").fetchone()[0])
            finally:
                db.close()
        except sqlite3.Error:
            return 0

    def tally(self) -> Tally:
        """Counts from the store files (read incrementally; a line cut by a SIGKILL is skipped)."""
        for path in sorted(self.data.glob("store-*.txt")):
            offset, _ = self._store_cache.get(path, (0, []))
            with open(path, "rb") as fh:
                fh.seek(offset)
                chunk = fh.read()
            end = chunk.rfind(b"\n") + 1
            for line in chunk[:end].decode("utf-8", "replace").splitlines():
                parts = line.split()
                if len(parts) != 4:
                    continue
                try:
                    i = int(parts[0])
                except ValueError:
                    continue
                self._counts[i] += 1
            self._store_cache[path] = (offset + end, [])
        wanted = range(self.ids)
        stored = sum(1 for i in wanted if self._counts.get(i))
        return Tally(acked=self.acked(), stored=stored, lines=sum(self._counts.values()),
                     missing=self.ids - stored)

    def workers(self) -> list[WorkerInfo]:
        out = []
        for i in range(self.n_supervisors):
            layout = local_state.LocalLayout(self.c.supervisor_dir(i))
            for worker_id, pid in self.c.worker_pids(i).items():
                try:
                    beat = local_state.read_heartbeat(layout, worker_id)
                except (ValueError, OSError):
                    beat = None
                if beat is not None:
                    out.append(WorkerInfo(i, worker_id, beat.port, pid, beat.executors or frozenset()))
        return sorted(out, key=lambda w: (w.supervisor, w.port))

    def launches(self) -> int:
        """Workers launched by every supervisor so far (from their JSON logs)."""
        count = 0
        for path in self.c.base.glob("supervisor-*.log"):
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                if '"worker launched"' in line:
                    count += 1
        return count

    def slot_ports(self) -> list[int]:
        ports: list[int] = []
        for i in range(self.n_supervisors):
            conf = yaml.safe_load((self.c.base / f"supervisor-{i}.yaml").read_text())
            ports.extend(conf["supervisor.slots.ports"])
        return ports

    def wait_until(self, condition: Callable[[], bool], timeout: float, what: str) -> float:
        """Seconds it took; AssertionError naming ``what`` past ``timeout``."""
        start = time.monotonic()
        while not _holds(condition):
            if time.monotonic() - start > timeout:
                t = self.tally()
                raise AssertionError(f"timed out after {timeout}s waiting for {what} "
                                     f"(acked {t.acked}, stored {t.stored}/{self.ids}); logs in {self.base}")
            time.sleep(0.2)
        return time.monotonic() - start

    def wait_progress(self, more: int, timeout: float, what: str) -> float:
        target = min(self.ids, self.acked() + more)
        return self.wait_until(lambda: self.acked() >= target, timeout, what)

    # -- faults -------------------------------------------------------------------------
    def kill_worker(self, worker: WorkerInfo) -> None:
        signal_pid(worker.pid, signal.SIGKILL)

    def kill_supervisor(self, i: int) -> None:
        self.c.kill_supervisor(i, with_workers=True)

    def restart_supervisor(self, i: int) -> None:
        self.c.start_supervisor(i)

    def stop_zookeeper(self, secs: float) -> list[tuple[float, int]]:
        """Stop ZooKeeper for ``secs`` and start it again on the same port and data dir;
        the acked count sampled meanwhile (see ``sample_acked``)."""
        self.zookeeper_down()
        try:
            return self.sample_acked(secs)
        finally:
            self.zookeeper_up()

    def zookeeper_down(self) -> None:
        """Stop ZooKeeper, keeping its data and port for ``zookeeper_up``."""
        self._zk_port = self.zk.port
        self.zk.keep_data = True
        self.zk.stop()

    def zookeeper_up(self) -> None:
        """Start ZooKeeper again on the port and data it had before ``zookeeper_down``."""
        self.zk._requested_port = self._zk_port  # the address clients know
        self.zk.start(timeout=60)

    def pause_zookeeper(self, secs: float) -> list[tuple[float, int]]:
        """SIGSTOP ZooKeeper for ``secs``, then SIGCONT; the acked count sampled meanwhile."""
        assert self.zk.pid is not None
        signal_pid(self.zk.pid, signal.SIGSTOP)
        try:
            return self.sample_acked(secs)
        finally:
            signal_pid(self.zk.pid, signal.SIGCONT)

    def sample_acked(self, secs: float, every: float = 0.5) -> list[tuple[float, int]]:
        """(monotonic time, acked ids) every ``every`` seconds for ``secs``."""
        samples = []
        end = time.monotonic() + secs
        while True:
            samples.append((time.monotonic(), self.acked()))
            if samples[-1][0] >= end:
                return samples
            time.sleep(min(every, max(0.0, end - time.monotonic())))

    def first_seen_after(self, tasks: set[int], after: float) -> float | None:
        """The wall time by which every task in ``tasks`` (relay or store tasks) took part in
        storing an id after ``after``; None while one has not."""
        self.tally()
        firsts = [self._task_first_after(task, after) for task in tasks]
        return None if any(f is None for f in firsts) else max(firsts)  # type: ignore[type-var]

    def _task_first_after(self, task: int, after: float) -> float | None:
        best = None
        for path in self.data.glob("store-*.txt"):
            with open(path, "rb") as fh:
                for raw in fh:
                    parts = raw.split()
                    if len(parts) != 4:
                        continue
                    try:
                        relay, store, at = int(parts[1]), int(parts[2]), float(parts[3])
                    except ValueError:
                        continue
                    if at > after and task in (relay, store) and (best is None or at < best):
                        best = at
                        break  # lines of one file are in time order
        return best

    def send_hostile_frames(self, per_port: int = 60, seed: int = 7) -> dict[str, int]:
        """Frames of every hostile kind to every slot port; returns frames sent by kind."""
        import zmq

        rng = random.Random(seed)
        ctx = zmq.Context.instance()
        sent: collections.Counter[str] = collections.Counter()
        for port in self.slot_ports():
            sock = ctx.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 2000)
            sock.setsockopt(zmq.SNDHWM, 10_000)
            sock.connect(f"tcp://127.0.0.1:{port}")
            for n in range(per_port):
                kind, frame = hostile_frame(rng, n)
                try:
                    sock.send(frame, flags=zmq.NOBLOCK)
                    sent[kind] += 1
                except zmq.Again:
                    pass
            sock.close()
        return dict(sent)


def hostile_frame(rng: random.Random, n: int) -> tuple[str, bytes]:
    """One hostile frame; the kind cycles with ``n``."""
    kinds = ("random-bytes", "truncated", "oversized", "bad-msgpack", "wrong-shape", "garbage-payload",
             "foreign-version", "huge-ints", "deep-nesting")
    kind = kinds[n % len(kinds)]
    task = rng.randint(-5, 12)
    if kind == "random-bytes":
        frame = rng.randbytes(rng.randint(0, 512))
    elif kind == "truncated":
        whole = bytes((1, 0)) + msgpack.packb([[task, rng.randbytes(64)]] * 10, use_bin_type=True)
        frame = whole[:rng.randint(2, len(whole) - 1)]
    elif kind == "oversized":
        frame = bytes((1, 0)) + msgpack.packb([[task, b"x" * (4 << 20)]], use_bin_type=True)
    elif kind == "bad-msgpack":
        frame = bytes((1, rng.choice((0, 1, 2)))) + bytes([0xc1]) * 16
    elif kind == "wrong-shape":
        frame = bytes((1, rng.choice((0, 1, 2)))) + msgpack.packb(
            rng.choice([{"a": 1}, [1, 2, 3], [[task]], "text", [[task, "str"]], {task: [1]}]), use_bin_type=True)
    elif kind == "garbage-payload":
        frame = bytes((1, 0)) + msgpack.packb([[task, rng.randbytes(rng.randint(0, 200))]], use_bin_type=True)
    elif kind == "foreign-version":
        frame = bytes((rng.choice((0, 2, 255)), 0)) + msgpack.packb([[task, b""]], use_bin_type=True)
    elif kind == "huge-ints":
        frame = bytes((1, rng.choice((0, 1, 2)))) + msgpack.packb(
            rng.choice([[[2**63 - 1, b""]], {2**63 - 1: 2**64 - 1}, {-(2**63): True}]), use_bin_type=True)
    else:  # 5000 nested one-element arrays (msgpack's packer refuses to build that)
        frame = bytes((1, 0)) + bytes([0x91]) * 5000 + bytes([0x90])
    return kind, frame


def longest_stall(samples: list[tuple[float, int]], total: int) -> float:
    """The longest stretch of ``samples`` (time, acked) in which acks did not grow while
    ids were still outstanding."""
    longest, since = 0.0, None
    for (t, n), (t_prev, prev) in zip(samples[1:], samples):
        if n > prev or prev >= total:
            since = None
            continue
        since = t_prev if since is None else since
        longest = max(longest, t - since)
    return longest


def chaos_line(ids: int, tally: Tally, restarts: int, seconds: float) -> str:
    return (f"chaos: ids={ids} lost={tally.missing} duplicates={tally.duplicates} "
            f"worker_restarts={restarts} seconds={seconds:.0f}")


def machine_state() -> dict[str, Any]:
    load = os.getloadavg()
    return {"nproc": os.cpu_count(), "load_1m": round(load[0], 2), "load_5m": round(load[1], 2)}


def _holds(condition: Callable[[], bool]) -> bool:
    try:
        return bool(condition())
    except (NimbusError, OSError):  # nimbus busy or restarting: ask again
        return False

