"""Play a supervisor's report to a real nimbus: what a supervisor posts every
``supervisor.heartbeat.frequency.secs`` for its workers (their beats and executor stats),
sent with the supervisor token over the API, as a supervisor sends it."""
from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable
from typing import Any

from squall.daemons.nimbus.process import NimbusProcess
from squall.daemons.reports import ReportedBeat, build_report
from squall.daemons.state import WorkerBeat


def send_report(nimbus: NimbusProcess, supervisor_id: str, beats: Iterable[WorkerBeat],
                now: float = 0.0) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON reply) of one report of ``beats`` (``node`` must be the supervisor),
    built as a supervisor builds it from the files its workers leave."""
    assert nimbus.credentials is not None, "a secured nimbus made by NimbusProcess"
    body = build_report(supervisor_id, now, [ReportedBeat.of(b) for b in beats]).to_json()
    conn = nimbus.connection()
    try:
        conn.request("POST", f"/api/v1/supervisors/{urllib.parse.quote(supervisor_id, safe='')}/report",
                     body=body, headers={"Content-Type": "application/json",
                                         **nimbus.auth_headers(nimbus.credentials.supervisor_token)})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def report_beats(nimbus: NimbusProcess, beats: Iterable[WorkerBeat]) -> None:
    """One report per supervisor named by ``beats``; AssertionError unless nimbus took each."""
    by_node: dict[str, list[WorkerBeat]] = {}
    for beat in beats:
        by_node.setdefault(beat.node, []).append(beat)
    for node, mine in by_node.items():
        status, reply = send_report(nimbus, node, mine)
        assert status == 200, (status, reply)
