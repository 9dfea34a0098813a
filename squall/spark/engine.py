"""``run``: a topology over bounded inputs on Spark, stage by stage.

The plan is cut into stages (``squall.spark.stages``): bolts fused with what feeds
them where the grouping allows, one stage per keyed bolt otherwise. Stages run level
by level, one Spark job per level; each stage's output records are locally
checkpointed: computed once and never recomputed from their lineage, so every bolt
task runs exactly once (its side effects happen once), also when a sink is read again.
A keyed stage reads its upstream stages' records for its tasks, partitioned by task.
Local checkpoints live on the executors: on a cluster, keep executors alive for the
run (no dynamic allocation that removes them), and read the returned sinks before
stopping the session.
"""
from __future__ import annotations

import functools
import pickle
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import structlog

from squall import config as _config
from squall.contrib.sources import BackfillSource
from squall.model import system_topology
from squall.spark import progress as _progress
from squall.spark import ship
from squall.spark import sinks as _sinks
from squall.spark.inputs import StageInput
from squall.spark.plan import BackfillError, Plan, make_plan
from squall.spark.runner import run_frame, run_inputs, run_keyed
from squall.spark.stages import LevelLayout, Stage, layout, plan_stages, sink_stage, stage_levels
from squall.spark.tasks import PlanRef, StatsParam, TypesParam, WorkerPlan
from squall.topology import Topology

log = structlog.get_logger("squall.spark")


class BackfillResult(Mapping):
    """Sink name (``component`` or ``component:stream``) -> DataFrame of what it emitted
    (made when first asked for; ``records`` gives the exact value lists), with the run's
    facts: ``stats`` per component, ``rows`` per sink, ``malformed`` lines per input (and
    the first few reasons in ``malformed_texts``), ``sinks``
    (name -> (component, stream)), ``order`` (components as run), ``stages`` (their
    grouping into Spark stages), ``excluded``, ``seconds``."""

    def __init__(self, spark: Any, plan: Plan, stages: list[Stage], outputs: dict[int, Any],
                 stats: dict, types: dict) -> None:
        self._spark, self._plan, self._outputs, self._types = spark, plan, outputs, types
        self._frames: dict[str, Any] = {}
        self.serializers: dict[str, str] = dict(plan.conf.get("topology.serializers") or {})
        self.stats: dict[str, dict[str, Any]] = stats
        self.sinks: dict[str, tuple[str, str]] = dict(plan.sinks)
        self.order: list[str] = list(plan.order)
        self.excluded: list[str] = list(plan.excluded)
        self.live: list[str] = list(plan.live)
        self.stages: list[list[str]] = [list(s.components) for s in stages]
        self._stage_of = {name: sink_stage(stages, comp).id for name, (comp, _) in plan.sinks.items()}
        self.rows: dict[str, int] = {
            name: int(stats.get(comp, {}).get("emitted", {}).get(stream, 0))
            for name, (comp, stream) in self.sinks.items()}
        inputs = stats.get("__inputs__", {})
        self.malformed: dict[str, int] = {k: int(inputs.get(k, {}).get("malformed", 0)) for k in plan.inputs}
        self.malformed_texts: dict[str, list[str]] = {k: list(inputs.get(k, {}).get("malformed_texts", []))
                                                      for k in plan.inputs}
        self.seconds = 0.0

    @property
    def failed(self) -> int:
        """Tuples failed (explicitly or by an exception in execute) over all bolts."""
        return sum(int(s.get("failed", 0)) for s in self.stats.values() if isinstance(s, dict))

    def fields(self, sink: str) -> list[str]:
        comp, stream = self.sinks[sink]
        return list(self._plan.topology.stream_fields(comp, stream))

    def items_rdd(self, sink: str) -> Any:
        """The sink's records as they left its stage: (name, encoded batch of rows)."""
        return self._outputs[self._stage_of[sink]].filter(_sinks.SinkItems(sink))

    def records(self, sink: str) -> Any:
        """An RDD of the value lists the sink's component emitted on its stream, unchanged."""
        if sink not in self.sinks:
            raise KeyError(sink)
        return self.items_rdd(sink).flatMap(_sinks.Rows(self.serializers))

    def __getitem__(self, sink: str) -> Any:
        if sink not in self.sinks:
            raise KeyError(sink)
        df = self._frames.get(sink)
        if df is None:
            df = self._frames[sink] = _sinks.frame(self._spark, sink, self.fields(sink), self._types.get(sink),
                                                   self.records(sink))
        return df

    def __iter__(self) -> Iterator[str]:
        return iter(self.sinks)

    def __len__(self) -> int:
        return len(self.sinks)


