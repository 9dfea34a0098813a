"""The nimbus API's locks, tried from outside: tokens and roles, TLS, what bundles carry,
and what a supervisor accepts when it unpacks one.

A real nimbus process against the session's ZooKeeper: every hostile request is refused
with nothing changed. The policy itself (``authorize``, token files, ignore rules) is tested
without sockets in tests/unit/daemons/nimbus/test_api_policy.py.
"""
from __future__ import annotations

import io
import json
import os
import socket
import stat
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import structlog
import structlog.testing
import yaml

from squall.daemons.nimbus.client import NimbusClient, NimbusError, NimbusUnavailable
from squall.daemons.nimbus.credentials import create
from squall.daemons.nimbus.process import NimbusProcess
from squall.daemons.state import ClusterState
from squall.daemons.supervisor.downloads import BundleError, CodeDownloads
from squall.testing.waiting import wait_for
from support.bundles import make_bundle


def snapshot(state: ClusterState, nimbus: NimbusProcess) -> Any:
    """Everything a request could change: topologies, assignments and stored code."""
    infos = {k: (v.status, v.num_workers, v.component_parallelism, v.owner) for k, v in state.topologies().items()}
    code = sorted(p.name for p in nimbus.code_dir.iterdir()) if nimbus.code_dir.exists() else []
    return infos, sorted(state.assignment_ids()), code


