"""The acker's XOR ledger and the spout's pending map, as plain code; and timeouts switched off."""
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from squall import Bolt, LocalCluster, TopologyBuilder
from squall.clock import FakeClock
from squall.runtime.acker import ROOT_RANDOM_BITS, AckerLedger, new_root, next_id, spout_task
from squall.testing.components import FixedTupleSpout, Recorder
from squall.testing.waiting import wait_for
from squall.tuple import Tuple
from support.stepping import SteppedWorker


def test_root_ids_name_their_spout_task_and_are_random():
    roots = [new_root(37) for _ in range(1000)]
    assert {spout_task(r) for r in roots} == {37}
    assert len(set(roots)) == 1000


def test_tree_completes_only_when_every_edge_is_acked():
    ledger = AckerLedger()
    root = new_root(3)
    e1, e2, e3 = 0x1111, 0x2222, 0x4444
    assert not ledger.xor(root, e1)  # the spout's init
    # the bolt that got e1 emits two children (e2, e3) and acks its input
    assert not ledger.xor(root, e1 ^ e2 ^ e3)
    assert not ledger.xor(root, e2)
    assert ledger.xor(root, e3)  # the last edge
    assert ledger.take() == ({3: [root]}, {})  # spout task 3 is told
    assert len(ledger) == 0 and ledger.take() == ({}, {})


def test_ack_before_init_is_remembered():
    ledger = AckerLedger()
    root = new_root(4)
    assert not ledger.xor(root, 0xAB)
    assert ledger.xor(root, 0xAB)
    assert ledger.take()[0] == {4: [root]}


def test_fail_tells_the_spout_and_forgets():
    ledger = AckerLedger()
    root = new_root(2)
    ledger.xor(root, 0x10)
    ledger.fail(root)
    assert ledger.take() == ({}, {2: [root]})
    assert not ledger.xor(root, 0x10)  # unknown again: kept until it expires


def test_abandoned_entries_expire_on_the_second_sweep_after_they_appear():
    ledger = AckerLedger()
    old, young = new_root(1), new_root(1)
    ledger.xor(old, 0x5)
    assert ledger.expire() == []
    ledger.xor(young, 0x6)
    assert ledger.expire() == []
    assert ledger.expire() == [old]
    assert ledger.expire() == [young]
    assert len(ledger) == 0


def test_batch_form_matches_and_skips_cancelled_folds():
    ledger = AckerLedger()
    a, b = new_root(8), new_root(9)
    ledger.apply({a: 0x5, b: 0x6})
    ledger.apply({a: 0x5, b: 0x2})
    assert ledger.take() == ({8: [a]}, {})
    ledger.apply({b: 0})  # an executor whose own edges cancelled: no news
    ledger.apply({b: 0x4})
    assert ledger.take() == ({9: [b]}, {})


@given(st.integers(min_value=1, max_value=6), st.integers(min_value=0, max_value=2**32))
def test_any_tree_in_any_order_completes_exactly_at_the_last_ack(depth, seed):
    """Build a random tuple tree; deliver init and acks in random order: completion comes
    with the last message and not before. (Edge ids come from a PRNG, as in the runtime:
    a chosen zero id or XOR collision has probability 2**-64 there.)"""
    rnd = random.Random(seed)
    ledger = AckerLedger()
    root = (1 << ROOT_RANDOM_BITS) | rnd.getrandbits(ROOT_RANDOM_BITS)  # spout task 1
    messages = []
    frontier = [rnd.getrandbits(64)]
    messages.append(frontier[0])  # the init
    for _ in range(depth):
        new = []
        for edge in frontier:
            children = [rnd.getrandbits(64) for _ in range(rnd.randint(0, 3))]
            val = edge
            for c in children:
                val ^= c
            messages.append(val)
            new.extend(children)
        frontier = new
    messages.extend(frontier)
    rnd.shuffle(messages)
    for i, val in enumerate(messages):
        assert ledger.xor(root, val) == (i == len(messages) - 1)
    assert ledger.take()[0] == {1: [root]}


class _SlowAck(Bolt):
    """Holds every input for ``hold`` seconds (of its task's clock) before acking it;
    records what it holds under ``<key>.held`` and the clock at each tick under ``<key>.ticks``."""

    def __init__(self, hold, key):
        self.hold, self.key = hold, key

    def prepare(self, conf, context, collector):
        self.collector, self.held, self.clock = collector, [], context.clock

    def execute(self, t):
        now = self.clock.monotonic()
        if t.is_tick():
            while self.held and now - self.held[0][0] >= self.hold:
                self.collector.ack(self.held.pop(0)[1])
            Recorder.add(self.key + ".ticks", now)
            return
        self.held.append((now, t))
        Recorder.add(self.key + ".held", t["i"])

    def component_config(self):
        return {"topology.tick.tuple.freq.secs": 0.2}


