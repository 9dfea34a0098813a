"""Cutting a batch plan into stages: components that run together in one Spark task.

A bolt whose every subscription uses a grouping that lets any task take the tuple
(registered ``any_task``: shuffle, none, local-or-shuffle), all from components of one
stage, joins that stage: its tuples are handed over inside the Python worker, with no
shuffle and no checkpoint between. Every other bolt heads a stage of its own, keyed by
task: the records aimed at it are partitioned by target task, so partition i runs its
task i.

A stage runs in ``width`` partitions. Task j of a bolt in it runs in partition
``j % width``; a fused bolt needs at least ``width`` tasks, so that every partition has
one to hand tuples to (an input stage narrows to its bolts' smallest task count; a keyed
stage is as wide as its head has tasks). Spout input is cut into ``width`` parts, and
partition i plays spout task ``tasks[i % n]``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from squall.grouping import GROUPINGS
from squall.spark.plan import Plan
from squall.topology import SPOUT


@dataclass
class Stage:
    id: int
    components: list[str]             # in topological order; an input stage's spout first
    width: int                        # partitions; 0 = not fixed yet (an input stage alone)
    input: str | None = None          # input key, for a stage that reads a spout's input
    head: str | None = None           # the bolt partitioned by task, for a keyed stage
    upstream: list[int] = field(default_factory=list)  # stages whose records it reads
    max_width: int | None = None      # the input's limit on partitions (None: any)

    @property
    def bolts(self) -> list[str]:
        return self.components[1:] if self.input is not None else list(self.components)

    @property
    def input_key(self) -> str:
        """The input an input stage reads (ValueError for another stage)."""
        if self.input is None:
            raise ValueError(f"stage {self.id} reads no input")
        return self.input

    @property
    def head_bolt(self) -> str:
        """The bolt a keyed stage partitions by task (ValueError for another stage)."""
        if self.head is None:
            raise ValueError(f"stage {self.id} is not keyed")
        return self.head

    def partition_tasks(self, tasks: list[int], partition: int) -> list[int]:
        """The tasks (of a bolt with these task ids) that run in ``partition``."""
        return tasks[partition::self.width]


def plan_stages(plan: Plan, input_widths: Mapping[str, int | None] | None = None,
                default_width: int = 2) -> list[Stage]:
    """Stages in an order that puts every stage after those it reads.

    input_widths: per input key, the most partitions its input can be cut into (None:
    any); default_width: the width of an input stage no bolt joins.
    """
    topo = plan.topology
    input_widths = dict(input_widths or {})
    stages: list[Stage] = []
    stage_of: dict[str, Stage] = {}      # bolt -> its stage
    by_input: dict[tuple[str, str], Stage] = {}
    for key, (spout, stream) in plan.inputs.items():
        st = Stage(len(stages), [spout], 0, input=key, max_width=input_widths.get(key))
        stages.append(st)
        by_input[(spout, stream)] = st
    for comp in plan.order:
        spec = topo.components[comp]
        if spec.kind == SPOUT:
            continue
        n_tasks = len(plan.component_to_tasks[comp])
        # Subscriptions that can carry tuples: to running bolts, or to spout streams fed
        # by an input (a spout stream without input emits nothing in a batch run).
        subs = [s for s in spec.inputs if s.component in stage_of or (s.component, s.stream) in by_input]
        sources = {(by_input[(s.component, s.stream)] if (s.component, s.stream) in by_input
                    else stage_of[s.component]).id for s in subs}
        target = stages[next(iter(sources))] if len(sources) == 1 else None
        if (target is not None and subs and all(GROUPINGS.get(s.grouping.kind).any_task for s in subs)
                and _fits(target, n_tasks)):
            target.components.append(comp)
            if target.input is not None:
                target.width = min(target.width or n_tasks, n_tasks)
            stage_of[comp] = target
            continue
        st = Stage(len(stages), [comp], n_tasks, head=comp, upstream=sorted(sources))
        stages.append(st)
        stage_of[comp] = st
    for st in stages:
        if st.input is not None:
            if not st.width:
                st.width = default_width
            if st.max_width is not None:
                st.width = max(1, min(st.width, st.max_width))
    return stages


def _fits(stage: Stage, n_tasks: int) -> bool:
    # A keyed stage's width is its head's task count: a fused bolt needs as many tasks.
    # An input stage narrows to fit (an input can be cut into any number of parts).
    return stage.input is not None or n_tasks >= stage.width


def stage_levels(stages: list[Stage]) -> list[list[Stage]]:
    """Stages grouped by depth: each group runs as one Spark job after those above it."""
    depth: dict[int, int] = {}
    for st in stages:  # upstream stages come first in the list
        depth[st.id] = 1 + max(depth[u] for u in st.upstream) if st.upstream else 0
    levels: dict[int, list[Stage]] = {}
    for st in stages:
        levels.setdefault(depth[st.id], []).append(st)
    return [levels[d] for d in sorted(levels)]


def sink_stage(stages: list[Stage], component: str) -> Stage:
    for st in stages:
        if component in st.components:
            return st
    raise KeyError(component)


@dataclass
class LevelLayout:
    """How one level's stage partitions ("slots": (stage id, partition)) are packed into
    Spark partitions: every level needs one job and at most one shuffle, whatever the
    number of its stages and tasks, and never more Spark tasks than cores to fill."""

    inputs: list[list[tuple[int, int]]]   # Spark partition -> file-input slots it runs
    frames: list[int]                     # DataFrame-input stages (one Spark partition per slot)
    keyed: list[list[tuple[int, int]]]    # Spark partition of the level's shuffle -> keyed slots

    def task_partition(self, stages: list[Stage], heads: dict[str, list[int]]) -> dict[int, int]:
        """Head task id -> the Spark partition of the level's shuffle that runs it."""
        out = {}
        for p, slots in enumerate(self.keyed):
            for sid, vp in slots:
                out[heads[stages[sid].head_bolt][vp]] = p
        return out


def layout(level: list[Stage], parallelism: int, frame_inputs: set[str]) -> LevelLayout:
    """Pack a level's slots round robin into at most ``parallelism`` Spark partitions per
    kind (file inputs, keyed); a DataFrame input keeps its own partitions."""
    files = [(st.id, p) for st in level if st.input is not None and st.input not in frame_inputs
             for p in range(st.width)]
    keyed = [(st.id, p) for st in level if st.input is None for p in range(st.width)]

    def pack(slots: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
        n = min(len(slots), max(1, parallelism))
        return [slots[i::n] for i in range(n)]

    return LevelLayout(pack(files), [st.id for st in level if st.input in frame_inputs], pack(keyed))
