"""Backpressure and load travel between workers as control frames over the transport:
a slow bolt in one worker pauses the spout in another, and a peer that dies under
backpressure stops holding it once its report goes stale."""
import time

from squall import Bolt, Spout, TopologyBuilder
from squall.config import build_config
from squall.runtime import flow
from squall.runtime.flow import STALE_SECS, RemoteBackpressure
from squall.runtime.receiver import RECEIVE_HARD_LIMIT
from squall.testing.waiting import wait_for
from squall.testing.wire import runtime_over_zmq
from squall.testing.zookeeper import free_port


def test_remote_reports_apply_refuse_and_go_stale():
    remote = RemoteBackpressure(own_tasks=[1, 2], topology_tasks=range(1, 10))
    assert not remote.foreign({1: True}) and not remote.foreign({42: True})
    assert remote.foreign({3: True, 4: False})
    assert remote.report({3: True, 4: True}, now=100.0) == {3, 4}
    assert remote.report({4: False}, now=101.0) == {3}
    assert remote.expire(now=100.0 + STALE_SECS - 0.1) == {3}
    assert remote.expire(now=100.0 + STALE_SECS + 0.1) == set()


class Flood(Spout):
    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit(["x" * 100])

    def declare_output_fields(self, d):
        d.declare(["payload"])


class Slow(Bolt):
    def execute(self, t):
        time.sleep(0.001)


def test_a_slow_bolt_in_one_worker_pauses_the_spout_in_another_over_the_transport(monkeypatch):
    # Reports are renewed every RESEND_SECS (1 s): 2 s still expires only a silent peer's,
    # and the test waits 2 s for the dead peer's report to go stale instead of 5.
    monkeypatch.setattr(flow, "STALE_SECS", 2.0)
    b = TopologyBuilder()
    b.set_spout("flood", Flood())
    b.set_bolt("slow", Slow()).shuffle("flood")
    # Task ids: flood 1, slow 2 (no ackers).
    cap = 200  # small: shutting the bolt's worker down drains its queue at 1 ms a tuple
    conf = build_config({"topology.acker.executors": 0, "topology.executor.receive.buffer.size": cap,
                         "zmq.bind.host": "127.0.0.1", "worker.pin.cpu": False, "zmq.linger.millis": 0},
                        user_file=False)
    topo = b.build()
    port_a, port_b = free_port(), free_port()
    endpoints = {1: ("127.0.0.1", port_a), 2: ("127.0.0.1", port_b)}
    with runtime_over_zmq("flow-1-1", topo, conf, [(1, 1)], port_a, endpoints) as a:
        with runtime_over_zmq("flow-1-1", topo, conf, [(2, 2)], port_b, endpoints) as b_rt:
            wait_for(lambda: a.remote_bp == {2}, 20, what="the bolt's backpressure reaching the spout's worker")
            assert b_rt.bp_tasks == {2}
            conn = a.peers.connections[("127.0.0.1", port_b)]
            wait_for(lambda: conn.get_load([2]).get(2, 0) > 0.5, 10, what="the bolt's load reported")
            # Over its bound by at most one batch from the wire (see test_memory_bound).
            assert b_rt.queues[2].peak <= RECEIVE_HARD_LIMIT * cap + conf["topology.producer.batch.size"]
        # The bolt's worker is gone while under backpressure: its report goes stale.
        wait_for(lambda: a.remote_bp == set(), flow.STALE_SECS + 5, what="a dead peer's backpressure expiring")
