"""Progress of a running backfill: tasks tell the driver how far they are.

Spark reports a task's counters only when it ends, and a stage may be a couple of long
tasks. So each task sends a small UDP datagram about once a second to a listener on the
driver: its run token, stage, partition, attempt, and cumulative counts (input rows
read, tuples executed). Datagrams are fire and forget (a lost one is replaced by the
next); anything without the run's token, too big, or not of the expected shape is
counted and dropped. When a stage ends, its exact counts from Spark's accumulators
replace what the datagrams said.

``Progress`` is what the driver knows at a moment; ``terminal_line`` and ``log_fields``
render it for a terminal and for JSON logs.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_DATAGRAM = 512


@dataclass
class Progress:
    stages_done: int
    stages: int
    components_done: int
    components: int
    rows: int            # input rows read (spout tuples)
    executed: int        # tuples executed by bolts
    seconds: float
    rows_per_sec: float  # over the last interval
    tuples_per_sec: float
    finished: bool = False


def terminal_line(p: Progress) -> str:
    state = "done" if p.finished else "running"
    return (f"backfill {state}: components {p.components_done}/{p.components} done, "
            f"{p.rows:,} rows read, {p.executed:,} tuples executed, "
            f"{p.rows_per_sec:,.0f} rows/s, {p.tuples_per_sec:,.0f} tuples/s, {p.seconds:.1f}s")


def log_fields(p: Progress) -> dict[str, Any]:
    return {"stages_done": p.stages_done, "stages": p.stages, "components_done": p.components_done,
            "components": p.components, "rows": p.rows, "executed": p.executed,
            "rows_per_sec": round(p.rows_per_sec), "tuples_per_sec": round(p.tuples_per_sec),
            "seconds": round(p.seconds, 1), "finished": p.finished}


class Address:
    """Where tasks send progress (shipped to workers with the plan)."""

    def __init__(self, host: str, port: int, token: str, interval: float) -> None:
        self.host, self.port, self.token, self.interval = host, port, token, interval


class Sender:
    """A task's side: ``update`` with cumulative counts; sends at most once an interval."""

    def __init__(self, address: Address | None, stage: int, partition: int, attempt: int) -> None:
        self.address = address
        self.head = {"k": address.token if address else "", "s": stage, "p": partition, "a": attempt}
        self.last = 0.0
        self.sock: socket.socket | None = None

    def update(self, rows: int, executed: int, force: bool = False) -> None:
        a = self.address
        if a is None:
            return
        now = time.monotonic()
        if not force and now - self.last < a.interval:
            return
        self.last = now
        try:
            if self.sock is None:
                family = socket.AF_INET6 if ":" in a.host else socket.AF_INET
                self.sock = socket.socket(family, socket.SOCK_DGRAM)
            self.sock.sendto(json.dumps({**self.head, "r": rows, "x": executed}).encode(), (a.host, a.port))
        except OSError:
            self.address = None  # progress is a courtesy: never let it fail a task

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _count(v: Any) -> bool:
    return type(v) is int and 0 <= v < 1 << 62


class Listener:
    """The driver's side: receives datagrams on ``host`` (a free port) in a thread."""

    def __init__(self, host: str, token: str) -> None:
        self.token = token
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind((host, 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.live: dict[tuple[int, int], tuple[int, int, int]] = {}  # (stage, partition) -> (attempt, rows, executed)
        self.rejected = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="squall-backfill-progress", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                data = self.sock.recv(MAX_DATAGRAM + 1)
            except socket.timeout:
                continue
            except OSError:
                return
            self.take(data)

    def take(self, data: bytes) -> bool:
        """Check one datagram and record it; False (and counted) if it is not one of ours."""
        try:
            msg = json.loads(data) if len(data) <= MAX_DATAGRAM else None
        except ValueError:
            msg = None
        if (not isinstance(msg, dict) or msg.get("k") != self.token
                or not all(_count(msg.get(f)) for f in ("s", "p", "a", "r", "x"))):
            self.rejected += 1
            return False
        key = (msg["s"], msg["p"])
        with self.lock:
            have = self.live.get(key)
            if have is None or msg["a"] >= have[0]:
                self.live[key] = (msg["a"], msg["r"], msg["x"])
        return True

    def totals(self, stages: set[int]) -> tuple[int, int]:
        """(rows, executed) reported by the partitions of ``stages``."""
        with self.lock:
            vals = [v for (s, _), v in self.live.items() if s in stages]
        return sum(v[1] for v in vals), sum(v[2] for v in vals)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=2)
        self.sock.close()


class Tracker:
    """The driver's view: finished stages' exact counts plus running ones' reports, and
    a thread that hands a ``Progress`` to ``report`` every ``interval`` seconds."""

    def __init__(self, report: Callable[[Progress], None] | None, stages: int, components: int,
                 interval: float, listener: Listener | None) -> None:
        self.report, self.n_stages, self.n_components = report, stages, components
        self.interval, self.listener = interval, listener
        self.started = time.monotonic()
        self.stages_done = self.components_done = 0
        self.done_rows = self.done_executed = 0
        self.running: set[int] = set()
        self._last = (self.started, 0, 0)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if report is not None:
            self._thread = threading.Thread(target=self._loop, args=(report,), name="squall-backfill-report",
                                            daemon=True)
            self._thread.start()

    def start_level(self, level: int) -> None:
        self.running = {level}

    def end_level(self, components: int, rows: int, executed: int) -> None:
        self.stages_done += 1
        self.components_done += components
        self.done_rows += rows
        self.done_executed += executed
        self.running = set()

    def snapshot(self, finished: bool = False) -> Progress:
        rows, executed = self.listener.totals(self.running) if self.listener and self.running else (0, 0)
        rows += self.done_rows
        executed += self.done_executed
        now = time.monotonic()
        t0, r0, x0 = self._last
        dt = max(now - t0, 1e-6)
        p = Progress(self.stages_done, self.n_stages, self.components_done, self.n_components, rows, executed,
                     now - self.started, max(rows - r0, 0) / dt, max(executed - x0, 0) / dt, finished)
        self._last = (now, rows, executed)
        return p

    def _loop(self, report: Callable[[Progress], None]) -> None:
        while not self._stop.wait(self.interval):
            report(self.snapshot())

    def close(self, finished: bool) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            if finished and self.report is not None:
                # The last line's rates are over the whole run.
                self._last = (self.started, 0, 0)
                self.report(self.snapshot(finished=True))


def terminal_reporter(stream: Any) -> Callable[[Progress], None]:
    """Rewrites one line on a terminal; the final report ends it."""
    width = [0]

    def report(p: Progress) -> None:
        line = terminal_line(p)
        pad = " " * max(0, width[0] - len(line))
        width[0] = len(line)
        stream.write("\r" + line + pad + ("\n" if p.finished else ""))
        stream.flush()

    return report


def log_reporter(logger: Any) -> Callable[[Progress], None]:
    """One structured log line per report (JSON with ``--log-format json``)."""

    def report(p: Progress) -> None:
        logger.info("backfill progress", **log_fields(p))

    return report
