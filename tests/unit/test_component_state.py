"""A task's copy of its component (unpickled from the topology, Component.__setstate__): the
same state pickle's default would restore, and a spout's ack heard however it is defined."""
import pickle

from squall import Bolt, LocalCluster, Spout, TopologyBuilder
from squall.testing.components import FixedTupleSpout, Recorder, RecordingBolt, unique_name
from squall.testing.waiting import wait_for


class Stateful(Bolt):
    def __init__(self):
        self.counts = {"a": 1}
        self.me = self
        self.hook = self.execute
        self.__dict__["mode"] = "fast"  # shadowed by the property below, as pickle keeps it
        self.__dict__[7] = "not a str key"

    @property
    def mode(self):
        return "property"

    def execute(self, tup):
        pass


class Guarded(Bolt):
    """Refuses attribute writes once built: unpickling must not go through __setattr__."""

    def __init__(self):
        self.n = 3
        self.__dict__["sealed"] = True

    def __setattr__(self, name, value):
        if getattr(self, "sealed", False):
            raise AttributeError("sealed")
        super().__setattr__(name, value)


class Slotted(Bolt):
    __slots__ = ("slot",)

    def __init__(self):
        self.slot = "in a slot"
        self.plain = "in the dict"


def test_an_unpickled_component_holds_what_pickle_would_restore():
    copy = pickle.loads(pickle.dumps(Stateful()))
    assert copy.counts == {"a": 1}
    assert copy.me is copy and copy.hook.__self__ is copy  # references to itself stay references
    assert copy.mode == "property" and copy.__dict__["mode"] == "fast"
    assert copy.__dict__[7] == "not a str key"
    guarded = pickle.loads(pickle.dumps(Guarded()))
    assert (guarded.n, guarded.sealed) == (3, True)
    slotted = pickle.loads(pickle.dumps(Slotted()))
    assert (slotted.slot, slotted.plain) == ("in a slot", "in the dict")


class Restoring:
    """A mixin that restores its own state."""

    def __setstate__(self, state):
        self.__dict__.update(state, restored_by="mixin")


class Mixed(Bolt, Restoring):
    def __init__(self):
        self.n = 1


def test_a_mixin_after_the_component_restores_its_own_state():
    copy = pickle.loads(pickle.dumps(Mixed()))
    assert (copy.n, copy.restored_by) == (1, "mixin")


def test_each_task_gets_its_own_copy_of_the_state():
    spec = TopologyBuilder()
    spec.set_spout("s", FixedTupleSpout("unused", [], ["x"]))
    spec.set_bolt("b", Stateful(), parallelism=2).shuffle("s")
    comp = spec.build().components["b"]
    one, two = comp.runnable(), comp.runnable()
    one.counts["a"] = 99
    assert two.counts == {"a": 1}


class InstanceAck(Spout):
    """Hears acks through an attribute set in open, not a method of its class."""

    def __init__(self, name, n):
        self.name, self.n = name, n

    def open(self, conf, context, collector):
        self.collector, self.i = collector, 0
        self.ack = lambda msg_id: Recorder.add(self.name, msg_id)

    def next_tuple(self):
        if self.i < self.n:
            self.collector.emit([self.i], msg_id=self.i)
            self.i += 1

    def declare_output_fields(self, declarer):
        declarer.declare(["x"])


def test_a_spout_whose_ack_is_an_instance_attribute_hears_every_tree():
    name = unique_name("instance-ack")
    b = TopologyBuilder()
    b.set_spout("s", InstanceAck(name, 50))
    b.set_bolt("r", RecordingBolt(name + ".seen")).shuffle("s")
    with LocalCluster({"squall.log.level": "WARNING"}) as cluster:
        cluster.submit("t", {"topology.acker.executors": 1}, b.build())
        wait_for(lambda: len(Recorder.get(name)) >= 50, 30, "50 acks")
        cluster.kill("t")
    assert sorted(Recorder.get(name)) == list(range(50))  # each tree once
