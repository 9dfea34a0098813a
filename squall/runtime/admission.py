"""Which tuple groups a task may receive from the wire: plain decisions, no I/O.

A group (tuples from one source task on one stream) is admitted for a target task only when
the topology says that task can receive it: the target subscribes to the source's stream,
or it is acker traffic between the parties that exchange it (any task -> an acker, an
acker -> a spout task). Acker traffic must also have the shape the acker sends (``check``
names it; squall.runtime.serialization checks the values, in its compiled loops), since the
spout and acker loops use it without further checks.
"""
from __future__ import annotations

from collections.abc import Mapping

from squall.errors import SquallError
from squall.model import ACK_ACK, ACKER, ACKER_STREAMS
from squall.runtime import drops
from squall.topology import SPOUT, Topology


class GroupRejected(SquallError, ValueError):
    """A group that must not be delivered; ``cause`` is one of the squall.runtime.drops causes."""

    def __init__(self, cause: str, detail: str) -> None:
        super().__init__(detail)
        self.cause = cause


# What an acker-stream group's values must be (see squall.model for the traffic).
ROOTS = "roots"        # [root, ...]
ROOT_XORS = "xors"     # {root: xor, ...}
FAILS = "fails"        # [root or [root, reason], ...]
MAX_REASON_CHARS = 4000


class Admission:
    """Decides per (target task, source component, stream); callers cache the answer."""

    def __init__(self, system: Topology, task_to_component: Mapping[int, str]) -> None:
        self._system = system
        self._task_to_component = task_to_component

    def check(self, target: int, source_component: str, stream: str) -> str | None:
        """None for an ordinary stream, or the value shape required of acker traffic;
        raises GroupRejected when ``target`` may not receive this stream from that source."""
        target_component = self._task_to_component.get(target)
        if target_component is None:
            raise GroupRejected(drops.UNKNOWN_TASK, f"target task {target} is not in the topology")
        if stream in ACKER_STREAMS:
            if target_component == ACKER:
                if source_component == ACKER:
                    raise GroupRejected(drops.ACKER_STREAM, f"{stream} from an acker to an acker")
                return ROOT_XORS if stream == ACK_ACK else FAILS
            if self._system.components[target_component].kind == SPOUT:
                if source_component != ACKER:
                    raise GroupRejected(drops.ACKER_STREAM, f"{stream} to spout task {target} from "
                                        f"{source_component!r}, which is not an acker")
                return ROOTS if stream == ACK_ACK else FAILS
            raise GroupRejected(drops.ACKER_STREAM, f"{stream} to bolt task {target}")
        if not any(bolt == target_component for bolt, _ in self._system.subscribers(source_component, stream)):
            raise GroupRejected(drops.NOT_SUBSCRIBED, f"task {target} ({target_component!r}) does not "
                                f"subscribe to {source_component!r} stream {stream!r}")
        return None