def _worker_error(exc: BaseException) -> str | None:
    """The Python exception line of a failed Spark job (the last traceback's), if any."""
    text = str(exc)
    at = text.rfind("Traceback (most recent call last):")
    if at < 0:
        return None
    for line in text[at:].splitlines()[1:]:
        if line and not line[0].isspace() and not line.startswith(("Traceback", "The above", "During")):
            return line.strip()
    return None


def failure(exc: BaseException, what: str, python: str) -> BackfillError:
    """A BackfillError saying what a failed Spark job was doing and why it failed."""
    line = _worker_error(exc)
    if line is None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return BackfillError(f"{what} failed on Spark: {first}")
    own = re.match(r"(?:[\w.]*\.)?(?:BoltTaskError|SinkValueError): (.*)", line)
    msg = own.group(1) if own else f"{what} failed on Spark: {line}"
    m = re.search(r"No module named '([^']+)'", line)
    if m:
        mod = m.group(1)
        if mod.split(".")[0] in ("squall", "msgpack", "structlog", "yaml"):
            msg += (f"; Spark's Python workers run {python!r}, which lacks squall: point "
                    "PYSPARK_PYTHON at a Python that has squall installed")
        else:
            msg += (f"; Spark's Python workers cannot import {mod!r}: ship the topology's code "
                    "(ship_code=True, the default) or install it where the workers run")
    return BackfillError(msg)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _needs_plain(df: Any) -> bool:
    return any(k in f.dataType.simpleString() for f in df.schema.fields for k in ("struct<", "binary"))


class ForTasks:
    """Filter: records aimed at one of ``tasks``."""

    def __init__(self, tasks: frozenset[int]) -> None:
        self.tasks = tasks

    def __call__(self, item: tuple) -> bool:
        return item[0] in self.tasks


class TaskPartition:
    """Partitioner: head task id -> the Spark partition that runs it."""

    def __init__(self, where: dict[int, int]) -> None:
        self.where = where

    def __call__(self, task: int) -> int:
        return self.where[task]


def _frame_input(key: str, df: Any, spout: str, stream: str, fields: Sequence[str]) -> tuple[Any, bool]:
    from pyspark.sql import functions as F

    if not hasattr(df, "columns") or not hasattr(df, "rdd"):
        raise BackfillError(f"input {key!r} must be a Spark DataFrame or a BackfillSource (a squall.spark.FileInput), "
                            f"got {type(df).__name__}")
    missing = [f for f in fields if f not in df.columns]
    if missing:
        raise BackfillError(
            f"input {key!r} has no column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}, "
            f"which spout {spout!r} declares on stream {stream!r} (declared fields: {list(fields)}; "
            f"the input's columns: {list(df.columns)})")
    sel = df.select(*[F.col(_quote(f)) for f in fields])
    return sel, _needs_plain(sel)


def _driver_host(sc: Any) -> str:
    master = sc.master or ""
    if master.startswith("local"):
        return "127.0.0.1"
    host = sc.getConf().get("spark.driver.host", None) or "127.0.0.1"
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


