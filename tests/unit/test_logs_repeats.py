"""A cause repeated in a loop is logged once per window, with how many were held back."""
from __future__ import annotations

import io
import json

import pytest
import structlog

from squall.logs import RepeatGuard, configure


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_repeated_warning_is_written_once_per_window_with_the_count():
    clock = Clock()
    guard = RepeatGuard(window=10.0, clock=clock)

    def line(txid: int, level: str = "warning", event: str = "checkpoint failed; rolling back", **kw):
        try:
            return guard(None, level, {"event": event, "level": level, "txid": txid, "action": "rollback", **kw})
        except structlog.DropEvent:
            return None

    written = []
    for i in range(34_426):  # the loop of the issue: 2.5 minutes of it
        clock.now = i * 150.0 / 34_426
        out = line(i)
        if out is not None:
            written.append(out)
    assert len(written) == 15  # one per 10 s
    assert "repeated" not in written[0] and all(w["repeated"] > 2000 for w in written[1:])
    assert sum(w.get("repeated", 0) for w in written) + len(written) < 34_426  # the last window's wait
    # Another cause, or another text, is its own; info lines are never held back.
    assert line(1, action="prepare") is not None
    assert line(1, event="other") is not None
    assert all(line(i, level="info") is not None for i in range(5))


def test_daemon_logs_go_through_the_guard():
    out = io.StringIO()
    configure("json", stream=out)
    log = structlog.get_logger("t")
    for _ in range(100):
        log.error("store unreachable", error="connection refused")
    lines = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [x["event"] for x in lines] == ["store unreachable"]


@pytest.fixture(autouse=True)
def _reset_logging():
    yield
    configure("console")
