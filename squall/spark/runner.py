"""One partition of one stage, inside a Spark Python worker.

A ``StageRun`` makes the bolt tasks that run in its partition (``prepare`` as in
streaming), takes the stage's input (spout values, or batches of values aimed at the
head bolt's task), and hands every emit on through boxes: a fused bolt's task executes
its box's tuples right here, in topological order, after each batch of input; boxes
bound for other stages and sink boxes leave the partition as records:

- ``(task, (component, stream, source task, payload))`` for a task of another stage,
- ``(sink name, payload)`` for a sink,

where the payload is a list of value lists in the encoding every boundary uses
(squall.values; one pack call per batch, not per tuple), so a backfill carries and refuses
exactly what streaming does: a value no rule carries fails its own tuple (reported
against the component that emitted it), and the rest of the batch goes on. When the
input ends, each bolt in turn gets its remaining tuples, a simulated tick if it has one,
and ``cleanup``, as a streaming executor would.
"""
from __future__ import annotations

import traceback
from collections.abc import Iterable, Iterator
from typing import Any

import structlog

from squall.contrib.columns import ColumnTypes
from squall.spark import progress as _progress
from squall.spark.collector import BatchBoltCollector, BoxRoute
from squall.spark.stages import Stage
from squall.spark.stateful import BatchTask
from squall.spark.tasks import ERRORS_KEPT, BoltTaskError, PlanRef, WorkerPlan, merge_stats
from squall.tuple import SYSTEM_COMPONENT, TICK_STREAM, Fields, Source, Tuple
from squall.values import ValueCodec

log = structlog.get_logger("squall.spark")

PUMP_ROWS = 2048          # input rows between hand-overs to fused bolts
_TICK_FIELDS = Fields(["rate_secs"])
_new_tuple = Tuple.__new__  # object.__new__, or the allocator of Tuple when squall.tuple is compiled


class TaskRun:
    """One bolt task: its instance, collector and input boxes."""

    def __init__(self, run: "StageRun", component: str, task: int) -> None:
        plan = run.plan
        self.component, self.task = component, task
        self.executed = self.errors = 0
        self.texts: list[str] = []
        self.inputs: list[tuple[Source, list]] = []
        conf = plan.component_conf(component)
        try:
            self.bolt = plan.instantiate(component)
        except Exception as exc:
            raise BoltTaskError(f"bolt {component!r} failed on Spark: {type(exc).__name__}: {exc} "
                                f"(loading task {task})") from exc
        self.context = plan.context(task, conf)
        routes = plan.routes(component, task, self.context, run.stage, run.partition)
        self.routes = routes
        self.coll = BatchBoltCollector(component, task, routes, self.report)
        self.conf = conf
        self.basic = bool(getattr(self.bolt, "_auto_anchor", False))
        self.index = plan.component_to_tasks[component].index(task)
        self.batch: BatchTask | None = None

    def prepare(self) -> None:
        try:
            self.bolt.prepare(self.conf, self.context, self.coll)
            # State (empty, or a live topology's snapshot) and windows: squall.spark.stateful.
            self.batch = BatchTask(self.bolt, self.conf, self.component, self.index)
        except Exception as exc:
            raise BoltTaskError(f"bolt {self.component!r} task {self.task}: prepare raised "
                                f"{type(exc).__name__}: {exc}") from exc

    def report(self, error: BaseException | str, where: str = "report_error") -> None:
        self.errors += 1
        if isinstance(error, BaseException):
            text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        else:
            text = str(error)
        if len(self.texts) < ERRORS_KEPT:
            self.texts.append(f"task {self.task} {where}: {text.strip()}")
        log.error("user code raised", component=self.component, task=self.task, where=where,
                  error=text.strip().splitlines()[-1] if text.strip() else "")

    def run(self, src: Source, batch: list) -> None:
        """Execute one tuple per value list, with streaming's rules: a BasicBolt acks after
        ``execute`` unless it failed the tuple; an exception is reported and fails it."""
        execute, coll, basic = self.bolt.execute, self.coll, self.basic
        acked = 0
        for values in batch:
            tup = _new_tuple(Tuple)
            tup.values = values
            tup.source = src
            coll._failed = False
            try:
                execute(tup)
            except Exception as exc:
                self.report(exc, "execute")
                coll.fail(tup)
            else:
                if basic and not coll._failed:
                    acked += 1
        coll.acked += acked
        self.executed += len(batch)

    def drain(self) -> None:
        for src, box in self.inputs:
            if box:
                self.run(src, box)
                box.clear()

    def finish(self, tick: float | None) -> None:
        self.drain()
        if self.batch is not None:
            self.batch.finish()  # a windowed bolt fires its windows after its last input
            self.batch.close()
        if tick is not None:
            self.run(Source(SYSTEM_COMPONENT, -1, TICK_STREAM, _TICK_FIELDS), [[tick]])
        try:
            self.bolt.cleanup()
        except Exception as exc:
            self.report(exc, "cleanup")

    def stats(self) -> dict[str, Any]:
        return {"tasks": 1, "executed": self.executed, "acked": self.coll.acked, "failed": self.coll.failed,
                "errors": self.errors, "emitted": {s: r.emitted for s, r in self.routes.items()},
                "error_texts": self.texts}


