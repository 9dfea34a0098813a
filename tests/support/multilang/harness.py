"""What the multilang tests share: per-test Recorder names and running a local topology
until a condition holds."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from squall.testing.components import Recorder
from squall.testing.waiting import wait_for

SUPPORT = Path(__file__).resolve().parent


class Names:
    """Recorder names private to one test; ``clear()`` forgets them."""

    def __init__(self, base: str) -> None:
        self.base = base.replace("[", "_").replace("]", "")

    def __call__(self, name: str) -> str:
        return f"{self.base}.{name}"

    def get(self, name: str) -> list:
        return Recorder.get(self(name))

    def clear(self) -> None:
        for key in list(Recorder._data):
            if key.startswith(self.base):
                Recorder.clear(key)


def run_until(cluster: Any, topology: Any, conf: dict, done: Callable[[], Any], what: str,
              timeout: float = 60) -> dict:
    """Submit, wait for ``done`` (errors shown on timeout), kill; the errors reported."""
    cluster.submit("t", conf, topology)
    try:
        wait_for(done, timeout, what, lambda: str(cluster.errors("t")))
        return cluster.errors("t")
    finally:
        cluster.kill("t")


def error_text(errors: dict, component: str) -> str:
    return "\n".join(e["error"] for e in errors.get(component, []))


METERED_WORDS = [["apple"], ["fig"], ["kiwi"]] * 10  # 30 words, 120 letters


def metered_conf(recorder: str) -> dict:
    """Shell metrics in small buckets, handed to a RecordingMetricsConsumer named ``recorder``."""
    return {"topology.builtin.metrics.bucket.size.secs": 0.05,
            "topology.metrics.consumer.register": [
                {"class": "squall.testing.components.RecordingMetricsConsumer", "argument": recorder}]}


def metric_totals(recorded: list, component: str) -> dict[str, int]:
    """Counter data points of ``component`` summed by name (RecordingMetricsConsumer's records)."""
    out: dict[str, int] = {}
    for info, points in recorded:
        if info.src_component_id == component:
            for p in points:
                if isinstance(p.value, int):
                    out[p.name] = out.get(p.name, 0) + p.value
    return out
