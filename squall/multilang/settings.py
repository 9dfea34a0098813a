"""The multilang settings a shell component reads from its conf, and its restart policy."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from squall.multilang.framing import serializer_name

HEARTBEAT_SECS = 1.0        # Storm's ShellBolt sends a heartbeat tuple every second
SPOUT_SLICE_SECS = 0.005    # the longest one spout call waits for its child's sync
CONVERSE_SECS = 0.002       # how long a bolt waits on for a child that asked for task ids to go on
SPIN_SECS = 0.0001          # of which spent looking at its pipe before sleeping on it
SPIN_TRIES = 4              # spins that found nothing in a row before a bolt stops spinning
SPIN_PROBE = 64             # then one wait in this many spins again (the child may be quick again)
SPOUT_QUEUE_MAX = 10_000    # acks/fails held for a spout child busy with a command
READ_BUDGET_BYTES = 4 << 20  # child output read per service turn; the rest waits in the pipe
# Messages for the child's stdin beyond its tuples' max pending (task-id answers, heartbeats,
# ticks) before its output is no longer read: a child that asks and never reads its answers
# then times out, instead of growing the worker's memory for ever.
MAX_UNREAD_ANSWERS = 1_000


@dataclass(frozen=True)
class ShellSettings:
    serializer: str
    timeout: float
    max_pending: int
    max_inflight: int
    max_message_bytes: int
    lines_per_sec: int

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], serializer: str | None = None) -> "ShellSettings":
        """The settings for one component; ``serializer`` (the component's own) wins over conf."""
        return cls(serializer=serializer_name(serializer or conf.get("topology.multilang.serializer", "json")),
                   timeout=float(conf.get("topology.subprocess.timeout.secs", 30.0)),
                   max_pending=int(conf.get("topology.shellbolt.max.pending", 100)),
                   max_inflight=int(conf.get("topology.multilang.max.inflight", 100_000)),
                   max_message_bytes=int(conf.get("topology.multilang.max.message.bytes", 16 << 20)),
                   lines_per_sec=int(conf.get("topology.multilang.log.lines.per.sec", 100)))


class RestartPolicy:
    """When to start a child again after it failed (plain code).

    The first failure restarts at once; a child that fails again soon after starting waits
    twice as long each time, up to ``cap``; one that ran ``stable`` seconds counts as new."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, stable: float = 30.0) -> None:
        self.base, self.cap, self.stable = base, cap, stable
        self.streak = 0

    def next_start(self, now: float, lived: float) -> float:
        if lived >= self.stable:
            self.streak = 0
        self.streak += 1
        if self.streak == 1:
            return now
        return now + min(self.cap, self.base * 2 ** (self.streak - 2))