class StageRun:
    """Partition ``partition`` of ``stage``."""

    def __init__(self, plan: WorkerPlan, stage: Stage, partition: int,
                 progress: "PartitionProgress | None" = None) -> None:
        self.plan, self.stage, self.partition = plan, stage, partition
        self.codec = ValueCodec(plan.conf.get("topology.serializers") or {})
        self._packer = self.codec.packer()
        self.remote: list[tuple[int, tuple, list]] = []     # (target task, (comp, stream, task), box)
        self.sinks: list[tuple[str, list, ColumnTypes, tuple]] = []  # (name, box, types, (comp, stream, task))
        self.sink_types: dict[str, ColumnTypes] = {}
        self.rows = 0             # spout values taken in
        self.malformed: list[str] = []
        self.n_malformed = 0
        self.tasks: dict[str, list[TaskRun]] = {}
        self.by_task: dict[int, TaskRun] = {}
        c2t = plan.component_to_tasks
        for comp in stage.bolts:
            runs = [TaskRun(self, comp, t) for t in stage.partition_tasks(c2t[comp], partition)]
            self.tasks[comp] = runs
            for r in runs:
                self.by_task[r.task] = r
        self.spout_route: BoxRoute | None = None
        self._sources: dict[tuple, Source] = {}
        if stage.input is not None:
            spout, stream = stage.components[0], plan.inputs[stage.input].stream
            tasks = c2t[spout]
            task = tasks[partition % len(tasks)]
            context = plan.context(task, plan.component_conf(spout))
            routes = plan.routes(spout, task, context, stage, partition)
            self.spout_route = routes[stream]
            self.spout = (spout, task, routes)
            self._wire(spout, task, routes)
        for comp, runs in self.tasks.items():
            for r in runs:
                self._wire(comp, r.task, r.routes)
        self.progress = progress
        if progress is not None:
            progress.runs.append(self)

    def _wire(self, comp: str, task: int, routes: dict[str, BoxRoute]) -> None:
        """Give every route a box per target task, and a sink box if it is a sink."""
        topo, c2t, plan = self.plan.topology, self.plan.component_to_tasks, self.plan
        fused = set(self.stage.bolts)
        sinks = {cs: name for name, cs in plan.sinks.items()}
        for stream, route in routes.items():
            fields = route.source.fields
            for bolt, _grouping in topo.subscribers(comp, stream):
                if bolt not in plan.running:
                    continue
                if bolt in fused:
                    for t in self.stage.partition_tasks(c2t[bolt], self.partition):
                        if t not in route.boxes:
                            box: list = []
                            route.boxes[t] = box
                            self.by_task[t].inputs.append((Source(comp, task, stream, fields), box))
                else:
                    for t in c2t[bolt]:
                        if t not in route.boxes:
                            box = []
                            route.boxes[t] = box
                            self.remote.append((t, (comp, stream, task), box))
            name = sinks.get((comp, stream))
            if name is not None:
                route.sink = []
                types = self.sink_types.get(name)
                if types is None:
                    types = self.sink_types[name] = ColumnTypes(list(fields))
                self.sinks.append((name, route.sink, types, (comp, stream, task)))

    # -- running ----------------------------------------------------------------------
    def prepare(self) -> None:
        for comp in self.stage.bolts:
            for r in self.tasks[comp]:
                r.prepare()

    def pump(self) -> Iterator[tuple]:
        """Run every fused bolt over what is in its boxes, then send what leaves."""
        for comp in self.stage.bolts:
            for r in self.tasks[comp]:
                r.drain()
        yield from self.flush()
        if self.progress is not None:
            self.progress.update()

    def flush(self) -> Iterator[tuple]:
        for target, source, box in self.remote:
            if box:
                payload = self._pack(box, source)
                box.clear()
                if payload is not None:
                    yield (target, (*source, payload))
        for name, box, types, source in self.sinks:
            if box:
                payload = self._pack(box, source)
                if payload is not None:
                    types.observe(box)
                    yield (name, payload)
                box.clear()

    def _pack(self, box: list, source: tuple) -> bytes | None:
        """``box`` encoded; a value list that does not encode is refused alone (reported
        against its component, as streaming does) and left out of ``box``."""
        try:
            return self._packer.pack(box)
        except Exception:  # noqa: BLE001 - looked at value list by value list below
            self._packer.reset()
        comp, stream, task = source
        fields = list(self.plan.topology.stream_fields(comp, stream))
        kept = []
        for values in box:
            try:
                self.codec.pack(values)
            except Exception:  # noqa: BLE001 - explained and reported
                reason, _ = self.codec.refusal(values, fields, comp, stream)
                run = self.by_task.get(task)
                if run is not None:
                    run.report(f"SerializationError: {reason}")
                else:
                    self.malformed_line(f"SerializationError: {reason}")
                continue
            kept.append(values)
        box[:] = kept
        return self._packer.pack(kept) if kept else None

    def executed(self) -> int:
        return sum(r.executed for runs in self.tasks.values() for r in runs)

    def finish(self) -> Iterator[tuple]:
        ticks = self.plan.ticks
        # In topological order: a bolt's tasks finish after every fused bolt above them,
        # so their boxes hold all they will get (cleanup emits included).
        for comp in self.stage.bolts:
            for r in self.tasks[comp]:
                r.finish(ticks.get(comp))
        yield from self.flush()

    def run_input(self, values_iter: Iterable[list]) -> Iterator[tuple]:
        """An input stage: every value list is one spout emit."""
        if self.spout_route is None:
            raise ValueError(f"stage {self.stage.id} reads no input")
        self.prepare()
        yield from self.pump()
        put = self.spout_route.put
        n = 0
        for values in values_iter:
            put(values)
            n += 1
            if n >= PUMP_ROWS:
                self.rows += n
                n = 0
                yield from self.pump()
        self.rows += n
        yield from self.pump()
        yield from self.finish()

    @property
    def head_task(self) -> int:
        return self.tasks[self.stage.head_bolt][0].task

    def feed(self, record: tuple) -> Iterator[tuple]:
        """A keyed stage: one batch aimed at this partition's task of the head bolt."""
        comp, stream, task, payload = record
        key = (comp, stream, task)
        src = self._sources.get(key)
        if src is None:
            src = self._sources[key] = Source(comp, task, stream, self.plan.topology.stream_fields(comp, stream))
        self.tasks[self.stage.head_bolt][0].run(src, self.codec.unpack(payload))
        yield from self.pump()

    def malformed_line(self, text: str) -> None:
        self.n_malformed += 1
        if len(self.malformed) < ERRORS_KEPT:
            self.malformed.append(text)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for comp, runs in self.tasks.items():
            for r in runs:
                s = r.stats()
                merge_stats(out.setdefault(comp, {}), s)
        if self.stage.input is not None:
            spout = self.spout[0]
            stream = self.plan.inputs[self.stage.input].stream
            out[spout] = {"emitted": {stream: self.rows}, "malformed": self.n_malformed}
            out["__inputs__"] = {self.stage.input: {"rows": self.rows, "malformed": self.n_malformed,
                                                    "malformed_texts": self.malformed}}
        return out


