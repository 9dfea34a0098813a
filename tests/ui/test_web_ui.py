"""The web UI in a real headless Chromium against a live cluster (ZooKeeper, nimbus, two
supervisors, worker processes), and worker logs read through nimbus.

The browser is driven over the DevTools protocol (``support.browser``): pages are
loaded, read and clicked like a user would, and the numbers on them are checked against
``squall status --json``. Screenshots of every page are saved under ``out/web-ui/`` in the
repository (git-ignored), or under ``$SQUALL_TEST_OUT/web-ui``.
"""
from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from squall.daemons.nimbus.process import NimbusProcess
from squall.testing.cluster import ProcessCluster
from squall.testing.zookeeper import authenticated_client
from support.browser import HeadlessChromium, find_chromium
from support.paths import CLUSTER_TOPOLOGIES, REPO

pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(find_chromium() is None, reason="chromium is not installed")]

TOPOLOGY = CLUSTER_TOPOLOGIES / "observed.py"
SHOTS = Path(os.environ.get("SQUALL_TEST_OUT") or REPO / "out") / "web-ui"
LOG_MAX_BYTES = 16384
LOG_BACKUPS = 2
COUNTERS = ("tasks", "emitted", "executed", "acked", "failed")


@pytest.fixture(scope="module")
def cluster(zk_server, tmp_path_factory) -> Iterator[ProcessCluster]:
    root = f"/t-{uuid.uuid4().hex[:12]}"
    c = ProcessCluster(zk_server.port, root, tmp_path_factory.mktemp("ui") / "cluster", supervisors=2, slots=2,
                       conf={"worker.log.max.bytes": LOG_MAX_BYTES, "worker.log.backups": LOG_BACKUPS})
    try:
        c.start()
        yield c
    finally:
        c.stop()
        zk = authenticated_client(zk_server.hosts, c.common)
        try:
            zk.delete(root, recursive=True)
        finally:
            zk.stop()
            zk.close()


@pytest.fixture
def browser(cluster) -> Iterator[HeadlessChromium]:
    # The cluster's nimbus serves TLS with a certificate of its own CA: trust that key only.
    with HeadlessChromium(width=1400, height=1000, trust_spki=[cluster.credentials.nimbus_spki()]) as b:
        yield b


def paste_token(b: HeadlessChromium, token: str) -> None:
    b.type_text("#token", token)
    b.click("#token-save")
    b.wait_for(f"sessionStorage.getItem('squall.token') === {json.dumps(token)}", "the token to be kept")


def submit(cluster: ProcessCluster, name: str, *conf: str) -> None:
    args = [a for kv in conf for a in ("-c", kv)]
    res = cluster.cli("submit", str(TOPOLOGY), "--name", name, *args)
    assert res.returncode == 0, res.stdout + res.stderr


