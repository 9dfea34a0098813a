"""How a worker's executors share threads: run order, grouping, queues and doorbells."""
import os
import threading
import time
from types import SimpleNamespace

from squall import LocalCluster, TopologyBuilder
from squall.clock import SYSTEM_CLOCK
from squall.model import ACKER, system_topology
from squall.runtime.affinity import pin_thread
from squall.runtime.executor_thread import ExecutorThread, component_order, thread_groups
from squall.runtime.queues import BatchQueue, Doorbell
from squall.testing.components import EchoBolt, FixedTupleSpout
from squall.testing.waiting import wait_for


def _diamond():
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout("order", [[1]], ["n"]))
    b.set_bolt("sink", EchoBolt(["n"])).shuffle("left").shuffle("right")  # declared before its inputs
    b.set_bolt("left", EchoBolt(["n"])).shuffle("src")
    b.set_bolt("right", EchoBolt(["n"])).shuffle("src")
    b.set_bolt("alone", EchoBolt(["n"])).shuffle("alone2")
    b.set_bolt("alone2", EchoBolt(["n"])).shuffle("alone")
    return system_topology(b.build(), {"topology.acker.executors": 1, "topology.workers": 1})


def test_run_order_puts_spouts_first_then_each_bolt_after_its_inputs_and_the_acker_last():
    rank = component_order(_diamond())
    assert rank["src"] == 0
    assert rank["src"] < rank["left"] < rank["sink"] and rank["right"] < rank["sink"]
    # A cycle no spout reaches still gets a place, before the acker.
    assert max(rank["alone"], rank["alone2"]) < rank[ACKER] == len(rank) - 1
    assert sorted(rank.values()) == list(range(len(rank)))


def test_thread_groups_share_out_executors_in_run_order():
    order = ["a", "b", "c", "d", "e"]
    assert thread_groups(order, 1) == [order]
    assert thread_groups(order, 2) == [["a", "c", "e"], ["b", "d"]]
    assert thread_groups(order, 0) == [[x] for x in order]  # Storm's thread per executor
    assert thread_groups(order, 9) == [[x] for x in order]


def test_a_put_on_any_queue_wakes_the_thread_serving_them():
    bell = Doorbell()
    queues = [BatchQueue(10, bell), BatchQueue(10, bell)]
    got, woke = [], threading.Event()

    def consumer():
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(got) < 2:
            for q in queues:
                got.extend(q.get_all())
            if len(got) < 2:
                bell.wait(5.0)  # far longer than the test waits: only a ring ends it early
        woke.set()

    t = threading.Thread(target=consumer)
    t.start()
    time.sleep(0.05)
    start = time.monotonic()
    queues[1].put((7, ["x"]), 1)
    time.sleep(0.05)
    queues[0].put((3, ["y"]), 1)
    assert woke.wait(3.0)
    t.join(3.0)
    assert time.monotonic() - start < 2.0
    assert sorted(got) == [(3, ["y"]), (7, ["x"])]


def test_a_ring_before_the_wait_is_not_lost():
    bell = Doorbell()
    bell.ring()
    start = time.monotonic()
    bell.wait(5.0)
    assert time.monotonic() - start < 1.0
    start = time.monotonic()
    bell.wait(0.05)  # the ring was used up: this one sleeps its full timeout
    assert time.monotonic() - start >= 0.04


def test_put_never_blocks_counts_tuples_and_reports_full():
    q = BatchQueue(5)
    for i in range(4):
        assert q.put((1, [i, i]), 2)  # over capacity: accepted, the spouts pause instead
    assert len(q) == 8 and q.full and q.peak == 8
    assert [b for _, b in q.get_all()] == [[0, 0], [1, 1], [2, 2], [3, 3]]
    assert len(q) == 0 and not q.full and q.peak == 8
    q.close()
    assert not q.put((1, [9]), 1)
    assert q.get_all() == []


class Woken(EchoBolt):
    """Records on which thread ``woken`` runs; its wake is called from a thread of its own
    (as a shell component's stdout reader calls it)."""

    runs: list = []

    def attach_wake(self, wake):
        self.wake = wake

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        threading.Thread(target=lambda: [self.wake() for _ in range(3)], daemon=True).start()

    def woken(self):
        Woken.runs.append(threading.current_thread().name)


