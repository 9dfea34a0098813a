"""A supervisor's /metrics and logviewer from outside: a `user` token sees only its own
topologies' worker series, and both endpoints keep answering within 2 s while dozens of slow
or idle connections hold them (a real cluster: nimbus, one supervisor, two users' workers).
"""
from __future__ import annotations

import json
import re
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from squall.daemons.nimbus.access import ApiAccess
from squall.daemons.nimbus.client import NimbusClient
from support.bundles import make_bundle
from support.hostile_http import KINDS, Probe, SlowClients

LATENCY_BOUND = 2.0
_TOPOLOGY_LABEL = re.compile(r'topology="([^"]+)"')


def get(url: str, token: str, ctx: ssl.SSLContext, timeout: float = 10.0) -> bytes:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=timeout, context=ctx) as reply:
        return reply.read()


def topologies_in(text: bytes) -> set[str]:
    return set(_TOPOLOGY_LABEL.findall(text.decode()))


@pytest.fixture
def two_tenants(start_cluster, tmp_path: Path) -> dict[str, Any]:
    """One supervisor running a worker of alice's topology and one of bob's."""
    cluster = start_cluster(supervisors=1, slots=2)
    creds = cluster.credentials
    tokens = {"admin": creds.admin_token, "alice": creds.add_user("alice", "user"),
              "bob": creds.add_user("bob", "user"), "val": creds.add_user("val", "viewer")}
    ids = {}
    for user in ("alice", "bob"):
        client = NimbusClient("127.0.0.1", cluster.common["nimbus.port"], 30,
                              ApiAccess.from_conf(creds.client_conf(tokens[user])))
        out = tmp_path / f"out-{user}"
        out.mkdir()
        ids[user] = client.submit(f"{user}-topo", make_bundle(
            tmp_path / user, f"{user}-topo", {"test.out_dir": str(out), "test.count": 10**9, "test.rate": 20,
                                               "topology.workers": 1}))["id"]
    ctx = ssl.create_default_context(cafile=str(creds.ca_file))
    metrics = f"https://127.0.0.1:{cluster.metrics_port(0)}/metrics"
    # Both workers' series are exported once they have written a snapshot.
    cluster.wait_for(lambda: topologies_in(get(metrics, tokens["admin"], ctx)) == set(ids.values()), 90,
                     "both workers' series on the supervisor's /metrics")
    row = cluster.client.cluster()["supervisors"][0]
    return {"cluster": cluster, "tokens": tokens, "ids": ids, "ctx": ctx, "metrics": metrics,
            "logviewer_port": row["logviewer_port"], "worker_ports": row["used_ports"]}


def test_metrics_show_a_user_only_its_own_topologies(two_tenants):
    t = two_tenants
    seen = {who: get(t["metrics"], t["tokens"][who], t["ctx"]) for who in ("alice", "bob", "val", "admin")}
    assert topologies_in(seen["alice"]) == {t["ids"]["alice"]}
    assert topologies_in(seen["bob"]) == {t["ids"]["bob"]}
    assert topologies_in(seen["val"]) == topologies_in(seen["admin"]) == set(t["ids"].values())
    for text in seen.values():  # the supervisor's own series are everyone's
        assert b"squall_supervisor_slots_used 2.0" in text


def test_endpoints_answer_while_slow_clients_hold_connections(two_tenants):
    t = two_tenants
    alice = t["ids"]["alice"]
    status = t["cluster"].client.topology(alice)
    port = next(e["port"] for c in status["components"] for e in c["executors"] if e["port"])
    log_url = f"https://127.0.0.1:{t['logviewer_port']}/logs/{alice}/{port}?lines=5"
    assert json.loads(get(log_url, t["tokens"]["alice"], t["ctx"]))["worker_id"]
    endpoints = {"metrics": (t["metrics"], int(t["metrics"].split(":")[2].split("/")[0])),
                 "logviewer": (log_url, t["logviewer_port"])}
    for name, (url, target) in endpoints.items():
        for kind in KINDS:
            for n in (10, 100):
                with SlowClients("127.0.0.1", target, n, kind, t["ctx"]) as slow:
                    assert slow.open == n, f"{name}: only {slow.open} of {n} slow clients connected"
                    probe = Probe().run(lambda: get(url, t["tokens"]["alice"], t["ctx"], timeout=10), 3.0)
                    assert not probe.failures and probe.worst < LATENCY_BOUND, (name, kind, n, probe.summary())
    text = get(t["metrics"], t["tokens"]["admin"], t["ctx"]).decode()
    pattern = r'squall_http_refused_total\{reason="([^"]+)"\} (\S+)'
    counted = {reason: float(v) for reason, v in re.findall(pattern, text)}
    assert counted["tls-handshake"] > 0, counted  # the idle ones cut off at their deadline
