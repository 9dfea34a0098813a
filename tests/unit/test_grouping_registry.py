"""Every registered grouping goes through every reader of a topology: the builder, nimbus's
submission checks, Flux, streamparse (when Storm's Thrift names it), the runtime's choosers
and the backfill's stages. A grouping missing from any of them fails here; so does a module
that registers one without being named among the registry's providers."""
from __future__ import annotations

import textwrap

import pytest
from streamparse.dsl.stream import _Grouping
from streamparse.thrift import NullStruct

from squall.components import Bolt, Spout
from squall.daemons.nimbus.code_store import structure_of
from squall.daemons.nimbus.validate import SubmissionError, check_structure
from squall.grouping import GROUPINGS, make_chooser
from squall.multilang import flux
from squall.multilang.streamparse_topology import _subscribe
from squall.spark.plan import make_plan
from squall.spark.stages import plan_stages
from squall.topology import TopologyBuilder, TopologyError
from squall.tuple import Fields
from support.multilang import flux_components
from support.paths import REPO

KINDS = GROUPINGS.names()
FIRST_TASK = f"{flux_components.__name__}.FirstTask"  # a CustomStreamGrouping


class Numbers(Spout):
    def __init__(self, direct: bool = False) -> None:
        self.direct = direct

    def next_tuple(self):
        pass

    def declare_output_fields(self, declarer):
        declarer.declare(["n"], direct=self.direct)


class Sink(Bolt):
    def execute(self, tuple):
        pass

    def declare_output_fields(self, declarer):
        pass


def topology(kind: str):
    spec = GROUPINGS.get(kind)
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(direct=spec.direct))
    sink = builder.set_bolt("sink", Sink(), 3)
    if spec.custom:
        sink.custom("numbers", flux_components.FirstTask())
    else:
        sink.grouping("numbers", kind, fields=["n"] if spec.fields else None)
    return builder.build()


@pytest.mark.parametrize("kind", KINDS)
def test_the_builder_and_nimbus_take_it(kind):
    topo = topology(kind)
    assert topo.components["sink"].inputs[0].grouping.kind == kind
    assert check_structure(structure_of(topo)) == {"numbers": (1, 1), "sink": (3, 3)}


def test_nimbus_refuses_a_grouping_nobody_registered():
    structure = structure_of(topology("shuffle"))
    structure["components"]["sink"]["inputs"][0][2] = "nearest"
    with pytest.raises(SubmissionError, match="unknown grouping 'nearest'"):
        check_structure(structure)
    with pytest.raises(TopologyError, match="unknown grouping 'nearest'"):
        TopologyBuilder().set_bolt("sink", Sink()).grouping("numbers", "nearest")


@pytest.mark.parametrize("kind", KINDS)
def test_flux_reads_it_in_capitals(kind, tmp_path):
    spec = GROUPINGS.get(kind)
    extra = ("args: [n]" if spec.fields else f"customClass: {{className: {FIRST_TASK}}}" if spec.custom else "")
    path = tmp_path / "topology.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: every-grouping
        spouts:
          - id: numbers
            className: {Numbers.__module__}.Numbers
            constructorArgs: [{str(spec.direct).lower()}]
        bolts:
          - id: sink
            className: {Sink.__module__}.Sink
            parallelism: 3
        streams:
          - from: numbers
            to: sink
            grouping: {{type: {kind.upper()}, {extra}}}
        """), encoding="utf-8")
    topo, _, _ = flux.load(path)
    assert topo.components["sink"].inputs[0].grouping.kind == kind


@pytest.mark.parametrize("kind", [k for k in KINDS if GROUPINGS.get(k).thrift is not None])
def test_streamparse_reads_the_ones_storms_thrift_names(kind):
    spec = GROUPINGS.get(kind)
    grouping = _Grouping(**{spec.thrift: ["n"] if spec.fields else NullStruct()})
    stream = type("StreamId", (), {"componentId": "numbers", "streamId": "default"})()
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(direct=spec.direct))
    declarer = builder.set_bolt("sink", Sink(), 3)
    _subscribe(declarer, type("Spec", (), {"name": "sink", "inputs": {stream: grouping}})())
    assert builder.build().components["sink"].inputs[0].grouping.kind == kind


@pytest.mark.parametrize("kind", KINDS)
def test_the_runtime_chooses_tasks_with_it(kind):
    spec = GROUPINGS.get(kind)
    grouping = topology(kind).components["sink"].inputs[0].grouping
    chooser = make_chooser(grouping, Fields(["n"]), [4, 2, 3], {3}, 1)
    if spec.direct:
        assert chooser is None  # the emitter names the task
        return
    assert chooser is not None
    for n in range(20):
        targets = chooser([n])
        assert targets and set(targets) <= {2, 3, 4}, targets


@pytest.mark.parametrize("kind", [k for k in KINDS if not GROUPINGS.get(k).direct])
def test_a_backfill_plans_stages_with_it(kind):
    topo = topology(kind)
    plan = make_plan(topo, ["numbers"], None, {"topology.acker.executors": 0}, False, ())
    stages = plan_stages(plan)
    fused = [st for st in stages if "sink" in st.components and "numbers" in st.components]
    assert bool(fused) == GROUPINGS.get(kind).any_task  # any task may take a tuple: no shuffle between


def test_every_module_that_registers_a_grouping_is_a_provider():
    """A module calling GROUPINGS.register must be imported by the registry's first reader,
    or a process that has not imported it would not know its groupings."""
    registering = {".".join(path.relative_to(REPO).with_suffix("").parts) for path in (REPO / "squall").rglob("*.py")
                   if "GROUPINGS.register(" in path.read_text(encoding="utf-8")}
    assert registering - {"squall.grouping"} <= set(GROUPINGS.providers)
    assert {GROUPINGS.origin(k) for k in KINDS} <= {"squall.grouping", *GROUPINGS.providers}
    for provider in GROUPINGS.providers:
        assert any(GROUPINGS.origin(k) == provider for k in KINDS), f"{provider} registers no grouping"