@pytest.mark.parametrize("workers", [1, 2])
def test_with_timeouts_disabled_the_acker_keeps_trees_past_the_timeout(workers):
    """The spout waits forever for its trees; so must the acker (tuples acked after
    three message timeouts still complete their trees)."""
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout("no-timeouts", [[i] for i in range(5)], ["i"]))
    b.set_bolt("slow", _SlowAck(3.5, "no-timeouts")).shuffle("rows")
    conf = {"topology.workers": workers, "topology.acker.executors": 1, "topology.message.timeout.secs": 1,
            "topology.enable.message.timeouts": False}
    for key in ("no-timeouts.acked", "no-timeouts.ticks", "no-timeouts.held"):
        Recorder.clear(key)
    clock = FakeClock()
    with LocalCluster({"squall.log.level": "WARNING"}, clock=clock) as cluster:
        cluster.submit("no-timeouts", conf, b.build())
        wait_for(lambda: len(Recorder.get("no-timeouts.held")) == 5, 10, what="every tuple held")
        for _ in range(3):  # three message timeouts pass, each seen by the bolt
            clock.advance(1.0)
            wait_for(lambda: clock.monotonic() in Recorder.get("no-timeouts.ticks"), 10, what="a tick")
        assert Recorder.get("no-timeouts.acked") == []
        clock.advance(0.6)
        wait_for(lambda: sorted(Recorder.get("no-timeouts.acked")) == [0, 1, 2, 3, 4], 20, what="late acks")
    assert Recorder.get("no-timeouts.failed") == []


class _Holds(Bolt):
    """Acks nothing: its trees stay pending until the test completes them."""

    def execute(self, tup):
        pass


def test_a_spout_acks_each_completed_tree_once_and_ignores_roots_it_no_longer_holds():
    """Completed roots come to the spout in batches; a root twice in one batch, or one
    that timed out already (or never was), is not acked again and not counted."""
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout("once", [[i] for i in range(5)], ["v"]))
    b.set_bolt("hold", _Holds()).shuffle("src")
    worker = SteppedWorker(b.build(), {"topology.acker.executors": 1})
    worker.run()
    spout, acker = worker.executor("src"), worker.executor("__acker")
    task = spout.task_ids[0]
    pending = spout.tasks[task].pending.as_dict()  # root -> (msg_id, start)
    assert sorted(m for m, _ in pending.values()) == [0, 1, 2, 3, 4]
    r0, r1, r2 = list(pending)[:3]
    never = (1 << 63) | task
    spout.queue.put((task, [Tuple([[r0, r1, r0, never]], acker.ack_src), Tuple([[r1, r2]], acker.ack_src)]), 6)
    worker.step()
    assert sorted(Recorder.get("once.acked")) == sorted(pending[r][0] for r in (r0, r1, r2))
    assert spout.tasks[task].book.acked == 3 and len(spout.tasks[task].pending) == 2
    assert spout.stats().acked == 3 and spout.stats().complete_latency.p50 >= 0


def test_next_id_gives_distinct_64_bit_ids_with_every_bit_varying():
    """The compiled build's edge and root ids (splitmix64): no repeats, all 64 bits used."""
    ids = [next_id() for _ in range(20000)]
    assert len(set(ids)) == len(ids) and all(0 <= i < 1 << 64 for i in ids)
    ones = [sum(i >> b & 1 for i in ids) / len(ids) for b in range(64)]
    assert all(0.45 < share < 0.55 for share in ones), ones


def test_an_acker_whose_ledger_is_full_fails_new_trees_and_reports_them():
    """The ledger's bound reached: the trees already tracked stay, each new one fails at
    once (its spout is told, and replays it), and the worker counts ``ledger_full``."""
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout("full", [[i] for i in range(5)], ["v"]))
    b.set_bolt("hold", _Holds()).shuffle("src")
    Recorder.clear("full.failed")
    worker = SteppedWorker(b.build(), {"topology.acker.executors": 1, "topology.max.spout.pending": 100})
    acker = worker.executor("__acker")
    assert acker.ledger.table.limit == 1024  # twice max pending for one spout task, at least 1024
    acker.ledger.table.limit = 3
    for _ in range(3):
        worker.step()
    assert len(acker.ledger) == 3
    failed = Recorder.get("full.failed")
    assert set(failed) == {3, 4}  # each refused, replayed, refused again
    refused = acker.ledger.refused  # the last turn's refusals reach the spout on its next step
    assert worker.runtime.drops.by_cause(every=True)["ledger_full"] == refused and len(failed) <= refused
    assert not worker.errors