class PartitionProgress:
    """One Spark partition's counts over the stage partitions it runs, sent to the driver."""

    def __init__(self, plan: WorkerPlan, level: int, slot: int) -> None:
        self.runs: list[StageRun] = []
        self.sender = _progress.Sender(plan.progress, level, slot, _attempt())

    def update(self, force: bool = False) -> None:
        if self.sender.address is not None:
            self.sender.update(sum(r.rows for r in self.runs), sum(r.executed() for r in self.runs), force)

    def close(self) -> None:
        self.update(force=True)
        self.sender.close()


def _attempt() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.attemptNumber() if ctx is not None else 0
    except Exception:
        return 0


def _report(runs: list[StageRun], stats: Any, types: Any) -> None:
    total: dict[str, Any] = {}
    sink_types: dict[str, ColumnTypes] = {}
    for run in runs:
        merge_stats(total, run.stats())
        for name, t in run.sink_types.items():
            have = sink_types.get(name)
            sink_types[name] = t if have is None else have.add(t)
    stats.add(total)
    if sink_types:
        types.add(sink_types)


def run_inputs(ref: PlanRef, level: int, base: int, stats: Any, types: Any, partition: int,
               groups: Iterable[list[tuple[int, int, Any]]]) -> Iterator[tuple]:
    """``mapPartitionsWithIndex`` function for a level's file inputs: each element is the
    (stage id, stage partition, file parts) slots this Spark partition runs, in turn.
    ``base + partition`` numbers the partition among the level's for progress reports."""
    plan = ref.get()
    progress = PartitionProgress(plan, level, base + partition)
    for group in groups:
        for sid, vp, parts in group:
            stage = plan.stages[sid]
            run = StageRun(plan, stage, vp, progress)
            yield from run.run_input(plan.inputs[stage.input_key].prepared.read(parts, run.malformed_line))
    progress.close()
    _report(progress.runs, stats, types)


