"""Storm's Flux wrapper classes, by their Java names, as squall components: a Flux file
written for Storm's multilang components runs as it is."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from squall.components import Bolt
from squall.multilang.shell_bolt import ShellBolt
from squall.multilang.shell_spout import ShellSpout


class LogInfoBolt(Bolt):
    """Flux's LogInfoBolt: logs every tuple at INFO and acks it."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.log = structlog.get_logger("squall.multilang.flux").bind(
            topology=context.topology_id, component=context.this_component_id, task=context.this_task_id)

    def execute(self, tup: Any) -> None:
        self.log.info("tuple", source=tup.source_component, stream=tup.source_stream, values=tup.values)
        self.collector.ack(tup)


def _shell_bolt(command: Sequence[str], output_fields: Sequence[str] | None = None) -> ShellBolt:
    return ShellBolt(list(command), None if output_fields is None else list(output_fields))


def _shell_spout(command: Sequence[str], output_fields: Sequence[str] | None = None) -> ShellSpout:
    return ShellSpout(list(command), None if output_fields is None else list(output_fields))


STORM_CLASSES: dict[str, Callable[..., Any]] = {
    "org.apache.storm.flux.wrappers.bolts.FluxShellBolt": _shell_bolt,
    "org.apache.storm.flux.wrappers.spouts.FluxShellSpout": _shell_spout,
    "org.apache.storm.flux.wrappers.bolts.LogInfoBolt": LogInfoBolt,
}
# First name segments of Java packages: an unmapped class under one of these is Java.
JAVA_ROOTS = ("org", "com", "net", "java", "javax", "io", "scala", "clojure", "backtype", "storm")