def run(topology: Topology, spark: Any, inputs: Mapping[str, Any], sinks: Sequence[str] | None = None,
        conf: Mapping[str, Any] | None = None, ticks: bool = False, exclude: Sequence[str] = (),
        name: str = "backfill", ship_code: bool = True,
        progress: Callable[[_progress.Progress], None] | None = None,
        progress_interval: float = 1.0) -> BackfillResult:
    """Run ``topology`` on Spark over bounded inputs; returns the sinks.

    inputs: ``{"spout" or "spout:stream": BackfillSource or DataFrame}``. A source
      (``squall.contrib.sources``) is read in the Python workers: a ``FileInput`` by the
      live spout's rules (``squall.spark.inputs``), a ``KafkaInput`` through its translator;
      a DataFrame's columns named as the spout's declared fields give the values (others
      are ignored), as PySpark turns them into Python values.
    sinks: streams to return, ``"component"`` (its default stream) or ``"component:stream"``;
      None means every stream of a running bolt that no running bolt reads.
    conf: topology configuration over squall's defaults (as ``LocalCluster.submit`` takes).
    ticks: send each task of a bolt with ``topology.tick.tuple.freq.secs`` one tick tuple after
      its last input; without it such a bolt is an error.
    exclude: components not to run, with everything downstream of them.
    ship_code: add the topology's non-installed modules to the Spark workers' path.
    progress: called about every ``progress_interval`` seconds while the run goes on, and
      once at the end, with a ``squall.spark.progress.Progress``.
    """
    from pyspark import StorageLevel

    started = time.monotonic()
    full = _config.build_config(conf, {"topology.name": name})
    plan = make_plan(topology, list(inputs), sinks, full, ticks, exclude)
    sc = spark.sparkContext
    python = getattr(sc, "pythonExec", "python3")
    topology_id = f"{name}-backfill-{int(time.time())}"
    for spec in topology.components.values():
        for sub in spec.inputs:
            if sub.grouping.custom is not None and type(sub.grouping.custom).__module__ == "__main__":
                raise BackfillError(f"bolt {spec.id!r}: custom grouping {type(sub.grouping.custom).__name__} "
                                    "is defined in __main__; define it in a module to run it on Spark")
    stage_inputs: dict[str, StageInput] = {}
    frames: dict[str, Any] = {}
    widths: dict[str, int | None] = {}
    for key, (spout, stream) in plan.inputs.items():
        fields = list(topology.stream_fields(spout, stream))
        value = inputs[key]
        if isinstance(value, BackfillSource):
            # Read by the workers themselves (files, a Kafka offset range): prepared here, it
            # cuts itself into at most ``max_width`` parts.
            try:
                source = value.prepare_source(key, fields, _spout_instance(topology, spout), full)
            except BackfillError:
                raise
            except ValueError as exc:  # the input's own error (e.g. a topic that does not exist)
                raise BackfillError(str(exc)) from None
            stage_inputs[key] = StageInput(key, stream, source)
            widths[key] = source.max_width
        else:
            sel, plain = _frame_input(key, value, spout, stream, fields)
            frames[key] = sel
            stage_inputs[key] = StageInput(key, stream, None, plain)
            widths[key] = max(1, sel.rdd.getNumPartitions())
    parallelism = max(1, sc.defaultParallelism)
    stages = plan_stages(plan, widths, parallelism)
    levels = stage_levels(stages)
    layouts = [layout(level, parallelism, set(frames)) for level in levels]
    if ship_code:
        ship.ship_topology_code(sc, topology)
    token = uuid.uuid4().hex
    listener = None
    if progress is not None:
        try:
            listener = _progress.Listener(_driver_host(sc), token)
        except OSError as exc:
            log.warning("no live progress from tasks", reason=str(exc))
    address = _progress.Address(_driver_host(sc), listener.port, token, progress_interval) if listener else None
    worker_plan = WorkerPlan(topology_id, topology, system_topology(topology, full), full,
                             plan.task_to_component, plan.component_to_tasks, plan.ticks,
                             ship.by_value_blobs(topology) if ship_code else {}, frozenset(plan.order),
                             plan.sinks, stages, layouts, stage_inputs, address)
    blob = sc.broadcast(pickle.dumps(worker_plan, protocol=5))
    ref = PlanRef(token, blob)
    stats = sc.accumulator({}, StatsParam())
    types = sc.accumulator({}, TypesParam())
    outputs: dict[int, Any] = {}   # stage id -> the RDD of its level's records
    level_of = {st.id: i for i, level in enumerate(levels) for st in level}
    sink_levels = {level_of[sink_stage(stages, comp).id] for comp, _ in plan.sinks.values()}
    last_reader: dict[int, int] = {}   # level -> the last level that reads its records
    for i, level in enumerate(levels):
        for st in level:
            for u in st.upstream:
                last_reader[level_of[u]] = max(last_reader.get(level_of[u], 0), i)
    level_rdds: list[Any] = []
    tracker = _progress.Tracker(progress, len(levels), len(plan.order), progress_interval, listener)
    ok = False
    try:
        for index, (level, lay) in enumerate(zip(levels, layouts)):
            rdd = _level_rdd(sc, index, stages, lay, stage_inputs, frames, outputs, plan, ref, stats, types)
            # A local checkpoint: computed once, kept by the executors, and never
            # recomputed from its lineage (which would run bolts a second time).
            # persist() first also keeps PySpark from fusing the next step's Python
            # function into this one's, which would bypass the checkpoint.
            rdd.setName(f"squall-level-{index}")
            rdd.persist(StorageLevel.MEMORY_AND_DISK)
            rdd.localCheckpoint()
            level_rdds.append(rdd)
            t0 = time.monotonic()
            tracker.start_level(index)
            before = _totals(stats.value)
            what = "; ".join(_describe(plan, st) for st in level)
            try:
                rdd.count()
            except Exception as exc:
                raise failure(exc, what if len(level) == 1 else f"one of {what}", python) from None
            for st in level:
                outputs[st.id] = rdd
            # Records no later level reads and no sink needs can go now, not at the end.
            for earlier, rdd_ in enumerate(level_rdds):
                if earlier not in sink_levels and last_reader.get(earlier, earlier) == index:
                    _unpersist(rdd_)
            after = _totals(stats.value)
            tracker.end_level(sum(len(st.components) for st in level), after[0] - before[0], after[1] - before[1])
            log.debug("stage done", components=[c for st in level for c in st.components],
                     seconds=round(time.monotonic() - t0, 3))
        result = BackfillResult(spark, plan, stages, outputs, dict(stats.value), dict(types.value))
        ok = True
    finally:
        tracker.close(ok)
        if listener is not None:
            listener.close()
        # Free every level's records except the sinks' (their DataFrames read them).
        for i, rdd_ in enumerate(level_rdds):
            if i not in sink_levels:
                _unpersist(rdd_)
        try:
            blob.unpersist()
        except Exception:
            pass
    result.seconds = time.monotonic() - started
    return result


