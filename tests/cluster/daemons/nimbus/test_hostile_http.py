"""Nimbus's API against hostile clients, from outside, as a user would notice: it keeps
answering within 2 s while dozens of slow or idle connections hold it, a flood of connections
reset mid-request leaves a bounded log, parallel chunked uploads leave its memory bounded,
and a malformed body is a 400 (a 403 for a caller who may not act, before any parsing).

One real secured nimbus (tokens and TLS) for the module, at its default deadlines; the
clients are in tests/support/hostile_http.py (bench/http_bench.py measures the same cases).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.credentials import create
from squall.daemons.nimbus.process import NimbusProcess
from squall.testing.waiting import wait_for
from support.bundles import make_bundle
from support.hostile_http import Probe, RssSampler, SlowClients, chunked_upload, reset_flood
from support.servers import TEST_SESSION_TIMEOUT_MS, ZK_AUTH

LATENCY_BOUND = 2.0   # what "the API answers" means here
PROBE_SECS = 5.0


@pytest.fixture(scope="module")
def secured(zk_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("hostile")
    creds = create(tmp_path / "security")
    tokens = {"admin": creds.admin_token, **{user: creds.add_user(user, role) for user, role in
                                             (("alice", "user"), ("val", "viewer"))}}
    conf = {"zookeeper.servers": [zk_server.host], "zookeeper.port": zk_server.port,
            "zookeeper.root": f"/hostile-{tmp_path.name}", "zookeeper.session.timeout.ms": TEST_SESSION_TIMEOUT_MS,
            "nimbus.code.max.upload.bytes": 16 << 20, **ZK_AUTH}
    nimbus = NimbusProcess(conf, tmp_path / "nimbus", credentials=creds).start(leader=True)
    try:
        nimbus.client(token=tokens["alice"]).submit("alice-topo", make_bundle(tmp_path / "alice", "alice-topo"))
        yield {"nimbus": nimbus, "tokens": tokens, "tls": ApiAccess.from_conf(nimbus.client_conf()).ssl_context,
               "port": int(nimbus.conf["nimbus.port"])}
    finally:
        assert nimbus.stop() == 0, nimbus.log_tail()


def refused(nimbus: NimbusProcess) -> dict[str, int]:
    return nimbus.client(timeout=10).cluster()["api"]["refused"]


def log_lines(nimbus: NimbusProcess) -> list[str]:
    return nimbus.log_path.read_text(encoding="utf-8", errors="replace").splitlines()


def squall_list(nimbus: NimbusProcess, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    conf = tmp_path / "client.yaml"
    conf.write_text(yaml.safe_dump(nimbus.client_conf()))
    conf.chmod(0o600)
    return subprocess.run([sys.executable, "-m", "squall.cli", "list"], capture_output=True, text=True, timeout=90,
                          env={**os.environ, "SQUALL_CONF": str(conf)})


@pytest.mark.parametrize("kind", ["slow-headers", "idle-tcp"])
def test_the_api_answers_while_slow_clients_hold_connections(secured, tmp_path, kind):
    nimbus = secured["nimbus"]
    client = nimbus.client(timeout=10)
    n = 100
    with SlowClients("127.0.0.1", secured["port"], n, kind, secured["tls"]) as slow:
        assert slow.open == n, f"only {slow.open} of {n} slow clients connected"
        probe = Probe().run(client.topologies, PROBE_SECS)
        assert not probe.failures and probe.worst < LATENCY_BOUND, (n, kind, probe.summary())
        out = squall_list(nimbus, tmp_path)  # what a user runs: it works and lists the topology
        assert out.returncode == 0 and "alice-topo" in out.stdout, out.stderr
    # A slow client is cut off at its deadline (TLS handshake 5 s, request head 10 s), and
    # counted: the connections above were refused, not served.
    with SlowClients("127.0.0.1", secured["port"], 1, kind, secured["tls"], interval=0.5) as slow:
        wait_for(lambda: slow.closed_by_server >= 1, timeout=20, what="the server closing a slow connection")
    reason = "header-timeout" if kind == "slow-headers" else "tls-handshake"
    assert refused(nimbus)[reason] >= 1
    assert "Traceback" not in nimbus.log_path.read_text(encoding="utf-8", errors="replace")


def test_a_flood_of_connections_reset_mid_request_leaves_a_bounded_log(secured):
    nimbus = secured["nimbus"]
    time.sleep(1.0)  # start-up lines written
    before = len(log_lines(nimbus))
    done = reset_flood("127.0.0.1", secured["port"], 300, secured["tls"], within=60.0)
    added = log_lines(nimbus)[before:]
    # 20 lines per 10 s window at most, and one saying how many went unlogged
    assert len(added) <= 20 * (1 + int(60 / 10)) + 10, \
        f"{len(added)} lines for {done} resets:\n" + "\n".join(added[:40])
    assert not [line for line in added if "Traceback" in line or line.startswith(("│", "╭"))], added[:40]
    assert done >= 100, f"only {done} connections could be made and reset within 60 s"
    wait_for(lambda: refused(nimbus)["reset"] + refused(nimbus)["tls-handshake"] >= done, timeout=20,
             what=f"{done} resets counted ({refused(nimbus)})")
    assert nimbus.client(timeout=5).topologies()[0]["name"] == "alice-topo"


def test_parallel_chunked_uploads_leave_nimbus_memory_bounded(secured, tmp_path):
    nimbus, limit = secured["nimbus"], 16 << 20
    headers = nimbus.auth_headers(secured["tokens"]["alice"])
    uploads = 6
    with RssSampler(nimbus.pid) as rss, ThreadPoolExecutor(uploads) as pool:
        answers = list(pool.map(lambda i: chunked_upload(
            "127.0.0.1", secured["port"], f"/api/v1/topologies?name=big{i}", headers, limit * 3 // 2, secured["tls"]),
            range(uploads)))
    grown = (rss.peak - rss.start_rss) >> 20
    # Each upload read whole before its 413 would add 16 MiB or more: 96 MiB for six.
    assert grown < 40, f"nimbus grew by {grown} MiB under {uploads} chunked uploads (answers {answers})"
    assert all(a == 413 or isinstance(a, str) for a in answers), answers
    assert 413 in answers, answers
    assert refused(nimbus)["too-large"] >= uploads
    # Nothing of them is left on disk, and a real bundle still goes through.
    assert not [p.name for p in nimbus.code_dir.iterdir() if p.name.startswith(".tmp-")]
    reply = nimbus.client(token=secured["tokens"]["alice"]).submit("small", make_bundle(tmp_path / "s", "small"))
    assert reply["name"] == "small"


def post(secured: dict[str, Any], path: str, token: str, body: bytes) -> tuple[int, dict[str, Any]]:
    conn = secured["nimbus"].connection()
    try:
        conn.request("POST", "/api/v1" + path, body=body, headers={"Authorization": f"Bearer {token}"})
        reply = conn.getresponse()
        return reply.status, json.loads(reply.read() or b"{}")
    finally:
        conn.close()


def test_a_deeply_nested_body_is_a_400_and_a_viewer_is_refused_before_parsing(secured):
    nested = b"[" * 100_000 + b"]" * 100_000
    tokens = secured["tokens"]
    code, reply = post(secured, "/topologies/alice-topo/rebalance", tokens["alice"], nested)
    assert (code, reply) == (400, {"error": "request body is nested too deeply"})
    code, reply = post(secured, "/topologies/alice-topo/rebalance", tokens["val"], nested)
    assert code == 403 and "val" in reply["error"], reply
    for bad in (b"{", b"[1, 2]", b"\xff\xfe"):
        assert post(secured, "/topologies/alice-topo/kill", tokens["alice"], bad)[0] == 400
    assert secured["nimbus"].client(timeout=5).topology("alice-topo")["status"] == "active"  # nothing ran
    assert "Traceback" not in secured["nimbus"].log_path.read_text(encoding="utf-8", errors="replace")