def request(nimbus: NimbusProcess, method: str, path: str, token: str | None, body: bytes = b"{}") -> tuple[int, dict]:
    conn = nimbus.connection()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        conn.request(method, "/api/v1" + path, body=body if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def plain_http(nimbus: NimbusProcess, raw: bytes) -> bytes:
    """Send ``raw`` over plain TCP to nimbus's port; what comes back until it closes."""
    with socket.create_connection((nimbus.conf["nimbus.host"], nimbus.conf["nimbus.port"]), timeout=10) as sock:
        sock.sendall(raw)
        got = b""
        while chunk := sock.recv(65536):  # ConnectionResetError here: the answer was lost
            got += chunk
    return got


@pytest.fixture
def secured(cluster_conf: dict[str, Any], tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A nimbus with users alice and bob (role user), val (viewer), and one topology each
    for alice and bob."""
    creds = create(tmp_path / "security")
    tokens = {"admin": creds.admin_token, "supervisor": creds.supervisor_token,
              **{user: creds.add_user(user, role) for user, role in
                 (("alice", "user"), ("bob", "user"), ("val", "viewer"))}}
    nimbus = NimbusProcess({**cluster_conf, "nimbus.monitor.freq.secs": 0.3}, tmp_path / "nimbus",
                           credentials=creds).start(leader=True)
    state = ClusterState(cluster_conf).start()
    try:
        ids = {user: nimbus.client(token=tokens[user]).submit(
                   f"{user}-topo", make_bundle(tmp_path / user, f"{user}-topo"))["id"] for user in ("alice", "bob")}
        yield {"nimbus": nimbus, "state": state, "tokens": tokens, "ids": ids, "creds": creds}
    finally:
        state.close()
        assert nimbus.stop() == 0, nimbus.log_tail()


def routes(ids: dict[str, str], bundle: bytes) -> list[tuple[str, str, bytes, bool]]:
    """(method, path, body, is a write) for every route, aimed at alice's topology."""
    a = "alice-topo"
    return [
        ("GET", "/topologies", b"", False),
        ("GET", "/cluster", b"", False),
        ("GET", f"/topologies/{a}", b"", False),
        ("GET", f"/topologies/{ids['alice']}/bundle", b"", False),
        ("POST", "/topologies?name=intruder", bundle, True),
        ("POST", f"/topologies/{a}/kill", b'{"wait_secs": 0}', True),
        ("POST", f"/topologies/{a}/deactivate", b"{}", True),
        ("POST", f"/topologies/{a}/activate", b"{}", True),
        ("POST", f"/topologies/{a}/rebalance", b'{"num_workers": 3, "wait_secs": 0}', True),
    ]


def test_hostile_requests_are_refused_and_change_nothing(secured, tmp_path):
    nimbus, state, tokens, ids = secured["nimbus"], secured["state"], secured["tokens"], secured["ids"]
    before = snapshot(state, nimbus)
    assert before[0][ids["alice"]][3] == "alice"
    bundle = make_bundle(tmp_path / "intruder", "intruder")
    expected = {401: 0, 403: 0, 404: 0}
    for method, path, body, write in routes(ids, bundle):
        for token in (None, "not-a-token", tokens["alice"] + "x"):
            code, reply = request(nimbus, method, path, token, body)
            assert code == 401, (method, path, token, code, reply)
            expected[401] += 1
        if path.startswith("/topologies/"):  # another user's topology: as if it did not exist
            name = path.split("/")[2]
            code, reply = request(nimbus, method, path, tokens["bob"], body)
            assert (code, reply) == (404, {"error": f"no topology named {name!r}"}), (method, path)
            missing = request(nimbus, method, path.replace(name, "no-such-topo"), tokens["bob"], body)
            assert missing == (404, {"error": "no topology named 'no-such-topo'"}), (method, path)
            expected[404] += 2
        refused_by = ["val"] if write or path.endswith("/bundle") else []  # a viewer writing
        refused_by += ["supervisor"] if not path.endswith("/bundle") else []
        for user in refused_by:
            code, reply = request(nimbus, method, path, tokens[user], body)
            assert code == 403, (method, path, user, code, reply)
            assert user in reply["error"] or user == "supervisor", reply
            expected[403] += 1
        assert snapshot(state, nimbus) == before, (method, path)
    # A name is cluster-wide: bob learns that it is taken, not the topology's id.
    bob = nimbus.client(token=tokens["bob"])
    with pytest.raises(NimbusError) as taken:
        bob.submit("alice-topo", make_bundle(tmp_path / "copy", "alice-topo"))
    assert taken.value.status == 409 and "id" not in (taken.value.body or {}) and ids["alice"] not in str(taken.value)
    info = nimbus.client().cluster()
    counts = info["api"]["refused"]
    assert (counts["unauthenticated"], counts["forbidden"], counts["not-found"]) == \
        (expected[401], expected[403], expected[404]), counts
    assert sum(counts.values()) == sum(expected.values()), counts  # no connection was refused
    assert info["security"] == {"auth": True, "tls": True}
    # It listens on nimbus.host (127.0.0.1) only, not on every interface.
    listening = {c.laddr for c in psutil.Process(nimbus.pid).net_connections("tcp") if c.status == "LISTEN"}
    assert listening == {("127.0.0.1", int(nimbus.conf["nimbus.port"]))}, listening
    # What each may see: bob lists only his own topology, the viewer everything.
    bob = NimbusClient.from_conf({**nimbus.client_conf(tokens["bob"])})
    assert [r["name"] for r in bob.topologies()] == ["bob-topo"]
    viewer = nimbus.client(token=tokens["val"])
    assert [(r["name"], r["owner"]) for r in viewer.topologies()] == [("alice-topo", "alice"), ("bob-topo", "bob")]
    assert viewer.topology("bob-topo")["owner"] == "bob"
    # The owner controls its own topology; `squall list` shows owners.
    assert nimbus.client(token=tokens["alice"]).deactivate("alice-topo")["status"] == "inactive"
    conf = tmp_path / "alice.yaml"
    conf.write_text(yaml.safe_dump({**nimbus.client_conf(), "squall.token": None}))
    env = {**os.environ, "SQUALL_CONF": str(conf), "SQUALL_TOKEN": tokens["val"]}
    out = subprocess.run([sys.executable, "-m", "squall.cli", "list"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    header, *rows = out.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "ID", "OWNER"]
    assert [r.split()[:3] for r in rows] == [["alice-topo", ids["alice"], "alice"], ["bob-topo", ids["bob"], "bob"]]


def test_tls_refuses_a_wrong_ca_and_plain_http(secured, tmp_path):
    nimbus, state, tokens = secured["nimbus"], secured["state"], secured["tokens"]
    before = snapshot(state, nimbus)
    bundle = make_bundle(tmp_path / "x", "x")
    other = create(tmp_path / "other-cluster")  # a CA that did not sign nimbus's certificate
    wrong_ca = NimbusClient.from_conf({**nimbus.client_conf(), "nimbus.tls.ca.file": str(other.ca_file)})
    plain = NimbusClient.from_conf({**nimbus.client_conf(), "nimbus.tls.ca.file": None})
    # (a plain POST may be cut off mid-body: the client then names the setting to fix)
    for client, text in ((wrong_ca, "is not trusted"), (plain, "nimbus.tls.ca.file")):
        for call in (client.topologies, lambda: client.submit("x", bundle), lambda: client.kill("alice-topo", 0)):
            with pytest.raises(NimbusUnavailable) as info:
                call()
            assert text in str(info.value), str(info.value)
    # What curl sends: the 400 arrives whole (not a reset), the body too.
    for raw in (b"GET /api/v1/cluster HTTP/1.1\r\nHost: nimbus\r\nUser-Agent: curl/8\r\nAccept: */*\r\n\r\n",
                b"POST /api/v1/topologies HTTP/1.1\r\nHost: nimbus\r\nContent-Length: 30000\r\n\r\n"
                + b"x" * 30000):
        assert plain_http(nimbus, raw).startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert b"this server only speaks HTTPS on this port" in plain_http(nimbus, raw)
    assert snapshot(state, nimbus) == before
    refused = nimbus.client().cluster()["api"]["refused"]
    assert refused["tls-handshake"] >= 3 and refused["plain-http"] >= 7, refused
    assert refused["unauthenticated"] == refused["forbidden"] == 0, refused
    assert "Traceback" not in nimbus.log_tail(200)
    # A supervisor with the wrong CA, or the right CA and a wrong token, gets no code.
    digest = state.topology(secured["ids"]["alice"]).code_digest
    for conf, text in (({"nimbus.tls.ca.file": str(other.ca_file)}, "is not trusted"),
                       ({"squall.token": tokens["val"]}, "HTTP 403"),
                       ({"squall.token": "forged-token"}, "HTTP 401")):
        downloads = downloader(nimbus, tmp_path / "sup", {**secured["creds"].supervisor_conf(), **conf})
        with pytest.raises(BundleError) as info:
            downloads.fetch(secured["ids"]["alice"], digest, downloads.url(secured["ids"]["alice"]))
        assert text in str(info.value)
        assert not downloads.present(secured["ids"]["alice"], digest)


def downloader(nimbus: NimbusProcess, root: Path, extra: dict[str, Any]) -> CodeDownloads:
    conf = {**nimbus.conf, "squall.token": None, "nimbus.tls.ca.file": None, **extra}
    return CodeDownloads(root, conf, structlog.get_logger("test"), lambda: None)


def test_supervisor_downloads_with_its_token_within_its_limits(secured, tmp_path):
    nimbus, state, ids = secured["nimbus"], secured["state"], secured["ids"]
    digest = state.topology(ids["alice"]).code_digest
    creds = secured["creds"].supervisor_conf()
    for limit, text in (({"supervisor.code.max.members": 3}, "supervisor.code.max.members"),
                        ({"supervisor.code.max.unpacked.bytes": 100}, "supervisor.code.max.unpacked.bytes")):
        downloads = downloader(nimbus, tmp_path / "limited", {**creds, **limit})
        with pytest.raises(BundleError) as info:
            downloads.fetch(ids["alice"], digest, downloads.url(ids["alice"]))
        assert text in str(info.value)
        assert not downloads.present(ids["alice"], digest)
    downloads = downloader(nimbus, tmp_path / "sup", creds)
    downloads.fetch(ids["alice"], digest, downloads.url(ids["alice"]))
    tree = tmp_path / "sup" / ids["alice"]
    assert downloads.present(ids["alice"], digest)
    for path in [tree, *tree.rglob("*")]:  # readable by its owner only
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))


def test_a_hand_made_bundle_with_dotfiles_is_refused(secured, tmp_path):
    nimbus, state = secured["nimbus"], secured["state"]
    good = make_bundle(tmp_path / "hand", "hand")
    with tarfile.open(fileobj=io.BytesIO(good), mode="r:gz") as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    before = snapshot(state, nimbus)
    for extra in ({"code/.env": b"SECRET=1"}, {"code/.git/config": b"[core]"}):
        raw = io.BytesIO()
        with tarfile.open(fileobj=raw, mode="w:gz") as tar:
            for name, data in {**files, **extra}.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        with pytest.raises(NimbusError) as info:
            nimbus.client().submit("hand", raw.getvalue())
        assert info.value.status == 400 and "dot" in str(info.value)
    # A conf.json carrying a client's token (never written by `squall submit`) is refused too.
    leaky = make_bundle(tmp_path / "leaky", "leaky", {"squall.token": "s3cret-token-xyz"})
    with pytest.raises(NimbusError) as info:
        nimbus.client().submit("leaky", leaky)
    assert info.value.status == 400 and "squall.token" in str(info.value)
    assert snapshot(state, nimbus) == before


def test_security_off_is_announced_and_open(cluster_conf, tmp_path):
    nimbus = NimbusProcess({**cluster_conf, "nimbus.auth.enabled": False, "nimbus.auth.tokens.file": "unused"},
                           tmp_path / "open").start()
    try:
        assert nimbus.credentials is None
        assert NimbusClient.from_conf(nimbus.client_conf()).cluster()["security"] == {"auth": False, "tls": False}
        log = nimbus.log_tail(50)
        assert "SECURITY OFF: nimbus.auth.enabled is false" in log and "plain HTTP" in log
        # A client that expects TLS says clearly that this nimbus does not speak it.
        ca = create(tmp_path / "ca").ca_file
        with pytest.raises(NimbusUnavailable) as info:
            NimbusClient.from_conf({**nimbus.client_conf(), "nimbus.tls.ca.file": str(ca)}).cluster()
        assert "does not speak TLS" in str(info.value)
    finally:
        assert nimbus.stop() == 0


def test_token_file_changes_apply_without_a_restart(secured, tmp_path):
    nimbus, tokens, creds = secured["nimbus"], secured["tokens"], secured["creds"]
    carol = creds.add_user("carol", "viewer")  # written while nimbus runs
    wait_for(lambda: _status(nimbus, carol) == 200, timeout=15, what="carol's new token accepted")
    doc = yaml.safe_load(creds.tokens_file.read_text())
    doc["tokens"] = [row for row in doc["tokens"] if row["user"] != "alice"]  # revoke alice
    creds.tokens_file.write_text(yaml.safe_dump(doc))
    wait_for(lambda: _status(nimbus, tokens["alice"]) == 401, timeout=15, what="alice's token revoked")
    creds.tokens_file.write_text("tokens: [oops\n")  # a broken edit: the tokens in force stay
    wait_for(lambda: _status(nimbus, carol) and "token file changed but cannot be used" in nimbus.log_tail(100),
             timeout=15, what="the broken edit noticed")
    assert _status(nimbus, carol) == 200 and _status(nimbus, tokens["alice"]) == 401


def _status(nimbus: NimbusProcess, token: str) -> int:
    return request(nimbus, "GET", "/cluster", token)[0]