def _unpersist(rdd: Any) -> None:
    try:
        rdd.unpersist()
    except Exception:  # the context may be gone already; nothing to free then
        pass


def _spout_instance(topology: Topology, spout: str) -> Any:
    try:
        return topology.components[spout].instantiate()
    except Exception as exc:
        raise BackfillError(f"spout {spout!r} cannot be loaded to read its input's rules: "
                            f"{type(exc).__name__}: {exc}") from None


def _totals(stats: Mapping[str, Any]) -> tuple[int, int]:
    rows = sum(int(v.get("rows", 0)) for v in stats.get("__inputs__", {}).values())
    executed = sum(int(v.get("executed", 0)) for k, v in stats.items() if k != "__inputs__" and isinstance(v, dict))
    return rows, executed


def _describe(plan: Plan, st: Stage) -> str:
    return ", ".join(f"{plan.topology.components[c].kind} {c!r}" for c in st.components)


def _level_rdd(sc: Any, index: int, stages: list[Stage], lay: LevelLayout, stage_inputs: Mapping[str, StageInput],
               frames: Mapping[str, Any], outputs: Mapping[int, Any], plan: Plan, ref: PlanRef, stats: Any,
               types: Any) -> Any:
    """One RDD running a whole level: its file inputs packed into a few partitions, its
    DataFrame inputs, and all its keyed stages behind one shuffle of their records."""
    parts = []
    base = 0   # numbers the level's Spark partitions for progress reports
    if lay.inputs:
        cuts = {sid: stage_inputs[stages[sid].input_key].prepared.cut(stages[sid].width)
                for slots in lay.inputs for sid, _ in slots}
        groups = [[(sid, vp, cuts[sid][vp]) for sid, vp in slots] for slots in lay.inputs]
        parts.append(sc.parallelize(groups, len(groups)).mapPartitionsWithIndex(
            functools.partial(run_inputs, ref, index, base, stats, types)))
        base += len(groups)
    if lay.keyed:
        level = [stages[sid] for slots in lay.keyed for sid, _ in slots]
        heads = {st.head_bolt: plan.component_to_tasks[st.head_bolt] for st in level}
        where = lay.task_partition(stages, heads)
        ups: list[Any] = []
        for st in level:
            for u in st.upstream:
                if all(outputs[u] is not x for x in ups):
                    ups.append(outputs[u])
        n = len(lay.keyed)
        records = (sc.union(ups) if len(ups) > 1 else ups[0]) if ups else sc.parallelize([], n)
        shuffled = records.filter(ForTasks(frozenset(where))).partitionBy(n, TaskPartition(where))
        parts.append(shuffled.mapPartitionsWithIndex(functools.partial(run_keyed, ref, index, base, stats, types)))
        base += n
    for sid in lay.frames:
        st = stages[sid]
        rdd = frames[st.input_key].rdd
        k = rdd.getNumPartitions()
        rdd = sc.parallelize([], st.width) if k == 0 else (rdd.coalesce(st.width) if k > st.width else rdd)
        parts.append(rdd.mapPartitionsWithIndex(functools.partial(run_frame, ref, index, base, sid, stats, types)))
        base += st.width
    return parts[0] if len(parts) == 1 else sc.union(parts)
