"""TopologyBuilder, validation errors, serialization and Storm's task/executor model."""
import threading

import pytest

from squall import Bolt, Spout, Topology, TopologyBuilder, TopologyError
from squall.grouping import CustomStreamGrouping
from squall.model import ACKER, executors, partition, system_topology, task_ids
from squall.testing.components import EchoBolt, FixedTupleSpout, NullBolt
from squall.topology import ComponentSpec


class Words(Spout):
    def next_tuple(self):
        pass

    def declare_output_fields(self, d):
        d.declare(["word"])
        d.declare(["word", "n"], stream="pairs")
        d.declare(["x"], stream="direct_out", direct=True)


def builder():
    b = TopologyBuilder()
    b.set_spout("words", Words(), 2)
    return b


def test_build_gives_immutable_serializable_topology():
    b = builder()
    b.set_bolt("echo", EchoBolt(["word"]), 3, num_tasks=6).fields("words", ["word"]).shuffle("words", "pairs")
    b.set_bolt("sink", NullBolt()).global_("echo").direct("words", "direct_out")
    topo = b.build()
    again = Topology.from_bytes(topo.to_bytes())
    assert list(again.components) == ["echo", "sink", "words"]
    echo = again.components["echo"]
    assert (echo.parallelism, echo.num_tasks) == (3, 6)
    assert [(s.component, s.stream, s.grouping.kind) for s in echo.inputs] == [
        ("words", "default", "fields"), ("words", "pairs", "shuffle")]
    assert list(again.stream_fields("words", "pairs")) == ["word", "n"]
    with pytest.raises(TypeError):
        again.components["new"] = echo  # read-only mapping
    assert isinstance(echo.instantiate(), EchoBolt) and echo.instantiate() is not echo.instantiate()


@pytest.mark.parametrize("make, message", [
    (lambda b: b.set_bolt("x", NullBolt()).shuffle("nope"), "subscribes to unknown component 'nope'"),
    (lambda b: b.set_bolt("x", NullBolt()).shuffle("words", "missing"),
     "stream 'missing' that component 'words' does not declare"),
    (lambda b: b.set_bolt("x", NullBolt()).fields("words", ["nope"]), "fields grouping on field 'nope'"),
    (lambda b: b.set_bolt("x", NullBolt()).partial_key("words", ["zz"]), "partial_key grouping on field 'zz'"),
    (lambda b: b.set_bolt("x", NullBolt()).direct("words"), "not declared direct"),
    (lambda b: b.set_bolt("x", NullBolt()).shuffle("words", "direct_out"), "is direct and needs a direct grouping"),
    (lambda b: b.set_bolt("words", NullBolt()), "duplicate component id 'words'"),
    (lambda b: b.set_bolt("__acker", NullBolt()), "reserved for system components"),
    (lambda b: b.set_bolt("__system", NullBolt()), "reserved for system components"),
    (lambda b: b.set_bolt("x", NullBolt(), 0), "parallelism must be an integer >= 1"),
    (lambda b: b.set_bolt("x", NullBolt(), 1, num_tasks=0), "num_tasks must be an integer >= 1"),
    (lambda b: b.set_bolt("x", Spout()), "must be a Bolt instance"),
    (lambda b: b.set_bolt("x", NullBolt(), 1, num_tasks=1_000_000).shuffle("words"), "at most 1000000 are supported"),
    (lambda b: b.set_bolt("x", NullBolt()).add_configuration("topology.workerz", 1),
     "unknown config key 'topology.workerz'"),
])
def test_validation_errors_name_the_problem(make, message):
    b = builder()
    with pytest.raises(TopologyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make(b)
        b.build()


def test_component_that_cannot_be_serialized_is_named():
    class Holder(Bolt):  # a local class cannot be pickled by reference
        def execute(self, t):
            pass

    b = builder()
    b.set_bolt("holder", Holder()).shuffle("words")
    with pytest.raises(TopologyError, match="component 'holder' cannot be serialized"):
        b.build()
    b2 = builder()
    bolt = NullBolt()
    bolt.lock = threading.Lock()
    b2.set_bolt("locked", bolt).shuffle("words")
    with pytest.raises(TopologyError, match="component 'locked' cannot be serialized"):
        b2.build()


def test_topology_needs_a_spout_and_string_fields():
    with pytest.raises(TopologyError, match="at least one spout"):
        TopologyBuilder().build()

    class BadFields(Spout):
        def declare_output_fields(self, d):
            d.declare("word")

    b = TopologyBuilder()
    b.set_spout("s", BadFields())
    with pytest.raises(TopologyError, match="fields must be a list of names"):
        b.build()


def test_custom_grouping_must_subclass_the_base():
    b = builder()
    with pytest.raises(TopologyError, match="CustomStreamGrouping"):
        b.set_bolt("x", NullBolt()).custom("words", object())
    b.set_bolt("y", NullBolt()).custom("words", CustomStreamGrouping())
    assert b.build().components["y"].inputs[0].grouping.kind == "custom"


def test_task_ids_are_topology_wide_and_executors_contiguous():
    b = builder()
    b.set_bolt("echo", EchoBolt(["word"]), 3, num_tasks=7).shuffle("words")
    topo = system_topology(b.build(), {"topology.workers": 2, "topology.acker.executors": None})
    tasks = task_ids(topo)
    # components in id order: __acker (2 tasks), echo (7), words (2)
    assert [tasks[t] for t in sorted(tasks)] == [ACKER] * 2 + ["echo"] * 7 + ["words"] * 2
    ex = executors(topo, tasks)
    assert [e for e, c in sorted(ex.items()) if c == "echo"] == [(3, 5), (6, 7), (8, 9)]
    assert [e for e, c in sorted(ex.items()) if c == "words"] == [(10, 10), (11, 11)]
    # rebalance override: fewer executors for echo
    assert [e for e, c in sorted(executors(topo, tasks, {"echo": 2}).items()) if c == "echo"] == [(3, 6), (7, 9)]


def test_partition_sizes_differ_by_at_most_one():
    assert partition(list(range(1, 11)), 3) == [(1, 4), (5, 7), (8, 10)]
    assert partition([5], 4) == [(5, 5)]


def test_acking_off_leaves_no_acker():
    topo = builder().build()
    assert ACKER not in system_topology(topo, {"topology.workers": 1, "topology.acker.executors": 0}).components


def test_a_component_spec_pickled_before_wrappers_loads_without_one():
    """A topology stored by the previous release (8 fields, no wrapper) still loads after an
    upgrade: its components run unwrapped, as they were built."""
    builder = TopologyBuilder()
    builder.set_spout("s", FixedTupleSpout("old-spec", [[1]], ["n"]), 1)
    spec = builder.build().components["s"]
    old_state = spec.__getstate__()[:8]
    restored = ComponentSpec.__new__(ComponentSpec)
    restored.__setstate__(old_state)
    assert restored.wrapper is None and restored.id == "s" and restored.num_tasks == 1