def run_frame(ref: PlanRef, level: int, base: int, stage_id: int, stats: Any, types: Any, partition: int,
              rows: Iterable[Any]) -> Iterator[tuple]:
    """``mapPartitionsWithIndex`` function for a DataFrame input: Spark partition i is the
    stage's partition i."""
    plan = ref.get()
    stage = plan.stages[stage_id]
    progress = PartitionProgress(plan, level, base + partition)
    run = StageRun(plan, stage, partition, progress)
    yield from run.run_input(plan.inputs[stage.input_key].values(rows, run.malformed_line))
    progress.close()
    _report(progress.runs, stats, types)


def run_keyed(ref: PlanRef, level: int, base: int, stats: Any, types: Any, partition: int,
              items: Iterable[tuple]) -> Iterator[tuple]:
    """``mapPartitionsWithIndex`` function for a level's shuffle: this Spark partition runs
    the keyed slots the level's layout gives it, each fed the records for its head task."""
    plan = ref.get()
    progress = PartitionProgress(plan, level, base + partition)
    runs = [StageRun(plan, plan.stages[sid], vp, progress) for sid, vp in plan.layouts[level].keyed[partition]]
    by_task = {run.head_task: run for run in runs}
    for run in runs:
        run.prepare()
        yield from run.pump()
    for task, record in items:
        yield from by_task[task].feed(record)
    for run in runs:
        yield from run.finish()
    progress.close()
    _report(runs, stats, types)
