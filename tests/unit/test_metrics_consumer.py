"""Metrics consumers in local mode: registered metrics flow from every worker's __system
task to the consumer bolts; a consumer that raises, hangs or cannot start costs data
points (counted, reported), never the topology's tuples or the worker.

The topologies run on a FakeClock: the metrics' buckets (real time) are tiny, and
advancing the clock by a second makes __system tick at once."""
import threading
import time

import pytest

from squall import Bolt, LocalCluster, TopologyBuilder, TopologyError
from squall import metrics_consumer as mc
from squall.clock import FakeClock
from squall.config import ConfigError, validate
from squall.metrics import CountMetric
from squall.metrics_consumer import DataPoint, MetricsConsumer, TaskInfo, parse_datapoints, registrations
from squall.model import executors, system_counts, system_topology, task_ids
from squall.system_component import SYSTEM_TASK
from squall.testing.components import FixedTupleSpout
from squall.testing.waiting import wait_for

REGISTER = "topology.metrics.consumer.register"
RECEIVED: dict[str, list[tuple[TaskInfo, list[DataPoint]]]] = {}
EVENTS: list[tuple] = []


class Counting(Bolt):
    def prepare(self, conf, context, collector):
        self.seen = context.register_metric("seen", CountMetric(), 0.01)
        self.executed = 0

    def execute(self, t):
        self.seen.incr()


class Recording(MetricsConsumer):
    def prepare(self, conf, argument, context, error_reporter):
        self.key = argument
        EVENTS.append(("prepare", argument, context.this_component_id))

    def handle_data_points(self, task_info, data_points):
        RECEIVED.setdefault(self.key, []).append((task_info, data_points))

    def cleanup(self):
        EVENTS.append(("cleanup", self.key))


class Raising(Recording):
    def handle_data_points(self, task_info, data_points):
        super().handle_data_points(task_info, data_points)
        raise RuntimeError("consumer bug")


STUCK = threading.Event()


class Stuck(Recording):
    def handle_data_points(self, task_info, data_points):
        super().handle_data_points(task_info, data_points)
        STUCK.wait(30)


class BadPrepare(Recording):
    def prepare(self, conf, argument, context, error_reporter):
        raise ValueError("cannot reach the metrics store")


def entry(cls, argument, **more):
    return {"class": f"{__name__}.{cls.__name__}", "argument": argument, **more}


def run_until(clock, lc, name, predicate, what, timeout=20):
    """Tick __system (a second per round) until ``predicate()``."""
    def ticked():
        clock.advance(1.0)
        time.sleep(0.02)  # past the metrics' 0.01 s bucket
        return predicate()
    return wait_for(ticked, timeout, what, lambda: repr(lc.errors(name)), interval=0.05)


def topology(n=200):
    b = TopologyBuilder()
    b.set_spout("numbers", FixedTupleSpout("metrics-consumer-numbers", [[i] for i in range(n)], ["n"]))
    b.set_bolt("count", Counting(), 2).shuffle("numbers")
    return b.build()


def seen_total(key):
    return sum(p.value for _, points in RECEIVED.get(key, []) for p in points if p.name == "seen")


@pytest.fixture(autouse=True)
def fresh():
    RECEIVED.clear()
    EVENTS.clear()
    STUCK.clear()
    yield
    STUCK.set()


def test_data_points_of_every_worker_reach_the_consumer_with_their_task_info():
    clock = FakeClock()
    conf = {REGISTER: [entry(Recording, "all", **{"parallelism.hint": 2}),
                       entry(Recording, "only-seen", whitelist=["se+n"])],
            "topology.workers": 2, "topology.builtin.metrics.bucket.size.secs": 0.01}
    with LocalCluster({"squall.log.level": "WARNING"}, clock=clock) as lc:
        lc.submit("m", conf, topology())
        run_until(clock, lc, "m", lambda: seen_total("all") == 200 and seen_total("only-seen") == 200,
                  "every tuple counted by the consumers")
        run_until(clock, lc, "m", lambda: {i.src_worker_port for i, ps in RECEIVED["all"]
                                           if any(p.name == "uptimeSecs" for p in ps)} == {1, 2},
                  "worker metrics from both workers")
        comps = {s["component"] for s in lc.stats("m")}
        assert lc.errors("m") == {}
    infos = {(i.src_component_id, i.src_worker_port) for i, _ in RECEIVED["all"]}
    assert {("count", 1), ("count", 2), ("__system", 1), ("__system", 2)} <= infos
    seen = [(i, p) for i, ps in RECEIVED["all"] for p in ps if p.name == "seen"]
    assert {i.update_interval_secs for i, _ in seen} == {0.01}
    count_tasks = {t for t, c in task_ids(system_topology(topology(), conf)).items() if c == "count"}
    assert {i.src_task_id for i, _ in seen} == count_tasks and len(count_tasks) == 2
    system = {p.name: p.value for i, ps in RECEIVED["all"] for p in ps if i.src_task_id == SYSTEM_TASK}
    assert system["startTimeSecs"] > 1e9 and system["memoryRssBytes"] > 1e6 and "0" in system["gcCollections"]
    assert {p.name for _, ps in RECEIVED["only-seen"] for p in ps} == {"seen"}
    # Two registrations of one class: Storm's component ids; two tasks of the first prepared.
    consumer = f"__metrics{__name__}.Recording"
    assert {consumer, consumer + "#2", "__system"} <= comps
    assert sorted(e for e in EVENTS if e[0] == "prepare") == sorted(
        [("prepare", "all", consumer)] * 2 + [("prepare", "only-seen", consumer + "#2")])
    assert sorted(e for e in EVENTS if e[0] == "cleanup") == [("cleanup", "all")] * 2 + [("cleanup", "only-seen")]


