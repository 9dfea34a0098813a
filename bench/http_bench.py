"""The API under hostile clients: a real ZooKeeper and a secured nimbus (tokens and TLS).

``api-slow-clients``: GET /api/v1/topologies as the CLI sends it (a new TLS connection per
request, 30 s client timeout), while 0, 10 and 100 slow clients of each kind hold connections
(``tests/support/hostile_http.py``: header bytes one every 3 s, or TCP never starting TLS).
``api-upload-rss``: nimbus's peak resident memory while 8 chunked uploads of 1.25 times the
upload limit run in parallel, and what each was answered.
``api-reset-flood``: 300 TLS connections reset mid-header; the lines they add to nimbus's log.
``api-floods``: the floods of issue 28 (``tests/support/floods.py``), each against a fresh
nimbus: the p50/p99 of GET /api/v1/topologies as ``squall list`` sends it (an admin, from
127.0.0.1) while the flood runs from other loopback addresses, nimbus's CPU seconds, and its
RSS idle, at the peak, and how long after the flood it takes to come back within 20% of idle
(at most 60 s). Duration is the probing time under each flood.

The same file runs against another tree's squall (``/other/.venv/bin/python bench/run.py
api-slow-clients`` from this directory), which is how before and after were compared.
"""
from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.floods import (  # noqa: E402
    IdleTls,
    PipelinedReaders,
    SlowUploads,
    cpu_seconds,
    header_waves,
    rss_mb,
    rss_settles,
    tiny_chunks,
)
from support.hostile_http import (  # noqa: E402
    KINDS,
    Probe,
    RssSampler,
    SlowClients,
    chunked_upload,
    reset_flood,
)

COUNTS = (0, 1, 4, 10, 100)
UPLOADS = 8


@contextmanager
def _zookeeper() -> Iterator[Any]:
    from squall.testing.zookeeper import ZooKeeperServer, ensure_zookeeper_installed

    ensure_zookeeper_installed()
    with ZooKeeperServer(tick_time=500, min_session_timeout=1000) as zk:
        yield zk


@contextmanager
def _nimbus(zk: Any, extra: dict[str, Any] | None = None, credentials: Any = None) -> Iterator[Any]:
    """A fresh secured nimbus (its own ZooKeeper root): one case's damage never carries over."""
    from squall.config import build_config
    from squall.daemons.nimbus.process import NimbusProcess

    with tempfile.TemporaryDirectory(prefix="squall-bench-http-") as tmp:
        conf = build_config({"zookeeper.servers": [zk.host], "zookeeper.port": zk.port,
                             "zookeeper.root": f"/bench-{Path(tmp).name}", **(extra or {})}, user_file=False)
        nimbus = NimbusProcess(conf, Path(tmp) / "nimbus", credentials=credentials)
        try:
            yield nimbus.start(leader=True)
        finally:
            nimbus.stop()


def _tls(nimbus: Any) -> Any:
    from squall.daemons.nimbus.access import ApiAccess

    return ApiAccess.from_conf(nimbus.client_conf()).ssl_context


