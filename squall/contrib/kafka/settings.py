"""A Kafka spout's settings, read once from its merged configuration (``kafka.spout.*``),
and the first-poll strategies (Storm's FirstPollOffsetStrategy)."""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EARLIEST, LATEST = "EARLIEST", "LATEST"
UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST = "UNCOMMITTED_EARLIEST", "UNCOMMITTED_LATEST"
STRATEGIES = (EARLIEST, LATEST, UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST)
# librdkafka's logical offsets
OFFSET_BEGINNING, OFFSET_END = -2, -1


@dataclass(frozen=True)
class SpoutSettings:
    strategy: str
    commit_period: float
    max_uncommitted: int
    poll_records: int
    refresh_period: float
    retry_initial: float
    retry_multiplier: float
    retry_max_delay: float
    retry_max_count: int | None
    metrics_bucket: float

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "SpoutSettings":
        return cls(str(conf["kafka.spout.first.poll.offset.strategy"]),
                   conf["kafka.spout.offset.commit.period.ms"] / 1000.0,
                   int(conf["kafka.spout.max.uncommitted.offsets"]),
                   int(conf["kafka.spout.poll.max.records"]),
                   conf["kafka.spout.partition.refresh.period.ms"] / 1000.0,
                   conf["kafka.spout.retry.initial.delay.ms"] / 1000.0,
                   float(conf["kafka.spout.retry.delay.multiplier"]),
                   conf["kafka.spout.retry.max.delay.ms"] / 1000.0,
                   conf["kafka.spout.retry.max.count"],
                   float(conf["kafka.spout.metrics.time.bucket.secs"]))


def commit_metadata(topology_id: str) -> str:
    """What a spout writes with its commits: the topology it ran in (Storm's rule, so that
    EARLIEST and LATEST apply on a deployment and a restarted worker resumes)."""
    return json.dumps({"topology_id": topology_id}, separators=(",", ":"))


def committed_by(metadata: Any) -> str | None:
    """The topology id a commit's metadata names, if it is a spout's (hostile: anything)."""
    if not isinstance(metadata, str) or len(metadata) > 4096:
        return None
    try:
        data = json.loads(metadata)
    except ValueError:
        return None
    tid = data.get("topology_id") if isinstance(data, dict) else None
    return tid if isinstance(tid, str) else None


def start_offset(strategy: str, committed: int | None, committed_topology: str | None, topology_id: str) -> int:
    """Where a partition starts: a committed offset (>= 0) or OFFSET_BEGINNING / OFFSET_END.

    UNCOMMITTED_*: the group's committed offset when there is one, else the named end.
    EARLIEST / LATEST: the named end on a new deployment, whatever was committed; a
    restarted task of the same deployment (its commits name this topology) resumes.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"first poll strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
    has = committed is not None and committed >= 0
    end = OFFSET_BEGINNING if strategy in (EARLIEST, UNCOMMITTED_EARLIEST) else OFFSET_END
    if strategy in (UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST):
        return committed if has else end  # type: ignore[return-value]
    return committed if has and committed_topology == topology_id else end  # type: ignore[return-value]