def test_misbehaving_consumers_are_reported_and_the_topology_goes_on(monkeypatch):
    monkeypatch.setattr(mc, "CLEANUP_SECS", 0.3)
    clock = FakeClock()
    conf = {REGISTER: [entry(Raising, "raising"), entry(Stuck, "stuck", **{"max.retain.metric.tuples": 2}),
                       entry(BadPrepare, "bad-prepare")], "topology.builtin.metrics.bucket.size.secs": 0.01}
    with LocalCluster({"squall.log.level": "ERROR"}, clock=clock) as lc:
        lc.submit("m", conf, topology(300))

        def dropped(component):
            return sum(t.get("consumer_dropped", {}).get("value", 0) for s in lc.stats("m")
                       if s["component"] == component for t in s["metrics"].values())

        stuck = f"__metrics{__name__}.Stuck"
        run_until(clock, lc, "m", lambda: len(RECEIVED.get("raising", [])) >= 3 and dropped(stuck) >= 2,
                  "the raising consumer called again, the stuck one dropping")
        executed = sum(s["executed"] for s in lc.stats("m") if s["component"] == "count")
        assert executed == 300  # the topology's own tuples all went through
        errors = lc.errors("m")
        started = time.monotonic()
    assert time.monotonic() - started < 5  # the stuck consumer's cleanup was bounded
    raising = errors[f"__metrics{__name__}.Raising"]
    assert "RuntimeError: consumer bug" in raising[0]["error"]
    assert "queue is full (max.retain.metric.tuples 2)" in errors[stuck][0]["error"]
    assert "ValueError: cannot reach the metrics store" in errors[f"__metrics{__name__}.BadPrepare"][0]["error"]
    assert ("cleanup", "raising") in EVENTS and ("cleanup", "stuck") not in EVENTS


def test_a_consumer_that_does_not_import_is_refused_at_submit():
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        for cls, why in (("no_such_module.Consumer", "cannot be imported"),
                         ("org.apache.storm.metrics2.SomeJavaConsumer", "cannot be imported"),
                         (f"{__name__}.Counting", "not a class with handle_data_points")):
            with pytest.raises(TopologyError, match=f"topology.metrics.consumer.register: .*{why}"):
                lc.submit("m", {REGISTER: [{"class": cls}]}, topology())
        assert lc.topologies() == []
    assert mc.consumer_class("org.apache.storm.metric.LoggingMetricsConsumer") is mc.LoggingMetricsConsumer


@pytest.mark.parametrize("bad, says", [
    ([{"argument": 1}], "'class' must name"),
    ([{"class": "a.B", "parallelism.hint": 0}], "'parallelism.hint' must be an integer from 1"),
    ([{"class": "a.B", "max.retain.metric.tuples": "9"}], "'max.retain.metric.tuples'"),
    ([{"class": "a.B", "whitelist": ["("]}], "'whitelist' pattern '\\('"),
    ([{"class": "a.B", "whitelist": ["x"], "blacklist": ["y"]}], "not both"),
    ([{"class": "a.B", "expandMapType": True}], "unknown keys \\['expandMapType'\\]"),
    ({"class": "a.B"}, "expects list\\[dict\\]"),
])
def test_registrations_are_checked(bad, says):
    with pytest.raises(ConfigError, match=f"topology.metrics.consumer.register.*{says}"):
        validate({REGISTER: bad})


def test_consumer_bolts_take_task_ids_alike_on_nimbus_and_in_workers_and_system_is_never_scheduled():
    conf = {REGISTER: [{"class": "a.C", "parallelism.hint": 3}, {"class": "a.C"}], "topology.acker.executors": 1}
    assert [r.component_id for r in registrations(conf)] == ["__metricsa.C", "__metricsa.C#2"]
    topo = topology()
    system = system_topology(topo, conf)
    from_counts = system_counts({c.id: (c.parallelism, c.num_tasks) for c in topo.components.values()}, conf)
    worker_ids = task_ids(system)
    nimbus_ids = task_ids(from_counts)
    assert worker_ids == {**nimbus_ids, SYSTEM_TASK: "__system"}
    assert sum(1 for c in nimbus_ids.values() if c == "__metricsa.C") == 3
    assert (SYSTEM_TASK, SYSTEM_TASK) not in executors(system, worker_ids)
    assert "__system" not in system_topology(topo, {"topology.acker.executors": 1}).components


def test_datapoint_tuples_of_the_wrong_shape_are_refused():
    info, points = parse_datapoints([["h", 1, "c", 3, 1.5, 10], [["seen", 4], ["lag", {"p0": 2}]]])
    assert info == TaskInfo("h", 1, "c", 3, 1.5, 10.0) and points[1] == DataPoint("lag", {"p0": 2})
    for values in ([["h", 1, "c", "3", 1.5, 10], []], [["h", 1, "c", 3, 1.5], []],
                   [["h", 1, "c", 3, 1.5, 10], [["seen"]]], [["h", 1, "c", 3, 1.5, 10], [[7, 1]]]):
        with pytest.raises(ValueError):
            parse_datapoints(values)