def slow_clients(duration: float, warmup: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with _zookeeper() as zk:
        for kind in KINDS:
            for n in COUNTS:
                if n == 0 and kind != KINDS[0]:
                    continue
                with _nimbus(zk) as nimbus:
                    client = nimbus.client(timeout=30.0)
                    Probe().run(client.topologies, warmup)
                    with SlowClients("127.0.0.1", int(nimbus.conf["nimbus.port"]), n, kind, _tls(nimbus)) as slow:
                        time.sleep(1.0)
                        probe = Probe().run(client.topologies, duration)
                        name = f"{kind} x{n}" if n else "no slow clients"
                        out[name] = {**probe.summary(), "slow_open_at_end": slow.open,
                                     "slow_connects": slow.connects}
    out["summary"] = "; ".join(f"{k}: p50 {v['p50_ms']} ms max {v['max_ms']} ms, {v['failures']} failed"
                               for k, v in out.items())
    return out


def upload_rss(duration: float, warmup: float) -> dict[str, Any]:
    with _zookeeper() as zk, _nimbus(zk) as nimbus:
        limit = int(nimbus.conf["nimbus.code.max.upload.bytes"])
        host, port = "127.0.0.1", int(nimbus.conf["nimbus.port"])
        headers = nimbus.auth_headers()
        with RssSampler(nimbus.pid) as rss, ThreadPoolExecutor(UPLOADS) as pool:
            start = time.monotonic()
            answers = list(pool.map(
                lambda i: chunked_upload(host, port, f"/api/v1/topologies?name=big{i}", headers,
                                         limit * 5 // 4, _tls(nimbus)), range(UPLOADS)))
            took = time.monotonic() - start
        time.sleep(0.5)
        after = rss.proc.memory_info().rss
    mb = 1 << 20
    return {"uploads": UPLOADS, "bytes_each": limit * 5 // 4, "limit": limit, "answers": answers,
            "seconds": round(took, 1), "rss_start_mb": round(rss.start_rss / mb, 1),
            "rss_peak_mb": round(rss.peak / mb, 1), "rss_after_mb": round(after / mb, 1),
            "summary": f"{UPLOADS} chunked uploads of {limit * 5 // 4 / mb:.0f} MB: nimbus RSS "
                       f"{rss.start_rss / mb:.0f} -> peak {rss.peak / mb:.0f} MB; answers {answers}"}


def reset_lines(duration: float, warmup: float) -> dict[str, Any]:
    with _zookeeper() as zk, _nimbus(zk) as nimbus:
        time.sleep(1.0)
        before = nimbus.log_path.stat().st_size
        lines_before = len(nimbus.log_path.read_bytes().splitlines())
        start = time.monotonic()
        done = reset_flood("127.0.0.1", int(nimbus.conf["nimbus.port"]), 300, _tls(nimbus))
        took = time.monotonic() - start
        time.sleep(2.0)
        added = nimbus.log_path.stat().st_size - before
        lines = len(nimbus.log_path.read_bytes().splitlines()) - lines_before
    return {"resets": done, "seconds": round(took, 1), "log_lines_added": lines, "log_bytes_added": added,
            "summary": f"{done} resets in {took:.1f}s added {lines} lines ({added} bytes) to nimbus's log"}


def _flood_cases(host: str, port: int, tls: Any, token: str) -> dict[str, Any]:
    """Flood name -> a context manager running it (what issue 28 measured, scaled to a bench)."""
    sources = [f"127.0.0.{i}" for i in range(2, 42)]

    @contextmanager
    def in_thread(fn: Any) -> Iterator[Any]:
        out: dict[str, Any] = {}
        thread = threading.Thread(target=lambda: out.update(result=fn()), daemon=True)
        thread.start()
        try:
            yield out
        finally:
            thread.join(300)

    return {
        "idle-tls x2000": lambda: IdleTls(host, port, 2000, tls),
        "slow-body x24": lambda: SlowUploads(host, port, 24, tls, token),
        "header-waves 5x500": lambda: in_thread(lambda: header_waves(host, port, tls, 5, 500, sources=sources)),
        "tiny-chunks 2x4MiB": lambda: in_thread(lambda: [tiny_chunks(host, port, "/api/v1/topologies?name=tiny",
                                                                     token, 4 << 20, tls) for _ in range(2)]),
        "pipelined-readers x16": lambda: PipelinedReaders(host, port, 16, tls),
    }


def floods(duration: float, warmup: float) -> dict[str, Any]:
    from squall.daemons.nimbus.credentials import create

    out: dict[str, Any] = {}
    with _zookeeper() as zk, tempfile.TemporaryDirectory(prefix="squall-bench-floods-") as tmp:
        creds = create(Path(tmp) / "security")
        token = creds.add_user("mallory", "user")
        names = list(_flood_cases("", 0, None, "").keys())
        for name in names:
            with _nimbus(zk, credentials=creds) as nimbus:
                host, port = "127.0.0.1", int(nimbus.conf["nimbus.port"])
                client = nimbus.client(timeout=30.0)
                Probe().run(client.topologies, warmup)
                time.sleep(2.0)
                idle = rss_mb(nimbus.pid)
                base = Probe().run(client.topologies, min(duration, 5.0))
                cpu_before = cpu_seconds(nimbus.pid)
                with RssSampler(nimbus.pid) as rss, _flood_cases(host, port, _tls(nimbus), token)[name]() as flood:
                    probe = Probe().run(client.topologies, duration)
                cpu = cpu_seconds(nimbus.pid) - cpu_before
                after, settled = rss_settles(nimbus.pid, idle * 1.2, 60.0)
                refused = client.cluster()["api"]["refused"]
                result = flood.get("result") if isinstance(flood, dict) else None
                out[name] = {"before": base.summary(), "during": probe.summary(), "nimbus_cpu_s": round(cpu, 1),
                             "rss_idle_mb": round(idle, 1), "rss_peak_mb": round(rss.peak / (1 << 20), 1),
                             "rss_after_mb": round(after, 1),
                             "rss_back_within_20pct_s": None if settled is None else round(settled, 1),
                             "refused": {k: v for k, v in refused.items() if v}, "flood_result": result}
    out["summary"] = "; ".join(
        f"{k}: list p99 {v['before']['p99_ms']} -> {v['during']['p99_ms']} ms ({v['during']['failures']} failed), "
        f"RSS {v['rss_idle_mb']:.0f}/{v['rss_peak_mb']:.0f}/{v['rss_after_mb']:.0f} MB "
        f"(back in {v['rss_back_within_20pct_s']} s), cpu {v['nimbus_cpu_s']} s"
        for k, v in out.items())
    return out


SCENARIOS = {
    "api-slow-clients": ("GET /topologies latency while 0/10/100 slow-header or idle-TCP clients hold "
                         "connections to a secured nimbus", slow_clients),
    "api-upload-rss": ("nimbus's peak RSS under 8 parallel chunked uploads of 1.25x the upload limit",
                       upload_rss),
    "api-reset-flood": ("log lines 300 TLS connections reset mid-header add to nimbus's log", reset_lines),
    "api-floods": ("GET /topologies p99 and nimbus RSS under issue 28's floods (idle TLS, slow bodies, header "
                   "waves, 1-byte chunks, pipelined slow readers)", floods),
}
