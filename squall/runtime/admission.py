"""Which tuple groups a task may receive from the wire: plain decisions, no I/O.

A group (tuples from one source task on one stream) is admitted for a target task only when
the topology says that task can receive it: the target subscribes to the source's stream,
or it is acker traffic between the parties that exchange it (any task -> an acker, an
acker -> a spout task). Acker traffic must also have the shape the acker sends, since the
spout and acker loops use it without further checks.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
MAX_ID = (1 << 64) - 1  # roots, edge ids and XORs are 64-bit unsigned (the ledger keeps them as C integers)


def is_id(v: Any) -> bool:
    """Is ``v`` a 64-bit unsigned int (a root, an edge id, an XOR of them)?"""
    return type(v) is int and 0 <= v <= MAX_ID


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


def check_acker_values(shape: str, values: list) -> None:
    """Every tuple of an acker-stream group holds one batch of 64-bit unsigned ints of
    ``shape`` (fails: a root may come with its reason, ``[root, text]``, the text of bounded length)."""
    for v in values:
        batch: Any = v[0]
        if shape == ROOT_XORS:
            ok = type(batch) is dict and all(is_id(r) and is_id(x) for r, x in batch.items())
        elif shape == ROOTS:
            ok = type(batch) is list and all(is_id(r) for r in batch)
        else:
            ok = type(batch) is list and all(is_id(r) or _reasoned(r) for r in batch)
        if not ok:
            raise GroupRejected(drops.ACKER_STREAM,
                                f"acker batch is not {shape} of 64-bit unsigned ints: {batch!r:.60}")


def _reasoned(entry: Any) -> bool:
    return (type(entry) is list and len(entry) == 2 and is_id(entry[0]) and type(entry[1]) is str
            and len(entry[1]) <= MAX_REASON_CHARS)
