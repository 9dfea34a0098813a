"""A child's ``metrics`` commands applied to its task's registered metrics (Storm's
ShellBolt ``handleMetrics``).

``{"command": "metrics", "name": N, "params": P}`` calls ``update_from_rpc(P)`` on the
metric registered under N (Storm's IShellMetric, e.g. squall.metrics.CountShellMetric,
registered by a subclass in ``prepare``/``open``). A name nothing is registered under gets
a CountShellMetric on first use, with ``topology.builtin.metrics.bucket.size.secs`` as
its bucket, so ``storm.rpcMetrics("records", 1)`` in a child counts without Java-side
code. The metric then reaches Prometheus, ``squall status`` and the metrics consumers
like any other.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from squall.context import TopologyContext
from squall.metrics import CountShellMetric, MetricError


class ShellMetrics:
    def __init__(self, context: TopologyContext, conf: Mapping[str, Any]) -> None:
        self.context = context
        self.bucket = float(conf.get("topology.builtin.metrics.bucket.size.secs", 60))

    def update(self, name: str, params: Any) -> str | None:
        """Apply one command; the reason it could not be applied, else None."""
        metric = self.context.registered_metric(name)
        if metric is None:
            try:
                metric = self.context.register_metric(name, CountShellMetric(), self.bucket)
            except MetricError as exc:
                return f"metrics {name!r:.60}: {exc}"
        update = getattr(metric, "update_from_rpc", None)
        if update is None:
            return f"metrics {name!r:.60}: the metric registered under that name takes no updates from a child"
        try:
            update(params)
        except (MetricError, ValueError, TypeError) as exc:
            return f"metrics {name!r:.60}: {exc}"
        return None
