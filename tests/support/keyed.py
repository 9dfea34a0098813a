"""The keyed-count topology (support/cluster_topologies/keyed_count.py) in local mode: run it on
a state store, wait for its checkpoints and read the counts it committed."""
from __future__ import annotations

import collections
import time
from collections.abc import Callable, Mapping
from typing import Any

from squall import LocalCluster
from squall.loader import load_module
from squall.state.inspect import read_record
from squall.testing.state import committed_component, wait_committed
from support.paths import CLUSTER_TOPOLOGIES

KC = load_module(CLUSTER_TOPOLOGIES / "keyed_count.py")


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def spout_done(conf: Mapping[str, Any], name: str, n: int, tasks: int = 2) -> Callable[[int], bool]:
    """A predicate on a txid: every events task's committed offset has reached ``n``."""
    def done(txid: int) -> bool:
        offsets = committed_component(conf, name, "events", tasks, txid)
        return sum(s.get("offset", 0) >= n for s in offsets) == tasks
    return done


def committed_counts(conf: Mapping[str, Any], name: str, txid: int) -> dict[Any, int]:
    """The counts the three count tasks committed at ``txid``, merged."""
    counts: collections.Counter = collections.Counter()
    for part in committed_component(conf, name, "count", 3, txid):
        counts.update(part)
    return dict(counts)


def run_twice(store: Mapping[str, Any], name: str, events: int = 600, keys: int = 7) -> None:
    """Run the topology on ``store``, kill it, submit it again: each run restores what the last
    committed, and the counts are exact after both."""
    conf = {**KC.CONFIG, **store, "keyed.events": events, "keyed.keys": keys}
    before = 0
    for run in (1, 2):
        with LocalCluster() as cluster:
            cluster.submit(name, conf, KC.topology())
            done = spout_done(store, name, events)
            # This run's own checkpoints: after its INIT (one per start), past the last run's.
            record = wait_committed(store, name, lambda txid: txid > before and done(txid), 60)
            assert read_record(store, name).recoveries == run
            before = record.restore_point() + 2
            wait_committed(store, name, lambda txid: txid >= before, 30)  # more checkpoints: nothing more counted
        assert committed_counts(store, name, read_record(store, name).restore_point()) == KC.reference(events, keys)
