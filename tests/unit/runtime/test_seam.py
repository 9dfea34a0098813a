"""The runtime seam: executors need only a WorkerLink, and the runtime's decisions about
time (message timeouts, tick tuples) follow the worker's clock. Executors are stepped by
hand on a FakeClock (support.stepping): each assertion is about one moment, nothing
sleeps."""

from squall import Bolt, TopologyBuilder
from squall.clock import FakeClock
from squall.config import build_config
from squall.model import ACKER, component_tasks, executor_tasks, executors, system_topology, task_ids
from squall.runtime.acker_executor import AckerExecutor
from squall.runtime.bolt_executor import BoltExecutor
from squall.runtime.link import WorkerLink, WorkerTopology
from squall.runtime.queues import BatchQueue
from squall.runtime.spout_executor import SpoutExecutor
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from support.stepping import SteppedWorker


def test_executors_run_on_a_worker_link_alone():
    """No WorkerRuntime: queues, a deliver function and flags are all executors need."""
    name = unique_name("link")
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(name, [[i] for i in range(50)], ["n"]))
    b.set_bolt("sink", RecordingBolt(name + ".out"), 2).shuffle("rows")
    topology = b.build()
    # Interval 0: a spout sends what it emitted at the end of each turn (support.stepping).
    conf = build_config({"topology.name": name, "topology.acker.executors": 1,
                         "topology.batch.flush.interval.millis": 0}, user_file=False)
    system = system_topology(topology, conf)
    tasks = task_ids(system)
    execs = sorted(executors(system, tasks))
    queues = {t: BatchQueue(1000) for ex in execs for t in executor_tasks(ex)}
    errors = []
    clock = FakeClock()

    def deliver(task, tuples):
        queues[task].put((task, tuples), len(tuples))

    link = WorkerLink(WorkerTopology(name, system, tasks, component_tasks(tasks), frozenset(queues), 1, conf, ACKER),
                      queues, deliver, lambda c, t, text: errors.append(text), lambda *a, **k: None,
                      overloaded=lambda: False, relieve=lambda tasks, queue: None, clock=clock)
    link.active = True
    made = []
    for ex in execs:
        comp = tasks[ex[0]]
        cls = AckerExecutor if comp == ACKER else SpoutExecutor if comp == "rows" else BoltExecutor
        made.append(cls(link, ex, comp))
    for e in made:
        e.setup()
    for _ in range(20):
        for e in made:
            e.step(clock.monotonic())
    assert sorted(v[3][0] for v in Recorder.get(name + ".out")) == list(range(50))
    assert sorted(Recorder.get(name + ".acked")) == list(range(50)) and not errors
    # Deactivated, the spout calls no next_tuple: the flag is the link's.
    link.active = False
    Recorder.clear(name + ".out")
    spout = made[[tasks[ex[0]] for ex in execs].index("rows")]
    spout.step(clock.monotonic())
    assert spout.active is False


class Holder(Bolt):
    """Holds every input until ``<key>.release`` is recorded, then acks what it holds (at
    its next input or tick); records inputs under ``<key>.seen`` and ticks under
    ``<key>.ticks``."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector, self.held = collector, []

    def execute(self, t):
        if t.is_tick():
            Recorder.add(self.key + ".ticks", (t.source_component, t.values[0]))
        else:
            Recorder.add(self.key + ".seen", t.values[0])
            self.held.append(t)
        if Recorder.get(self.key + ".release"):
            for h in self.held:
                self.collector.ack(h)
            self.held = []

    def component_config(self):
        return {"topology.tick.tuple.freq.secs": 0.25}


def test_message_timeout_follows_the_clock():
    name = unique_name("timeout")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [[i] for i in range(20)], ["n"]))
    b.set_bolt("hold", Holder(name), 2).shuffle("nums")
    with SteppedWorker(b.build(), {"topology.message.timeout.secs": 1}) as w:
        w.run(lambda: len(Recorder.get(name + ".seen")) == 20)
        w.advance(0.9)
        assert Recorder.get(name + ".failed") == []  # not yet: 0.9 s of the 1 s timeout
        w.advance(0.2)
        assert sorted(Recorder.get(name + ".failed")) == list(range(20))
        Recorder.add(name + ".release", True)  # the replays are acked
        w.run(lambda: len(Recorder.get(name + ".acked")) == 20)
        assert sorted(Recorder.get(name + ".acked")) == list(range(20))
        assert w.executor("nums").stats().failed == 20


def test_with_timeouts_disabled_trees_outlive_many_timeouts():
    """The spout waits for its trees forever, and so does the acker."""
    name = unique_name("no-timeouts")
    b = TopologyBuilder()
    b.set_spout("rows", FixedTupleSpout(name, [[i] for i in range(5)], ["i"]))
    b.set_bolt("slow", Holder(name)).shuffle("rows")
    conf = {"topology.acker.executors": 1, "topology.message.timeout.secs": 1,
            "topology.enable.message.timeouts": False}
    with SteppedWorker(b.build(), conf) as w:
        w.run()
        for _ in range(10):  # ten message timeouts
            w.advance(1.0)
        assert Recorder.get(name + ".failed") == [] and Recorder.get(name + ".acked") == []
        Recorder.add(name + ".release", True)
        w.advance(0.25)  # the next tick releases them
        w.run(lambda: len(Recorder.get(name + ".acked")) == 5)
    assert sorted(Recorder.get(name + ".acked")) == [0, 1, 2, 3, 4] and Recorder.get(name + ".failed") == []


def test_tick_tuples_come_once_per_period_of_the_clock():
    name = unique_name("tick")
    b = TopologyBuilder()
    b.set_spout("nums", FixedTupleSpout(name, [], ["n"]))
    b.set_bolt("ticker", Holder(name), 2).shuffle("nums")
    with SteppedWorker(b.build()) as w:
        ticks = lambda: len(Recorder.get(name + ".ticks"))  # noqa: E731
        w.run()
        assert ticks() == 0
        w.advance(0.25)
        assert ticks() == 2  # one per task
        w.advance(0.1)
        assert ticks() == 2
        w.advance(0.15)
        assert ticks() == 4
        w.advance(10.0)  # a long stall brings one tick, not forty
        assert ticks() == 6
        assert set(Recorder.get(name + ".ticks")) == {("__system", 0.25)}