def test_a_components_wake_from_another_thread_runs_woken_on_its_executor_thread_uncounted():
    Woken.runs = []
    b = TopologyBuilder()
    b.set_spout("src", FixedTupleSpout("wake-src", [], ["n"]))
    b.set_bolt("w", Woken(["n"])).shuffle("src")
    with LocalCluster({"squall.log.level": "WARNING"}) as c:
        c.submit("wake", {}, b.build())
        wait_for(lambda: len(Woken.runs) == 3, 10, "woken called once a wake")
        executed = next(s for s in c.stats("wake") if s["component"] == "w")["executed"]
        c.kill("wake")
    assert all(name.startswith("executors-") for name in Woken.runs), Woken.runs
    assert executed == 0  # a wake is no tuple


BATCH = 500  # topology.producer.batch.size


class _RungEveryTurn:
    """An executor whose every turn leaves ``size`` tuples for another worker and rings its
    own thread's doorbell (as an acker hands its verdicts to a spout on the same thread, or
    acks keep arriving): its thread never sleeps between turns. Each turn records whether
    the previous turn's tuples had left the transfer queue by then."""

    component, executor_id, task_ids, between_steps = "busy", (1, 1), [1], []
    log = None

    def __init__(self, bell, outgoing, size, turns, stop):
        self.bell, self.outgoing, self.size, self.turns, self.stop = bell, outgoing, size, turns, stop
        self.sent_in_time: list[bool] = []
        self.started = False

    def setup(self):
        pass

    def step(self, now):
        if self.started:
            self.sent_in_time.append(self.outgoing._size == 0)
        self.started = True
        until = time.perf_counter() + 50e-6  # a turn's worth of Python work
        while time.perf_counter() < until:
            pass
        self.outgoing.put((7, b"batch"), self.size)
        self.bell.ring()
        if len(self.sent_in_time) >= self.turns:
            self.stop.set()
        return 0.001  # a dry spout's wait: the ring ends it at once

    def teardown(self):
        pass


def _turns_with_a_transfer_thread(size: int) -> tuple[_RungEveryTurn, ExecutorThread]:
    """100 turns of ``_RungEveryTurn`` on a real executor thread, with a thread on the same
    CPU that takes what it leaves, as the worker's transfer thread does."""
    cpu = min(os.sched_getaffinity(0))
    stop, bell, outgoing = threading.Event(), Doorbell(), BatchQueue(1 << 20)
    link = SimpleNamespace(cpu=cpu, stopping=stop, clock=SYSTEM_CLOCK,
                           topology=SimpleNamespace(conf={"topology.producer.batch.size": BATCH}))
    busy = _RungEveryTurn(bell, outgoing, size, 100, stop)

    def transfer():
        pin_thread(cpu)
        while not stop.is_set():
            outgoing.wait(0.05)

    sender = threading.Thread(target=transfer, daemon=True)
    sender.start()
    thread = ExecutorThread(link, [busy], bell, 0, outgoing)
    thread.start()
    thread.join(30)
    stop.set()
    sender.join(5)
    assert not thread.is_alive() and not sender.is_alive()
    return busy, thread


def test_a_partial_batch_for_another_worker_leaves_before_the_next_turn_of_a_thread_that_never_sleeps():
    """The transfer thread runs on its executor thread's CPU and needs the GIL. A thread
    whose doorbell rings every turn never waits, so on the old code what it handed the
    transfer thread went out only when the interpreter's 5 ms switch interval forced a
    switch: a tuple bound for another worker sat milliseconds on every hop at light load."""
    busy, thread = _turns_with_a_transfer_thread(3)
    in_time = sum(busy.sent_in_time) / len(busy.sent_in_time)
    assert in_time >= 0.5, f"only {in_time:.0%} of the turns found the last turn's tuples sent"
    assert thread.hand_offs >= len(busy.sent_in_time) // 2


def test_full_batches_are_not_handed_off_one_at_a_time():
    """A saturated worker (full batches waiting) keeps batching in the transfer queue:
    sent one at a time, they cost more frames per tuple at the maximum rate."""
    busy, thread = _turns_with_a_transfer_thread(BATCH)
    assert thread.hand_offs == 0 and len(busy.sent_in_time) == 100
