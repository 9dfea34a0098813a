"""The price of the API's locks: one ZooKeeper and two nimbus processes, one open (no
tokens, plain HTTP) and one secured (bearer token, TLS), measured side by side in one run.

``api-security-cost``: GET /cluster as the CLI sends it (a new connection per request, so
every secured request pays a TLS handshake and a token check), in alternating rounds.
"""
from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROUNDS = 6


def api_security_cost(duration: float, warmup: float) -> dict[str, Any]:
    from squall.config import build_config
    from squall.daemons.nimbus.client import NimbusClient
    from squall.daemons.nimbus.process import NimbusProcess
    from squall.testing.zookeeper import ZooKeeperServer, ensure_zookeeper_installed

    ensure_zookeeper_installed()
    with tempfile.TemporaryDirectory(prefix="squall-bench-api-") as tmp, \
            ZooKeeperServer(tick_time=500, min_session_timeout=1000) as zk:
        base = build_config({"zookeeper.servers": [zk.host], "zookeeper.port": zk.port,
                             "zookeeper.root": "/bench", "squall.log.level": "WARNING"}, user_file=False)
        open_conf = {**base, "nimbus.auth.enabled": False, "nimbus.auth.tokens.file": "unused"}
        nimbuses = {"open": NimbusProcess(open_conf, Path(tmp) / "open"),
                    "secured": NimbusProcess(base, Path(tmp) / "secured")}
        try:
            for proc in nimbuses.values():
                proc.start()
            clients = {k: NimbusClient.from_conf(p.client_conf()) for k, p in nimbuses.items()}
            latencies: dict[str, list[float]] = {k: [] for k in clients}
            for client in clients.values():  # warm up both
                deadline = time.monotonic() + warmup / 2
                while time.monotonic() < deadline:
                    client.cluster()
            for _ in range(ROUNDS):  # alternate, so a noisy neighbour hits both alike
                for name, client in clients.items():
                    deadline = time.monotonic() + duration / (2 * ROUNDS)
                    while time.monotonic() < deadline:
                        start = time.perf_counter()
                        client.cluster()
                        latencies[name].append(time.perf_counter() - start)
        finally:
            for proc in nimbuses.values():
                proc.stop()
    out: dict[str, Any] = {}
    for name, lat in latencies.items():
        out[name] = {"requests_per_sec": round(len(lat) / sum(lat), 1), "requests": len(lat),
                     "p50_ms": round(statistics.median(lat) * 1000, 2),
                     "p99_ms": round(statistics.quantiles(lat, n=100)[98] * 1000, 2)}
    out["secured_over_open_p50"] = round(out["secured"]["p50_ms"] / out["open"]["p50_ms"], 2)
    out["summary"] = ", ".join(
        f"{k} {v['requests_per_sec']:,.0f} req/s p50 {v['p50_ms']:.1f} ms p99 {v['p99_ms']:.1f} ms"
        for k, v in out.items() if isinstance(v, dict))
    return out


SCENARIOS = {
    "api-security-cost": ("GET /cluster per new connection: open nimbus vs tokens + TLS, alternating, one run",
                          api_security_cost),
}