def status_json(cluster: ProcessCluster, name: str) -> dict[str, Any]:
    res = cluster.cli("status", name, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def running(cluster: ProcessCluster, name: str) -> dict[str, Any] | None:
    """The status once every executor reports stats and the spout has emitted."""
    st = cluster.client.topology(name)
    execs = [ex for c in st["components"] for ex in c["executors"]]
    spout = next(c for c in st["components"] if c["id"] == "numbers")
    return st if all(ex["uptime"] is not None for ex in execs) and spout["emitted"] > 0 else None


def counters(st: dict[str, Any]) -> dict[str, tuple]:
    """What the component table shows, by component."""
    return {c["id"]: (len(c["executors"]), *(c[k] for k in COUNTERS), c["capacity"],
                      c["execute_latency_ms"], c["complete_latency_ms"]) for c in st["components"]}


def fmt_int(v: int) -> str:
    return f"{v:,}"


def fmt_fixed(v: float | None, digits: int) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


ROWS_JS = """(() => {
  const out = {};
  for (const row of document.querySelectorAll('[data-row]')) {
    const cells = {};
    for (const c of row.querySelectorAll('[data-col]')) cells[c.dataset.col] = c.textContent.trim();
    (out[row.dataset.row] = out[row.dataset.row] || []).push(cells);
  }
  return out;
})()"""


def page_rows(b: HeadlessChromium) -> dict[str, list[dict[str, str]]]:
    return b.evaluate(ROWS_JS)


def render(b: HeadlessChromium) -> None:
    """Refresh the page now and wait until it has rendered the new data."""
    b.evaluate("window.squallUI.refresh()", await_promise=True)


def settled(cluster: ProcessCluster, name: str, timeout: float = 40) -> dict[str, Any]:
    """Wait until the counters stop changing (a deactivated topology drains); the status."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        st = cluster.client.topology(name)
        now = counters(st)
        if now == last:
            return st
        last = now
        time.sleep(2.5)  # more than a stats period (task.heartbeat.frequency.secs: 1)
    raise AssertionError(f"counters of {name} still changing after {timeout}s: {last}")


@pytest.fixture
def standby(cluster, tmp_path) -> Iterator[NimbusProcess]:
    """A second nimbus on the same cluster: it stands by while the first one leads."""
    proc = NimbusProcess({k: v for k, v in cluster.common.items() if k != "nimbus.port"}, tmp_path / "standby",
                         credentials=cluster.credentials)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_cluster_and_topology_pages_actions_and_worker_log(cluster, browser, standby):
    name = "observed"
    submit(cluster, name)
    cluster.wait_for(lambda: running(cluster, name), 60, "all executors reporting")
    cluster.wait_for(lambda: any("no moons here" in e["error"] for e in cluster.client.topology_errors(name)["errors"])
                     and any("round number" in e["error"] for e in cluster.client.topology_errors(name)["errors"]),
                     30, "a reported error and a raised one")
    base = f"https://127.0.0.1:{cluster.common['nimbus.port']}"

    # -- the cluster page: the UI's files load without a token, its data does not -----------
    browser.open(base + "/")
    browser.wait_for("document.getElementById('banner').textContent.includes('paste an API token')",
                     "the page asking for a token")
    assert browser.evaluate("Number(document.body.dataset.renders || 0)") == 0
    paste_token(browser, cluster.credentials.admin_token)
    browser.wait_for("Number(document.body.dataset.renders || 0) >= 1", "the cluster page")
    rows = page_rows(browser)
    info = cluster.client.cluster()
    assert rows[f"nimbus:{info['nimbus']['leader']}"][0]["role"] == "leader"
    assert rows[f"nimbus:{standby.address}"][0]["role"] == "standby"
    for sup in info["supervisors"]:
        row = rows[f"supervisor:{sup['id']}"][0]
        assert (row["slots"], row["used"], row["free"]) == (str(sup["slots"]), str(sup["used"]), str(sup["free"]))
    assert sum(int(r[0]["used"]) for k, r in rows.items() if k.startswith("supervisor:")) == 2
    topo = rows[f"topology:{name}"][0]
    listed = next(t for t in cluster.client.topologies() if t["name"] == name)
    assert (topo["status"], topo["workers"], topo["executors"]) == ("active", "2", str(listed["executors"]))
    browser.screenshot(SHOTS / "cluster.png")

    # -- the topology page, reached by clicking its link ----------------------------------
    browser.click(f'[data-row="topology:{name}"] a')
    browser.wait_for("document.getElementById('topology-name') && "
                     "document.querySelector('[data-row^=\"component:\"]')", "the topology page")
    time.sleep(3)  # edge rates need two samples a few seconds apart
    render(browser)
    st = status_json(cluster, name)
    rows = page_rows(browser)
    assert {k.split(":", 1)[1] for k in rows if k.startswith("component:")} == {c["id"] for c in st["components"]}
    for comp in st["components"]:
        row = rows[f"component:{comp['id']}"][0]
        assert row["executors"] == str(len(comp["executors"])) and row["tasks"] == str(comp["tasks"])
        for ex in comp["executors"]:
            cells = rows[f"executor:{ex['executor'][0]}-{ex['executor'][1]}"][0]
            assert cells["component"] == comp["id"] and cells["where"] == f"{ex['host']}:{ex['port']}"
    last = rows["component:square"][0]["last_error"]  # the newest: one or the other
    assert "round number" in last or "ValueError: no moons here" in last, last
    assert any("round number" in e["error"] for e in rows["error"])
    # An exception in user code: the row opens on its traceback, down to the user's line.
    raised = [e["error"] for e in rows["error"] if "ValueError: no moons here" in e["error"]]
    assert raised and "Traceback (most recent call last):" in raised[0], rows["error"]
    assert "in look_for_moons" in raised[0] and "observed.py" in raised[0], raised[0]
    assert rows["conf:topology.max.spout.pending"][0]["value"] == "200"
    edges = browser.evaluate("[...document.querySelectorAll('g.edge')].map(g => "
                             "[g.dataset.from, g.dataset.to, g.querySelector('text').dataset.rate])")
    assert sorted((f, t) for f, t, _ in edges) == [("numbers", "square"), ("square", "total")]
    assert all(rate and float(rate) > 0 for _, _, rate in edges), edges  # tuples are flowing
    browser.screenshot(SHOTS / "topology-active.png")

    # -- deactivate with confirmation -----------------------------------------------------
    browser.click("#action-deactivate")
    browser.wait_for("!document.getElementById('confirm').hidden", "the confirmation dialog")
    assert "Deactivate topology observed" in browser.evaluate("document.getElementById('confirm-text').textContent")
    browser.screenshot(SHOTS / "confirm-deactivate.png")
    browser.click("#confirm-ok")
    browser.wait_for("document.querySelector('#summary-status .status').textContent === 'inactive'",
                     "the page to show the topology inactive")
    assert status_json(cluster, name)["status"] == "inactive"

    # -- once the counters settle, the page shows exactly what `squall status --json` does --
    for _ in range(3):
        settled(cluster, name)
        render(browser)
        st = status_json(cluster, name)
        rows = page_rows(browser)
        if counters(st) == counters(cluster.client.topology(name)):
            break
    for comp in st["components"]:
        row = rows[f"component:{comp['id']}"][0]
        assert [row[k] for k in COUNTERS] == [fmt_int(comp[k]) for k in COUNTERS], (comp["id"], row, comp)
        assert row["capacity"] == fmt_fixed(comp["capacity"], 3)
        assert row["execute_latency_ms"] == fmt_fixed(comp["execute_latency_ms"], 4)
        assert row["complete_latency_ms"] == fmt_fixed(comp["complete_latency_ms"], 3)
        for ex in comp["executors"]:
            cells = rows[f"executor:{ex['executor'][0]}-{ex['executor'][1]}"][0]
            assert [cells[k] for k in ("emitted", "executed", "acked", "failed")] == \
                [fmt_int(ex[k]) for k in ("emitted", "executed", "acked", "failed")]
    assert rows["component:numbers"][0]["emitted"] != "0" and rows["component:total"][0]["executed"] != "0"
    browser.screenshot(SHOTS / "topology-inactive.png")

    # -- activate again ------------------------------------------------------------------
    browser.click("#action-activate")
    browser.wait_for("!document.getElementById('confirm').hidden", "the confirmation dialog")
    browser.click("#confirm-ok")
    browser.wait_for("document.querySelector('#summary-status .status').textContent === 'active'",
                     "the page to show the topology active")
    assert status_json(cluster, name)["status"] == "active"

    # -- an executor's log, through its link -----------------------------------------------
    square = next(c for c in st["components"] if c["id"] == "square")["executors"][0]
    browser.click(f'[data-row="executor:{square["executor"][0]}-{square["executor"][1]}"] a.log-link')
    browser.wait_for("(document.getElementById('log-text') || {}).textContent", "the worker log page")
    browser.wait_for("document.getElementById('log-text').textContent.includes('square-marker')",
                     "a marker line printed by the square bolt", timeout=30)
    assert f"on {square['host']}:{square['port']}" in browser.evaluate(
        "document.getElementById('log-info').textContent")
    browser.screenshot(SHOTS / "worker-log.png")

    # -- rebalance onto one worker, at once -------------------------------------------------
    browser.open(f"{base}/#/topology/{name}")
    browser.wait_for("document.querySelector('#summary-status .status')", "the topology page")
    browser.evaluate("document.getElementById('rebalance-workers').value = '1';"
                     "document.getElementById('rebalance-wait').value = '0'")
    browser.click("#action-rebalance")
    browser.wait_for("!document.getElementById('confirm').hidden", "the confirmation dialog")
    assert "over 1 worker?" in browser.evaluate("document.getElementById('confirm-text').textContent")
    browser.click("#confirm-ok")
    browser.wait_for("document.getElementById('summary-workers').textContent.includes('requested 1')",
                     "the page to show one requested worker")
    cluster.wait_for(lambda: len(status_json(cluster, name)["workers"]) == 1, 30, "one worker")

    # -- a pasted API token is kept for the tab and sent with every request ----------------
    browser.call("Network.enable")
    paste_token(browser, "tok-123")
    render(browser)
    sent = browser.requests("/api/v1/topologies/")
    assert sent and sent[-1]["headers"].get("Authorization") == "Bearer tok-123"
    assert browser.evaluate("document.getElementById('token').value") == ""  # not left on the page
    browser.click("#token-clear")
    browser.wait_for("sessionStorage.getItem('squall.token') === null", "the token to be forgotten")
    browser.events.clear()
    render(browser)
    after = browser.requests("/api/v1/")
    assert after and all("Authorization" not in r["headers"] for r in after)
    browser.call("Network.disable")
    before = browser.evaluate("Number(document.body.dataset.renders || 0)")
    paste_token(browser, cluster.credentials.admin_token)  # the actions below need it again
    browser.wait_for(f"Number(document.body.dataset.renders || 0) > {before} && "
                     "document.getElementById('banner').hidden", "the page loaded with the admin token")

    # -- kill with a wait, confirmed -------------------------------------------------------
    browser.evaluate("document.getElementById('kill-wait').value = '0'")
    browser.click("#action-kill")
    browser.wait_for("!document.getElementById('confirm').hidden", "the confirmation dialog")
    assert "removed after 0s" in browser.evaluate("document.getElementById('confirm-text').textContent")
    browser.click("#confirm-ok")
    browser.wait_for("document.getElementById('gone')", "the page to say the topology is gone", timeout=30)
    assert all(t["name"] != name for t in cluster.client.topologies())


def test_squall_logs_rotation_follow_and_logviewer_auth(cluster):
    name = "logged"
    submit(cluster, name, "test.print.every=1", "test.rate=3000")
    st = cluster.wait_for(lambda: running(cluster, name), 60, "all executors reporting")
    square = next(c for c in st["components"] if c["id"] == "square")
    task = square["executors"][-1]["executor"][0]

    # The worker rotates its own log: current file plus LOG_BACKUPS, each within the bound.
    def rotated() -> list[Path]:
        files = []
        for i in range(cluster.n_supervisors):
            files += list((cluster.supervisor_dir(i) / "workers").glob("*/worker.log*"))
        return files if any(p.name == f"worker.log.{LOG_BACKUPS}" for p in files) else []
    files = cluster.wait_for(rotated, 30, "a worker log rotated twice")
    assert not any(p.name == f"worker.log.{LOG_BACKUPS + 1}" for p in files)
    for p in files:
        if p.name != "worker.log":
            assert p.stat().st_size <= LOG_MAX_BYTES, (p, p.stat().st_size)

    # `squall logs --task` shows that task's worker log, from the CLI machine, through nimbus.
    res = cluster.cli("logs", name, "--task", str(task), "--lines", "40")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 40 and any(f"square-marker task={task} " in line for line in lines), res.stdout[-2000:]
    res = cluster.cli("logs", name, "--component", "nope")
    assert res.returncode == 1 and "has no component 'nope'" in res.stderr

    # --follow keeps printing new lines.
    env = {**os.environ, "SQUALL_CONF": str(cluster.client_conf)}
    follow = subprocess.Popen([sys.executable, "-m", "squall.cli", "logs", name, "--task", str(task), "-n", "1",
                               "--follow"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    try:
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 50 and time.monotonic() < deadline:
            line = follow.stdout.readline()
            if f"square-marker task={task} " in line:
                seen.append(int(line.rsplit("n=", 1)[1]))
        assert len(seen) >= 50 and seen[-1] > seen[0], seen[:5]
    finally:
        follow.terminate()
        follow.wait(10)

    # The logviewer itself takes the API's tokens (as published by nimbus) over TLS, and
    # serves only known workers' logs.
    placed = square["executors"][-1]
    sup = next(s for s in cluster.client.cluster()["supervisors"] if s["id"] == placed["node"])
    url = f"https://127.0.0.1:{sup['logviewer_port']}/logs"
    ctx = ssl.create_default_context(cafile=str(cluster.credentials.ca_file))
    admin = cluster.credentials.admin_token
    other = cluster.credentials.add_user("mallory", "user")
    worker = f"/{st['id']}/{placed['port']}"
    cluster.wait_for(lambda: _log_status(url + worker, other, ctx) == 404, 20,
                     "mallory's token known and refused (another user's topology: as if missing)")
    for path, token, code in [(worker, None, 401), (worker, "wrong-" + admin, 401), (worker, admin, 200),
                              ("/..%2F..%2Fsupervisor-conf.yaml/1", admin, 404), (f"/{st['id']}/1", admin, 404)]:
        assert _log_status(url + path, token, ctx) == code, (path, code)
    # Revoked on nimbus (its token file), refused by the supervisor within seconds.
    res = cluster.cli("token", "remove", "--file", str(cluster.credentials.tokens_file), "--user", "mallory")
    assert res.returncode == 0, res.stderr
    cluster.wait_for(lambda: _log_status(url + worker, other, ctx) == 401, 20, "mallory's token revoked")
    with pytest.raises(urllib.error.HTTPError) as plain:  # plain HTTP to the TLS port: told so
        urllib.request.urlopen(url.replace("https", "http") + worker, timeout=10)
    assert plain.value.code == 400
    # User code runs in the workers: their copy of the config carries no token.
    for i in range(cluster.n_supervisors):
        conf_text = (cluster.supervisor_dir(i) / "supervisor-conf.yaml").read_text()
        assert cluster.credentials.supervisor_token not in conf_text and admin not in conf_text
    res = cluster.cli("kill", name, "--wait", "0")
    assert res.returncode == 0, res.stderr


def _log_status(url: str, token: str | None, ctx: ssl.SSLContext) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_topology_page_history_windows_debug_profiles_and_grouped_errors(cluster, browser):
    name = "operated-ui"
    res = cluster.cli("submit", str(CLUSTER_TOPOLOGIES / "operated.py"), "--name", name)
    assert res.returncode == 0, res.stdout + res.stderr
    base = f"https://127.0.0.1:{cluster.common['nimbus.port']}"
    browser.open(f"{base}/#/topology/{name}")
    paste_token(browser, cluster.credentials.admin_token)
    browser.wait_for("document.querySelector('[data-row=\"component:numbers\"]')", "the topology page")

    # -- the plot: the topology's throughput, latency and failures over time -----------------
    def plotted() -> bool:
        render(browser)
        return browser.evaluate("Number((document.querySelector('[data-chart=\"throughput\"]') || "
                                "{dataset: {}}).dataset.points || 0) >= 2")
    cluster.wait_for(plotted, 60, "two points of throughput on the plot", interval=1)
    charts = browser.evaluate("[...document.querySelectorAll('svg.chart')].map(c => "
                              "[c.dataset.chart, c.querySelectorAll('path.series').length])")
    assert charts == [["throughput", 2], ["latency", 1], ["failures", 1]]
    # The newest point is the rate since the point before it: one that no worker report reached
    # yet (a late beat on a loaded host) reads 0 until the next report lands.
    def newest_flows() -> bool:
        newest = cluster.client.history(name)["topology"][-1]
        return newest["emitted_per_sec"] > 0 and (newest["complete_latency_ms"] or 0) > 0
    cluster.wait_for(newest_flows, 30, "the newest history point showing throughput and latency", interval=1)

    # -- the component table over Storm's windows ------------------------------------------
    rows = page_rows(browser)
    assert float(rows["component:numbers"][0]["window_emitted"].replace(",", "")) > 0
    assert rows["component:square"][0]["window_execute_ms"] != "–"
    browser.evaluate("const w = document.getElementById('window'); w.value = 'all';"
                     "w.dispatchEvent(new Event('change'))")
    browser.wait_for("!document.querySelector('[data-row=\"component:numbers\"] [data-col=\"window_emitted\"]')",
                     "the all-time window (counts, no rates)")
    browser.screenshot(SHOTS / "topology-history.png")

    # -- debug: sample square's emits from the page ------------------------------------------
    browser.evaluate("document.getElementById('debug-component').value = 'square';"
                     "document.getElementById('debug-percent').value = '100'")
    render(browser)  # what the operator chose survives the page's refresh
    browser.click("#debug-start")
    browser.wait_for("document.getElementById('debug-state').textContent.includes('square: 100%')",
                     "the page to say square is sampled")

    def sampled() -> list:
        render(browser)
        return page_rows(browser).get("sample")
    samples = cluster.wait_for(sampled, 40, "sampled tuples on the page", interval=1)
    assert {s["component"] for s in samples} == {"square"} and {s["stream"] for s in samples} == {"default"}
    first = json.loads(samples[0]["values"])
    assert first[1] == first[0] ** 2
    browser.click("#debug-stop")
    browser.wait_for("document.getElementById('debug-state').textContent === 'Nothing is sampled.'",
                     "sampling stopped")

    # -- a profile asked for and downloaded ---------------------------------------------------
    browser.evaluate("document.getElementById('profile-kind').value = 'heap';"
                     "document.getElementById('profile-secs').value = '1'")
    render(browser)
    browser.click("#profile-ask")
    browser.wait_for("document.querySelector('[data-row^=\"profile:\"] button.profile-download')",
                     "the profile listed")

    def downloaded() -> str | None:
        browser.evaluate("window.squallLastProfile = null")
        browser.click("[data-row^='profile:'] button.profile-download")
        time.sleep(0.5)
        return browser.evaluate("window.squallLastProfile && window.squallLastProfile.text")
    text = cluster.wait_for(downloaded, 40, "the profile downloaded", interval=1)
    assert "allocations traced over 1s (tracemalloc)" in text

    # -- identical errors once, with a count ------------------------------------------------
    def grouped() -> list:
        render(browser)
        rows = page_rows(browser).get("error") or []
        return rows if rows and int(rows[0]["count"].rstrip("+")) >= 2 else None  # 10+: older ones let go
    errors = cluster.wait_for(grouped, 40, "the same error twice, grouped", interval=1)
    assert len(errors) == 1 and errors[0]["component"] == "square"
    assert errors[0]["error"].startswith("ValueError: four hundred is too round")
    browser.screenshot(SHOTS / "topology-operate.png")
    assert cluster.cli("kill", name, "--wait", "0").returncode == 0
