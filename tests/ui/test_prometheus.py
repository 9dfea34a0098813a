"""Debian's real Prometheus scrapes a live cluster running word count, through the shipped
conf/prometheus.yml (targets and interval filled in): one nimbus target and one target per
supervisor host, whose endpoint carries its workers' series.
"""
from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request

import pytest

from support.paths import CLUSTER_TOPOLOGIES
from support.prometheus import PrometheusServer

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "cluster_wordcount.py"
RATE = 'sum by (component) (rate(squall_task_executed_total{topology=~"wcp-.*"}[10s]))'


def values(result: list[dict]) -> dict[str, float]:
    return {r["metric"].get("component", ""): float(r["value"][1]) for r in result}


def test_prometheus_scrapes_executed_rate_per_component(start_cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    cluster = start_cluster(supervisors=2, slots=2)
    res = cluster.cli("submit", str(TOPOLOGY), "--name", "wcp", "-c", "topology.workers=2",
                      "-c", f"test.output.dir={out}", "-c", "test.sentences=50000", "-c", "test.rate=200")
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = {"squall-nimbus": [f"127.0.0.1:{cluster.common['nimbus.port']}"],
            "squall-supervisors": [f"127.0.0.1:{cluster.metrics_port(i)}" for i in range(2)]}
    # /metrics is a read of the API on nimbus and supervisors alike: TLS and a bearer token
    # (a viewer's), as in a secured cluster.
    token = cluster.credentials.add_user("prometheus", "viewer")  # nimbus re-reads its token file
    token_file = tmp_path / "prometheus-token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    secured = {"scheme": "https", "tls_config": {"ca_file": str(cluster.credentials.ca_file)},
               "authorization": {"type": "Bearer", "credentials_file": str(token_file)}}
    options = {"squall-nimbus": secured, "squall-supervisors": secured}
    with PrometheusServer(tmp_path / "prometheus", jobs, interval=1.0, options=options) as prom:
        rates: dict[str, float] = {}

        def counting() -> bool:
            rates.update(values(prom.query(RATE)))
            return rates.get("count", 0) > 0 and rates.get("split", 0) > 0

        cluster.wait_for(counting, 60, "a positive executed rate of count in Prometheus", interval=1.0)
        # Every target answered, the two supervisors' workers included.
        health = {(t["labels"]["job"], t["health"]) for t in prom.targets()}
        assert health == {("squall-nimbus", "up"), ("squall-supervisors", "up")}, prom.targets()
        # Each sentence of 3-6 words makes split execute once and count 3-6 times (once the
        # 10 s window holds only steady running).
        def proportional() -> bool:
            rates.update(values(prom.query(RATE)))
            return 2.5 * rates["split"] < rates["count"] < 7 * rates["split"]

        cluster.wait_for(proportional, 30, f"count's rate 3-6 times split's ({rates})", interval=1.0)
        assert values(prom.query("squall_nimbus_leader")) == {"": 1.0}
        assert values(prom.query("sum(squall_supervisor_slots_used)")) == {"": 2.0}
        # Trees complete: the spout's acks and complete latencies grow (a worker relaunched on
        # this busy machine starts its counters over, hence increase() and a wait).
        cluster.wait_for(lambda: prom.query(
            'sum(increase(squall_task_acked_total{component="sentences"}[20s])) > 0') and prom.query(
            'sum(increase(squall_executor_complete_latency_seconds_count[20s])) > 0'), 30,
            "spout acks and complete latencies in Prometheus", interval=1.0)
        (tmp_path / "prometheus-query.json").write_text(json.dumps(
            {"query": RATE, "result": prom.query(RATE)}, indent=2))
        print(f"\n{RATE}\n" + json.dumps(prom.query(RATE), indent=2))

    # A supervisor's endpoint without a token, with a revoked one, or in plain HTTP: refused,
    # and counted in its own series.
    url = f"https://127.0.0.1:{cluster.metrics_port(0)}/metrics"
    ctx = ssl.create_default_context(cafile=str(cluster.credentials.ca_file))

    def scrape() -> str:
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=5, context=ctx) as reply:
            assert reply.headers["Content-Type"].startswith("text/plain")
            return reply.read().decode()

    assert "squall_supervisor_slots_free" in scrape()
    for headers in ({}, {"Authorization": f"Bearer {token}x"}):
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5, context=ctx)
        assert err.value.code == 401
    with pytest.raises(urllib.error.HTTPError) as err:  # plain HTTP on the TLS port: told so
        urllib.request.urlopen(url.replace("https", "http"), timeout=5)
    assert err.value.code == 400 and b"only speaks HTTPS" in err.value.read()
    refused = {line.split('"')[1]: float(line.rsplit(" ", 1)[1]) for line in scrape().splitlines()
               if line.startswith("squall_http_refused_total{")}
    assert refused["unauthenticated"] >= 2 and refused["plain-http"] >= 1, refused
