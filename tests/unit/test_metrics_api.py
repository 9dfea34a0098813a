"""context.register_metric: Storm-like metrics a component publishes, read per bucket."""
import time

import pytest

from squall import Bolt, LocalCluster, Spout, TopologyBuilder
from squall.metrics import (
    CountMetric,
    GaugeMetric,
    MetricError,
    MetricRegistry,
    MultiCountMetric,
    MultiGaugeMetric,
)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_buckets_give_data_points_and_a_running_view():
    clock = Clock()
    reg = MetricRegistry(clock)
    count = reg.register("seen", CountMetric(), 10)
    parts = reg.register("per_part", MultiCountMetric("partition"), 10)
    lag = reg.register("lag", MultiGaugeMetric("partition"), 10)
    gauge = reg.register("depth", GaugeMetric(), 5)
    count.incr(3)
    parts.incr("t-0", 2)
    lag.set("t-0", 7)
    assert reg.snapshot() == {}  # no bucket has ended yet
    clock.t = 10
    count.incr()
    parts.incr("t-1")
    gauge.set(4)
    snap = reg.snapshot()
    assert snap["seen"] == {"kind": "counter", "value": 4}
    assert snap["per_part"] == {"kind": "counter", "label": "partition", "value": {"t-0": 2, "t-1": 1}}
    assert snap["lag"]["value"] == {"t-0": 7} and snap["depth"]["value"] == 4
    count.incr(5)
    lag.remove("t-0")
    lag.set("t-1", 1)
    clock.t = 20
    snap = reg.snapshot()
    assert snap["seen"]["value"] == 9  # counters add up across buckets
    assert snap["lag"]["value"] == {"t-1": 1}  # gauges show only current keys
    assert reg.drain() == []  # no consumer asked for data points
    reg.keep_datapoints()
    count.incr(6)
    clock.t = 30
    reg.collect()
    points = [(bucket, name, v) for bucket, name, v in reg.drain()]
    assert (10.0, "seen", 6) in points  # Storm's per-bucket values, with their bucket
    assert reg.drain() == []


def test_registration_is_checked():
    reg = MetricRegistry()
    reg.register("ok", CountMetric(), 1)
    for name, metric, bucket in [("ok", CountMetric(), 1), ("bad name", CountMetric(), 1),
                                 ("x", object(), 1), ("y", CountMetric(), 0), ("z", CountMetric(), True)]:
        with pytest.raises(MetricError):
            reg.register(name, metric, bucket)
    with pytest.raises(MetricError):
        reg.register("w", MultiGaugeMetric("task"), 1)  # a label the runtime sets


def test_hostile_values_and_too_many_keys_are_bounded():
    clock = Clock()
    reg = MetricRegistry(clock)
    m = reg.register("keys", MultiGaugeMetric(), 1)
    for i in range(1500):
        m.set(f"k{i}", i)
    m.set("nan", float("nan"))
    m.set("x" * 201, 1)       # too long for a label value
    m.set("line\nbreak", 1)  # not printable

    class Raises(CountMetric):
        def get_value_and_reset(self):
            raise RuntimeError("boom")

    reg.register("raises", Raises(), 1)
    clock.t = 2
    snap = reg.snapshot()
    assert len(snap["keys"]["value"]) == 1000 and reg.dropped_keys == 502 and "raises" not in snap


class Numbers(Spout):
    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.emitted = context.register_metric("numbers_emitted", CountMetric(), 0.05)

    def next_tuple(self):
        if self.n < 100:
            self.n += 1
            self.collector.emit([self.n])
            self.emitted.incr()

    def declare_output_fields(self, d):
        d.declare(["n"])


class Parity(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.seen = context.register_metric("parity", MultiCountMetric("parity"), 0.05)

    def execute(self, tup):
        self.seen.incr("even" if tup.values[0] % 2 == 0 else "odd")
        self.collector.ack(tup)


def test_metrics_reach_executor_stats_and_metrics_in_local_mode():
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers())
    b.set_bolt("parity", Parity(), 2).shuffle("numbers")
    with LocalCluster() as lc:
        lc.submit("m", {}, b.build())
        deadline = time.monotonic() + 30
        while True:
            parity = [t.get("parity", {}).get("value", {}) for s in lc.stats("m") if s["component"] == "parity"
                      for t in s["metrics"].values()]
            total = {k: sum(p.get(k, 0) for p in parity) for k in ("even", "odd")}
            if total == {"even": 50, "odd": 50} or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert total == {"even": 50, "odd": 50}
        snap = lc.metrics("m")[0]["executors"]
        spout = next(e for e in snap if e["component"] == "numbers")
        assert list(spout["metrics"].values())[0]["numbers_emitted"] == {"kind": "counter", "value": 100}
