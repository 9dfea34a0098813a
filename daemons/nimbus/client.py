"""A small client for nimbus's HTTP JSON API (the CLI, standby nimbuses, supervisors).

Standard library only (urllib), so the CLI starts fast. A write sent to a standby nimbus
(or a read only the leader answers: a topology's status) gets 503 with the leader's address;
the client retries it once at that leader.
"""
from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.message import Message
from typing import Any

from squall.daemons.nimbus.access import AccessError, ApiAccess
from squall.errors import SquallError

API = "/api/v1"
PLAIN_TO_TLS = b"only speaks HTTPS"  # how squall.daemons.http answers plain HTTP on its TLS port


class NimbusError(SquallError, RuntimeError):
    """Nimbus answered with an error; ``status`` is the HTTP status, ``body`` its JSON."""

    def __init__(self, message: str, status: int, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = dict(body or {})


class NimbusUnavailable(NimbusError):
    """Nimbus could not be reached at all (refused, timed out, no such host)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 0)


class NimbusClient:
    """Calls one nimbus at ``host:port`` with ``access`` (token, TLS); every method raises
    NimbusError on failure."""

    def __init__(self, host: str, port: int, timeout: float = 30.0, access: ApiAccess | None = None) -> None:
        self.host, self.port, self.timeout = host, int(port), timeout
        self.access = access or ApiAccess()

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], timeout: float = 30.0) -> NimbusClient:
        try:
            access = ApiAccess.from_conf(conf)
        except AccessError as exc:
            raise NimbusError(str(exc), 0) from None
        return cls(str(conf["nimbus.host"]), int(conf["nimbus.port"]), timeout, access)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # -- API ------------------------------------------------------------------------
    def submit(self, name: str, bundle: bytes) -> dict[str, Any]:
        query = urllib.parse.urlencode({"name": name})
        return self._json("POST", f"/topologies?{query}", bundle, "application/gzip")

    def kill(self, name: str, wait_secs: float | None = None) -> dict[str, Any]:
        body = {} if wait_secs is None else {"wait_secs": wait_secs}
        return self._post(f"/topologies/{_q(name)}/kill", body)

    def activate(self, name: str) -> dict[str, Any]:
        return self._post(f"/topologies/{_q(name)}/activate", {})

    def deactivate(self, name: str) -> dict[str, Any]:
        return self._post(f"/topologies/{_q(name)}/deactivate", {})

    def rebalance(self, name: str, num_workers: int | None = None,
                  executors: Mapping[str, int] | None = None,
                  wait_secs: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if num_workers is not None:
            body["num_workers"] = num_workers
        if executors:
            body["executors"] = dict(executors)
        if wait_secs is not None:
            body["wait_secs"] = wait_secs
        return self._post(f"/topologies/{_q(name)}/rebalance", body)

    def topologies(self) -> list[dict[str, Any]]:
        return self._json("GET", "/topologies")["topologies"]

    def topology(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/topologies/{_q(name)}")

    def topology_conf(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/topologies/{_q(name)}/conf")

    def topology_errors(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/topologies/{_q(name)}/errors")

    def worker_log(self, name: str, node: str, port: int, lines: int | None = None,
                   offset: int | None = None, inode: int | None = None) -> dict[str, Any]:
        """A worker's log through nimbus: the last ``lines``, or what follows ``offset``."""
        params = {k: v for k, v in (("lines", lines), ("offset", offset), ("inode", inode)) if v is not None}
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return self._json("GET", f"/topologies/{_q(name)}/logs/{_q(node)}/{int(port)}{query}")

    def cluster(self) -> dict[str, Any]:
        return self._json("GET", "/cluster")

    # -- operating a running topology (squall set-log-level, debug, profile, kill-workers) ----
    def set_log_levels(self, name: str, levels: Mapping[str, str], timeout_secs: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"levels": dict(levels)}
        if timeout_secs is not None:
            body["timeout_secs"] = timeout_secs
        return self._post(f"/topologies/{_q(name)}/log-levels", body)

    def debug(self, name: str, component: str | None, percent: float,
              timeout_secs: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"component": component, "percent": percent}
        if timeout_secs is not None:
            body["timeout_secs"] = timeout_secs
        return self._post(f"/topologies/{_q(name)}/debug", body)

    def debug_samples(self, name: str, component: str | None = None, limit: int = 100) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit}
        if component is not None:
            params["component"] = component
        return self._json("GET", f"/topologies/{_q(name)}/debug?{urllib.parse.urlencode(params)}")

    def profile(self, name: str, worker: str, kind: str, secs: float | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"worker": worker, "kind": kind}
        if secs is not None:
            body["secs"] = secs
        return self._post(f"/topologies/{_q(name)}/profiles", body)

    def profile_result(self, name: str, profile_id: str) -> dict[str, Any]:
        return self._json("GET", f"/topologies/{_q(name)}/profiles/{_q(profile_id)}")

    def kill_workers(self, name: str) -> dict[str, Any]:
        return self._post(f"/topologies/{_q(name)}/kill-workers", {})

    def operations(self, name: str) -> dict[str, Any]:
        return self._json("GET", f"/topologies/{_q(name)}/operations")

    def history(self, name: str, window: int | None = None) -> dict[str, Any]:
        query = f"?window={int(window)}" if window is not None else ""
        return self._json("GET", f"/topologies/{_q(name)}/history{query}")

    def download_bundle(self, topology_id: str) -> tuple[bytes, str]:
        """(bundle bytes, digest from X-Squall-Digest); the caller checks the sha256."""
        status, headers, data = self._request("GET", f"/topologies/{_q(topology_id)}/bundle")
        if status != 200:
            raise _error(status, data, f"{API}/topologies/{topology_id}/bundle")
        return data, headers.get("X-Squall-Digest", "")

    # -- plumbing -------------------------------------------------------------------
    def _post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._json("POST", path, json.dumps(body).encode(), "application/json")

    def _json(self, method: str, path: str, body: bytes | None = None,
              content_type: str | None = None) -> Any:
        status, _, data = self._request(method, path, body, content_type)
        if status == 503 and _leader(data):
            # A standby: send the write (or a read only the leader answers) to the leader it names, once.
            host, _, port = _leader(data).rpartition(":")
            if (host, port) != (self.host, str(self.port)) and port.isdigit():
                status, _, data = NimbusClient(host, int(port), self.timeout, self.access)._request(
                    method, path, body, content_type)
        if status >= 400:
            raise _error(status, data, API + path.split("?")[0])
        try:
            return json.loads(data)
        except ValueError:
            raise NimbusError(f"nimbus at {self.address} sent a reply that is not JSON", status) from None

    def _request(self, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None) -> tuple[int, Message, bytes]:
        url = f"{self.access.scheme}://{self.address}{API}{path}"
        req = urllib.request.Request(url, data=body, method=method, headers=self.access.headers())
        if content_type:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self.access.ssl_context) as resp:
                return resp.status, resp.headers, resp.read()
        except urllib.error.HTTPError as exc:
            with exc:
                data = exc.read()
            if exc.code == 400 and PLAIN_TO_TLS in data:
                raise NimbusUnavailable(f"nimbus at {self.address} serves HTTPS only: set nimbus.tls.ca.file "
                                        "to the CA that signed its certificate") from None
            return exc.code, exc.headers, data
        except (urllib.error.URLError, OSError) as exc:
            if (tls := self.access.explain(exc, self.address)) is not None:
                raise NimbusUnavailable(tls) from None
            raise self._unreachable(exc) from None

    def _unreachable(self, exc: OSError) -> NimbusUnavailable:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return NimbusUnavailable(f"nimbus at {self.address} did not answer within {self.timeout:g}s")
        text = getattr(reason, "strerror", None) or str(reason)
        hint = ""
        if self.access.ssl_context is None and isinstance(reason, (ConnectionResetError, BrokenPipeError)):
            hint = " (a nimbus that serves HTTPS only does this: set nimbus.tls.ca.file)"
        if isinstance(exc, urllib.error.URLError):
            return NimbusUnavailable(f"cannot reach nimbus at {self.address}: {text}{hint}")
        # e.g. the server closed the connection while we were still sending a large body
        return NimbusUnavailable(f"connection to nimbus at {self.address} failed: {text}{hint}")


def _q(part: str) -> str:
    return urllib.parse.quote(part, safe="")


def _leader(data: bytes) -> str:
    try:
        body = json.loads(data)
    except ValueError:
        return ""
    leader = body.get("leader") if isinstance(body, dict) else None
    return leader if isinstance(leader, str) else ""


def _error(status: int, data: bytes, what: str) -> NimbusError:
    try:
        body = json.loads(data)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return NimbusError(body["error"], status, body)
    text = data.decode("utf-8", "replace").strip().splitlines()
    return NimbusError(f"nimbus answered {status} for {what}" + (f": {text[0]}" if text else ""), status)
