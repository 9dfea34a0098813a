"""What ``squall run`` shows while a topology runs: every few seconds, one line on stderr with
the spouts' rates since the last line (emitted, acked, failed per second) and the errors so
far. Plain functions of ``LocalCluster.stats`` and a thread that prints them."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import click

from squall.cli.status_view import rate

Totals = tuple[int, int, int, int]  # spouts' emitted, acked, failed; errors of every component


def totals(stats: Sequence[Mapping[str, Any]]) -> Totals:
    """The run's counters from ``LocalCluster.stats``: user spouts' emitted (user streams),
    acked and failed, and every executor's errors."""
    spouts = [s for s in stats if s.get("kind") == "spout" and not str(s.get("component", "")).startswith("__")]
    emitted = sum(n for s in spouts for k, n in (s.get("emitted") or {}).items() if not str(k).startswith("__"))
    return (emitted, sum(s.get("acked", 0) for s in spouts), sum(s.get("failed", 0) for s in spouts),
            sum(s.get("errors", 0) for s in stats))


def line(before: Totals, after: Totals, secs: float, elapsed: float) -> str:
    per = [max(0, b - a) / secs for a, b in zip(before[:3], after[:3])]
    return (f"[{elapsed:5.0f}s] spouts: {rate(per[0])} emitted/s, {rate(per[1])} acked/s, {rate(per[2])} "
            f"failed/s ({after[0]:,} emitted, {after[1]:,} acked, {after[2]:,} failed); errors {after[3]:,}")


class LiveRates:
    """A thread printing ``line`` every ``interval`` seconds until ``stop``."""

    def __init__(self, stats: Callable[[], Sequence[Mapping[str, Any]]], interval: float) -> None:
        self._stats = stats
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-rates", daemon=True)

    def start(self) -> LiveRates:
        if self.interval > 0:
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.interval + 1)

    def _run(self) -> None:
        started = last_at = time.monotonic()
        last = totals(self._stats())
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            try:
                current = totals(self._stats())
            except Exception:  # noqa: BLE001 - the topology is stopping: nothing to show
                return
            click.echo(line(last, current, now - last_at, now - started), err=True)
            last, last_at = current, now
