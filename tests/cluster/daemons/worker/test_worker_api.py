"""Storm's worker API in real worker processes: worker hooks (a file written at each
worker's start and shutdown, a resource its tasks read), and a metrics consumer handed the
data points of a registered metric and of every worker's __system task. A hook that
raises or hangs is reported and neither ends a worker nor holds its shutdown past the
hook time bound."""
import json
import os

import pytest

from squall.testing.cluster import ProcessCluster
from squall.testing.components import recorded_metrics
from support.paths import CLUSTER_TOPOLOGIES

pytestmark = pytest.mark.cluster

TOPOLOGY = CLUSTER_TOPOLOGIES / "worker_api.py"
N = 3000
CONSUMER = "squall.testing.components.RecordingMetricsConsumer"


def submit(cluster, name, out, hostile=False):
    register = [{"class": CONSUMER, "argument": {"folder": str(out / "metrics")}, "parallelism.hint": 2}]
    os.environ["WORKER_API_HOSTILE"] = "1" if hostile else "0"
    try:
        res = cluster.cli("submit", str(TOPOLOGY), "--name", name, "-c", "topology.workers=2",
                          "-c", f"test.output.dir={out}", "-c", f"test.numbers={N}",
                          "-c", f"topology.metrics.consumer.register={json.dumps(register)}",
                          "-c", "topology.builtin.metrics.bucket.size.secs=1",
                          "-c", "topology.worker.hook.shutdown.timeout.secs=0.5")
    finally:
        os.environ.pop("WORKER_API_HOSTILE")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.fixture
def cluster(zk_server, zk_root, tmp_path):
    """Two supervisors whose kill grace (SIGTERM to SIGKILL) is long, so that a worker's
    own shutdown, hooks included, is what ends it."""
    c = ProcessCluster(zk_server.port, zk_root, tmp_path / "cluster", supervisors=2, slots=2,
                       conf={"supervisor.worker.shutdown.sleep.secs": 10})
    try:
        yield c.start()
    finally:
        c.stop()


def files(out, kind):
    found = {}
    for path in out.glob(f"{kind}-*.json"):
        try:
            found[int(path.stem.split("-", 1)[1])] = json.loads(path.read_text())
        except ValueError:  # being written
            continue
    return found


def seen_total(out):
    return sum(p.value for info, points in recorded_metrics(out / "metrics") for p in points
               if info.src_component_id == "count" and p.name == "seen")


@pytest.mark.timeout(300)
def test_hooks_resources_and_a_metrics_consumer_in_worker_processes(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    submit(cluster, "wapi", out)
    pids = cluster.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(set(cluster.worker_pids().values())),
                            60, "two workers")
    starts = cluster.wait_for(lambda: (lambda f: f if set(f) == pids else None)(files(out, "start")), 60,
                              "a start file from each worker")
    cluster.wait_for(lambda: seen_total(out) == N, 90, f"the consumer counting all {N} tuples")
    cluster.wait_for(lambda: {i.src_worker_port for i, ps in recorded_metrics(out / "metrics")
                              if i.src_component_id == "__system" and any(p.name == "uptimeSecs" for p in ps)}
                     == {s["port"] for s in starts.values()}, 30, "worker metrics from both workers")
    # The __system task's own metrics are in the supervisors' /metrics too, with everything else.
    token = cluster.credentials.add_user("prom", "viewer")
    text = cluster.wait_for(lambda: (lambda t: t if 'component="__system"' in t else None)(cluster.scrape(token)),
                            30, "__system's metrics in /metrics")
    assert "squall_metric_uptimeSecs{" in text and 'squall_metric_seen_total{component="count"' in text
    tasks = [json.loads(p.read_text()) for p in out.glob("task-*.json")]
    assert len(tasks) == 2
    for task in tasks:  # each task read the resource its own worker's hook set
        assert task["resource"] == {"pid": task["pid"], "port": starts[task["pid"]]["port"]}
    assert files(out, "shutdown") == {}
    res = cluster.cli("kill", "wapi", "--wait", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    stops = cluster.wait_for(lambda: (lambda f: f if set(f) == pids else None)(files(out, "shutdown")), 60,
                             "a shutdown file from each worker")
    assert {s["port"] for s in stops.values()} == {s["port"] for s in starts.values()}
    points = recorded_metrics(out / "metrics")
    consumers = {(i.src_component_id, i.src_task_id) for i, _ in points if i.src_component_id.startswith("__metrics")}
    assert len(consumers) == 2  # the consumer's own two tasks report their counters too


@pytest.mark.timeout(300)
def test_hooks_that_raise_or_hang_are_reported_and_never_end_a_worker(cluster, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    submit(cluster, "hostile", out, hostile=True)
    pids = cluster.wait_for(lambda: (lambda p: p if len(p) == 2 else None)(set(cluster.worker_pids().values())),
                            60, "two workers")
    cluster.wait_for(lambda: seen_total(out) == N, 90, f"all {N} tuples counted despite the raising hook")
    errors = cluster.wait_for(lambda: (lambda r: r if "hook start failed on purpose" in r.stdout else None)(
        cluster.cli("errors", "hostile")), 30, "the hook's error in squall errors")
    assert "worker hook RaisesAtStart raised in start" in errors.stdout
    assert set(cluster.worker_pids().values()) == pids  # no worker ended or restarted
    res = cluster.cli("kill", "hostile", "--wait", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    cluster.wait_for(lambda: not (pids & set(cluster.worker_pids().values())), 60, "the workers gone")
    assert set(files(out, "shutdown")) == pids  # the well-behaved hook before it ran
    # Each worker reported the hung hook after topology.worker.hook.shutdown.timeout.secs and
    # then finished its shutdown itself: neither the supervisor's SIGKILL (10 s) nor the
    # worker's own stop deadline (15 s) ended it, or it would never log "worker shut down".
    logs = {}
    for path in cluster.base.rglob("*.log*"):
        text = path.read_text(errors="replace")
        if "worker hook HangsAtShutdown did not finish its shutdown" in text:
            logs[path] = text
    assert len(logs) == 2, sorted(map(str, logs))
    assert all("worker shut down" in text.split("did not finish its shutdown", 1)[1] for text in logs.values())
