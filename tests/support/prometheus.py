"""A real Prometheus server (Debian's ``prometheus`` package) for tests: scrape squall's
``/metrics`` endpoints and query the HTTP API.

``PrometheusServer`` writes a config from ``conf/prometheus.yml`` with the given targets
and scrape interval, runs ``prometheus`` on a free 127.0.0.1 port with its own storage
directory, and stops it by PID.
"""
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from squall.conf import DEFAULTS_PATH
from squall.testing.zookeeper import free_port

SHIPPED_CONFIG = Path(DEFAULTS_PATH).with_name("prometheus.yml")


class PrometheusError(RuntimeError):
    """Prometheus is missing, did not start, or answered with an error."""


def scrape_config(jobs: Mapping[str, Sequence[str]], interval: float,
                  options: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The shipped config with each job's targets replaced, a shorter interval, and extra
    settings per job (``options``: e.g. nimbus's scheme, tls_config and authorization)."""
    conf = yaml.safe_load(SHIPPED_CONFIG.read_text())
    conf["global"]["scrape_interval"] = conf["global"]["evaluation_interval"] = f"{interval:g}s"
    by_name = {job["job_name"]: job for job in conf["scrape_configs"]}
    for name, targets in jobs.items():
        by_name[name]["static_configs"] = [{"targets": list(targets)}]
        by_name[name]["scrape_timeout"] = f"{interval:g}s"
    for name, extra in (options or {}).items():
        by_name[name].update(extra)
    return conf


class PrometheusServer:
    def __init__(self, work_dir: Path, jobs: Mapping[str, Sequence[str]], interval: float = 1.0,
                 options: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.binary = shutil.which("prometheus")
        if self.binary is None:
            raise PrometheusError("no prometheus binary: apt-get install -y prometheus")
        self.dir = Path(work_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(scrape_config(jobs, interval, options)))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        log = open(self.dir / "prometheus.log", "ab")
        self.proc = subprocess.Popen(
            [self.binary, f"--config.file={self.config}", f"--web.listen-address=127.0.0.1:{self.port}",
             f"--storage.tsdb.path={self.dir / 'data'}", "--storage.tsdb.retention.time=1h"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise PrometheusError(f"prometheus exited with {self.proc.returncode}: "
                                      f"see {self.dir / 'prometheus.log'}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        return self
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                raise PrometheusError(f"prometheus not ready after {timeout}s")
            time.sleep(0.2)

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                body = json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{url}: {exc.code} {exc.read()[:300]!r}") from None
        if body.get("status") != "success":
            raise PrometheusError(f"{url}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's vector: [{"metric": {labels}, "value": [time, "string"]}]."""
        return self._get("/api/v1/query", {"query": expr})["result"]

    def targets(self) -> list[dict[str, Any]]:
        return self._get("/api/v1/targets", {})["activeTargets"]

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
