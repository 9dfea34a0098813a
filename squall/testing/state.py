"""Reading a stateful topology's results for tests: wait until its spouts' committed
positions cover the input, then gather a component's committed state."""
from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from squall.state.inspect import committed_state, read_record
from squall.state.protocol import TxRecord


def committed_component(conf: Mapping[str, Any], topology: str, component: str, tasks: int,
                        txid: int) -> list[dict[Any, Any]]:
    """The committed state of every task of ``component`` at ``txid``."""
    return [committed_state(conf, topology, component, i, txid)[1] for i in range(tasks)]


def wait_committed(conf: Mapping[str, Any], topology: str, done: Any, timeout: float,
                   what: str = "the input committed") -> TxRecord:
    """Poll the checkpoint record until ``done(txid)`` holds for its committed txid."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        record = read_record(conf, topology)
        if record is not None:
            last = record
            if done(record.restore_point()):
                return record
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last checkpoint record {last}")
