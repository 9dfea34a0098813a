"""Registered metrics in a worker snapshot become squall_metric_<name> families, checked."""
import pytest
from prometheus_client import generate_latest
from prometheus_client.registry import CollectorRegistry

from squall.daemons.metrics.families import Series, add_worker_snapshot


def snapshot(metrics):
    return {"version": 1, "time": 100.0, "uptime": 5, "process": {"rss": 1, "cpu_user": 0, "cpu_system": 0,
                                                                   "gc_collections": [0, 0, 0]},
            "transport": {k: 0 for k in ("frames_in", "bytes_in", "frames_out", "bytes_out", "reconnects",
                                         "blocked_sends", "refused_connections", "refused_keys")},
            "dropped": {}, "transfer_queue": 0, "transfer_queue_capacity": 1,
            "executors": [{"component": "kafka", "executor": [3, 3], "tasks": {}, "transferred": 0, "errors": 0,
                           "queue": 0, "queue_capacity": 1, "backpressure": False, "metrics": metrics}]}


def exposition(series):
    class C:
        def collect(self):
            return series.families()

    reg = CollectorRegistry()
    reg.register(C())
    return generate_latest(reg).decode()


def test_registered_metrics_are_exported_with_task_and_key_labels():
    s = Series()
    add_worker_snapshot(s, snapshot({"3": {
        "kafka_lag": {"kind": "gauge", "label": "partition", "value": {"in-0": 5, "in-2": 0}},
        "kafka_client_errors": {"kind": "counter", "value": 2}}}), "topo", 6700, 101.0)
    text = exposition(s)
    assert 'squall_metric_kafka_lag{component="kafka",partition="in-0",task="3",topology="topo"} 5.0' in text
    assert 'squall_metric_kafka_client_errors_total{component="kafka",task="3",topology="topo"} 2.0' in text


@pytest.mark.parametrize("bad", [
    {"3": {"bad name!": {"kind": "gauge", "value": 1}}},
    {"3": {"m": {"kind": "histogram", "value": 1}}},
    {"3": {"m": {"kind": "counter", "value": -1}}},
    {"3": {"m": {"kind": "gauge", "label": "task", "value": {"a": 1}}}},
    {"3": {"m": {"kind": "gauge", "label": "p", "value": {"a\n": 1}}}},
    {"3": {"m": {"kind": "gauge", "label": "p", "value": {f"k{i}": 1 for i in range(1001)}}}},
])
def test_a_malformed_registered_metric_refuses_the_snapshot(bad):
    s = Series()
    with pytest.raises(ValueError):
        add_worker_snapshot(s, snapshot(bad), "topo", 6700, 101.0)
    assert s.samples == {}


def test_one_kind_per_name_the_rest_is_counted():
    s = Series()
    add_worker_snapshot(s, snapshot({"3": {"m": {"kind": "gauge", "value": 1}},
                                     "4": {"m": {"kind": "counter", "value": 1}}}), "topo", 6700, 101.0)
    assert len(s.samples["squall_metric_m"]) == 1 and s.conflicts == 1


def test_the_system_task_of_every_worker_is_exported_and_other_ids_refused():
    snap = snapshot({"-1": {"uptimeSecs": {"kind": "gauge", "value": 12.5}}})
    snap["executors"][0].update(component="__system", executor=[-1, -1])
    s = Series()
    add_worker_snapshot(s, snap, "topo", 6700, 101.0)
    assert 'squall_metric_uptimeSecs{component="__system",task="-1",topology="topo"} 12.5' in exposition(s)
    for span in ([0, 0], [-2, -2], [1.5, 2]):
        snap["executors"][0]["executor"] = span
        with pytest.raises(ValueError, match="not a task id"):
            add_worker_snapshot(Series(), snap, "topo", 6700, 101.0)
