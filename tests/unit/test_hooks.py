"""Worker hooks in local mode: once per worker, start before its tasks open (they find the
resources it set), shutdown after they close; a hook that raises or hangs is reported
under __system and the worker runs on. Hooks travel with the topology."""
import pickle
import threading
import time

import pytest

from squall import Bolt, LocalCluster, Spout, Topology, TopologyBuilder, TopologyError, WorkerHook
from squall.testing.waiting import wait_for

EVENTS: list[tuple] = []
RELEASE = threading.Event()


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.collector, self.i = collector, 0
        EVENTS.append(("open", context.worker_port, context.get_resource("pool")))

    def next_tuple(self):
        if self.i < 20:
            self.i += 1
            self.collector.emit([self.i])

    def declare_output_fields(self, declarer):
        declarer.declare(["n"])


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.context = context
        EVENTS.append(("prepare", context.worker_port, context.get_resource("pool")))

    def execute(self, t):
        self.context.set_resource("last", t.values[0])

    def cleanup(self):
        EVENTS.append(("cleanup", self.context.worker_port, self.context.get_resource("last") is not None))


class Pool(WorkerHook):
    def __init__(self, tag):
        self.tag = tag

    def start(self, conf, context):
        self.port = context.worker_port
        context.set_resource("pool", f"{self.tag}@{context.worker_port}")
        EVENTS.append(("start", self.port, sorted(context.worker_tasks) == context.worker_tasks,
                       conf["topology.name"]))

    def shutdown(self):
        EVENTS.append(("shutdown", self.port))


class Raises(WorkerHook):
    def start(self, conf, context):
        raise RuntimeError("hook start bug")

    def shutdown(self):
        raise RuntimeError("hook shutdown bug")


class Hangs(WorkerHook):
    def start(self, conf, context):
        RELEASE.wait(30)

    def shutdown(self):
        RELEASE.wait(30)


@pytest.fixture(autouse=True)
def fresh():
    EVENTS.clear()
    RELEASE.clear()
    yield
    RELEASE.set()


def build(*hooks):
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("sink", Sink(), 2).shuffle("numbers")
    for hook in hooks:
        b.add_worker_hook(hook)
    return b.build()


def test_hooks_run_once_per_worker_around_its_tasks_which_share_its_resources():
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("h", {"topology.workers": 2}, build(Pool("db")))
        wait_for(lambda: sum(s["executed"] for s in lc.stats("h") if s["component"] == "sink") == 20, 10,
                 "every tuple executed")
        assert lc.errors("h") == {}
    starts = [e for e in EVENTS if e[0] == "start"]
    assert sorted(starts) == [("start", 1, True, "h"), ("start", 2, True, "h")]
    for port in (1, 2):
        mine = [e for e in EVENTS if e[1] == port]
        assert mine[0][0] == "start" and mine[-1] == ("shutdown", port)
        # every task of the worker saw the resource its hook set, and no other worker's
        assert {e[2] for e in mine if e[0] in ("open", "prepare")} == {f"db@{port}"}
        assert [e[0] for e in mine if e[0] == "cleanup"] and mine.index(("shutdown", port)) == len(mine) - 1


def test_a_hook_that_raises_or_hangs_is_reported_and_the_worker_runs_on():
    conf = {"topology.worker.hook.start.timeout.secs": 0.2, "topology.worker.hook.shutdown.timeout.secs": 0.2}
    lc = LocalCluster({"squall.log.level": "ERROR"})
    try:
        started = time.monotonic()
        lc.submit("h", conf, build(Raises(), Hangs(), Pool("after")))
        assert time.monotonic() - started < 5  # the hung start was waited for 0.2 s, not 30
        wait_for(lambda: sum(s["executed"] for s in lc.stats("h") if s["component"] == "sink") == 20, 10,
                 "every tuple executed")
        texts = [e["error"] for e in lc.errors("h")["__system"]]
        assert "worker hook Raises raised in start" in texts[0] and "RuntimeError: hook start bug" in texts[0]
        assert texts[1].startswith("worker hook Hangs did not finish its start within "
                                   "topology.worker.hook.start.timeout.secs (0.2 s)")
        running = lc._get("h")
        stopping = time.monotonic()
        lc.kill("h")
        assert time.monotonic() - stopping < 5  # so was the hung shutdown
    finally:
        lc.shutdown()
    texts = [e["error"] for e in running.errors["__system"]]
    assert any("worker hook Raises raised in shutdown" in t and "hook shutdown bug" in t for t in texts)
    assert any(t.startswith("worker hook Hangs did not finish its shutdown") for t in texts)
    # The tasks opened without what the hook behind the stuck one would have set.
    assert ("open", 1, None) in EVENTS and not any(e[0] == "start" for e in EVENTS)


def test_hooks_travel_with_the_topology():
    topo = build(Pool("x"), Pool("y"))
    again = Topology.from_bytes(topo.to_bytes())
    assert [pickle.loads(h).tag for h in again.worker_hooks] == ["x", "y"]
    plain = build()
    assert plain.worker_hooks == () and len(pickle.loads(plain.to_bytes())) == 2  # reads as before hooks
    b = TopologyBuilder()
    with pytest.raises(TopologyError, match="must be a WorkerHook instance, got str"):
        b.add_worker_hook("not a hook")

    class Local(WorkerHook):  # a class defined in a function does not pickle
        pass

    with pytest.raises(TopologyError, match="worker hook Local cannot be serialized"):
        b.add_worker_hook(Local())
