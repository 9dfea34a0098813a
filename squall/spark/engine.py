"""``run``: a topology over bounded inputs on Spark, upstream components first.

Each spout stream's input DataFrame becomes records routed by that spout's groupings;
each bolt, in topological order, gets the records aimed at its tasks partitioned by task
(``partitionBy`` with one partition per task), and ``bolt_partition`` runs one bolt
instance per partition. Components run level by level (a level: those whose inputs are
all done), one Spark job per level, and each component's records are locally
checkpointed: computed once and never recomputed from their lineage, so every bolt runs
exactly once (its side effects happen once), also when a sink DataFrame is read again.
Local checkpoints live on the executors: on a cluster, keep executors alive for the
run (no dynamic allocation that removes them), and read the returned DataFrames before
stopping the session.
"""
from __future__ import annotations

import functools
import pickle
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from squall import config as _config
from squall.model import system_topology
from squall.spark import schema as _schema
from squall.spark import ship
from squall.spark.plan import BackfillError, Plan, make_plan
from squall.spark.tasks import (Fan, PlanRef, StatsParam, TaskIndex, TypesParam, WorkerPlan, bolt_partition,
                                spout_partition)
from squall.topology import SPOUT, Topology

log = structlog.get_logger("squall.spark")

CORRUPT_COLUMN = "_corrupt_record"


class BackfillResult(dict):
    """Sink name (``component`` or ``component:stream``) -> DataFrame of what it emitted,
    with the run's facts: ``stats`` per component, ``rows`` per sink, ``sinks`` (name ->
    (component, stream)), ``order`` (components as run), ``excluded``, ``seconds``."""

    stats: dict[str, dict[str, Any]]
    rows: dict[str, int]
    sinks: dict[str, tuple[str, str]]
    order: list[str]
    excluded: list[str]
    seconds: float

    @property
    def failed(self) -> int:
        """Tuples failed (explicitly or by an exception in execute) over all bolts."""
        return sum(int(s.get("failed", 0)) for s in self.stats.values())


class StreamValues:
    """Records -> the value lists of one stream."""

    def __init__(self, stream: str) -> None:
        self.stream = stream

    def __call__(self, record: tuple) -> list:
        return [record[2]] if record[0] == self.stream else []


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


def _failure(exc: BaseException, what: str, python: str) -> BackfillError:
    line = _worker_error(exc)
    if line is None:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return BackfillError(f"{what} failed on Spark: {first}")
    msg = f"{what} failed on Spark: {line}"
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


def _needs_plain(df: Any) -> bool:
    return any("struct<" in f.dataType.simpleString() for f in df.schema.fields)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class _SkipCorrupt:
    """Rows -> value rows, dropping (and counting) those Spark could not parse."""

    def __init__(self, stats: Any, key: str) -> None:
        self.stats, self.key = stats, key

    def __call__(self, rows: Any) -> Any:
        bad = 0
        for row in rows:
            if row[-1] is not None:
                bad += 1
                continue
            yield row[:-1]
        if bad:
            self.stats.add({"__inputs__": {self.key: bad}})


def _input_rdd(key: str, df: Any, spout: str, stream: str, fields: Sequence[str], stats: Any) -> tuple[Any, bool]:
    from pyspark.sql import functions as F

    if not hasattr(df, "columns") or not hasattr(df, "rdd"):
        raise BackfillError(f"input {key!r} must be a Spark DataFrame, got {type(df).__name__}")
    missing = [f for f in fields if f not in df.columns]
    if missing:
        raise BackfillError(
            f"input {key!r} has no column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}, "
            f"which spout {spout!r} declares on stream {stream!r} (declared fields: {list(fields)}; "
            f"the input's columns: {list(df.columns)})")
    cols = [F.col(_quote(f)) for f in fields]
    if CORRUPT_COLUMN in df.columns and CORRUPT_COLUMN not in fields:
        sel = df.select(*cols, F.col(CORRUPT_COLUMN))
        return sel.rdd.mapPartitions(_SkipCorrupt(stats, key)), _needs_plain(sel)
    sel = df.select(*cols)
    return sel.rdd, _needs_plain(sel)


def run(topology: Topology, spark: Any, inputs: Mapping[str, Any], sinks: Sequence[str] | None = None,
        conf: Mapping[str, Any] | None = None, ticks: bool = False, exclude: Sequence[str] = (),
        name: str = "backfill", ship_code: bool = True) -> BackfillResult:
    """Run ``topology`` on Spark over bounded inputs; returns the sinks' DataFrames.

    inputs: ``{"spout" or "spout:stream": DataFrame}``; columns named as the spout's
      declared fields (others are ignored; a column ``_corrupt_record``, as Spark's JSON
      reader adds for lines it cannot parse, marks rows to skip and count).
    sinks: streams to return, ``"component"`` (its default stream) or ``"component:stream"``;
      None means every stream of a running bolt that no running bolt reads.
    conf: topology configuration over squall's defaults (as ``LocalCluster.submit`` takes).
    ticks: send each task of a bolt with ``topology.tick.tuple.freq.secs`` one tick tuple after
      its last input; without it such a bolt is an error.
    exclude: components not to run, with everything downstream of them.
    ship_code: add the topology's non-installed modules to the Spark workers' path.
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
    if ship_code:
        ship.ship_topology_code(sc, topology)
    sink_fields: dict[str, dict[str, list[str]]] = {}
    for comp, stream in plan.sinks.values():
        sink_fields.setdefault(comp, {})[stream] = list(topology.stream_fields(comp, stream))
    worker_plan = WorkerPlan(topology_id, topology, system_topology(topology, full), full,
                             plan.task_to_component, plan.component_to_tasks, plan.keep, plan.ticks,
                             ship.by_value_blobs(topology) if ship_code else {}, frozenset(plan.order),
                             sink_fields)
    blob = sc.broadcast(pickle.dumps(worker_plan, protocol=5))
    bc = PlanRef(uuid.uuid4().hex, blob)
    stats = sc.accumulator({}, StatsParam())
    types = sc.accumulator({}, TypesParam())
    outputs: dict[str, Any] = {}
    try:
        for level in _levels(plan):
            rdds = []
            for comp in level:
                if topology.components[comp].kind == SPOUT:
                    rdd = _spout_rdd(plan, comp, inputs, bc, stats, types, sc)
                else:
                    rdd = _bolt_rdd(plan, comp, outputs, bc, stats, types, sc)
                # A local checkpoint: computed once, kept by the executors, and never
                # recomputed from its lineage (which would run bolts a second time).
                # persist() first also keeps PySpark from fusing the next step's Python
                # function into this one's, which would bypass the checkpoint.
                rdd.setName(f"squall:{comp}")
                rdd.persist(StorageLevel.MEMORY_AND_DISK)
                rdd.localCheckpoint()
                outputs[comp] = rdd
                rdds.append(rdd)
            t0 = time.monotonic()
            what = " ".join(f"{topology.components[c].kind} {c!r}" for c in level)
            try:
                (rdds[0] if len(rdds) == 1 else sc.union(rdds)).count()
            except Exception as exc:
                raise _failure(exc, what if len(level) == 1 else f"one of {what}", python) from None
            log.info("components done", components=level, seconds=round(time.monotonic() - t0, 3))
        result = BackfillResult()
        result.stats = dict(stats.value)
        result.rows = {}
        found = types.value
        for sink, (comp, stream) in plan.sinks.items():
            result[sink] = _sink_frame(spark, topology, sink, comp, stream, outputs[comp],
                                       found.get((comp, stream)))
            result.rows[sink] = int(result.stats.get(comp, {}).get("emitted", {}).get(stream, 0))
    finally:
        # Free every component's records except the sinks' (their DataFrames read them).
        keep = {comp for comp, _ in plan.sinks.values()}
        for comp, rdd in outputs.items():
            if comp not in keep:
                try:
                    rdd.unpersist()
                except Exception:  # the context may be gone already; nothing to free then
                    pass
        try:
            blob.unpersist()
        except Exception:
            pass
    result.sinks = dict(plan.sinks)
    result.order = list(plan.order)
    result.excluded = list(plan.excluded)
    result.seconds = time.monotonic() - started
    return result


def _spout_rdd(plan: Plan, spout: str, inputs: Mapping[str, Any], bc: Any, stats: Any, types: Any,
               sc: Any) -> Any:
    parts = []
    for key, (comp, stream) in plan.inputs.items():
        if comp != spout:
            continue
        fields = plan.topology.stream_fields(spout, stream)
        rdd, plain = _input_rdd(key, inputs[key], spout, stream, list(fields), stats)
        fn = functools.partial(spout_partition, bc, spout, stream, stats, types,
                               _schema.plain_row if plain else None)
        parts.append(rdd.mapPartitionsWithIndex(fn))
    return parts[0] if len(parts) == 1 else sc.union(parts)


def _bolt_rdd(plan: Plan, bolt: str, outputs: Mapping[str, Any], bc: Any, stats: Any, types: Any,
              sc: Any) -> Any:
    tasks = plan.component_to_tasks[bolt]
    lo, hi = tasks[0], tasks[-1]
    parts = [outputs[up].flatMap(Fan(up, lo, hi)) for up in plan.upstream(bolt)]
    pairs = parts[0] if len(parts) == 1 else (sc.union(parts) if parts else sc.emptyRDD())
    keyed = pairs.partitionBy(len(tasks), TaskIndex(lo))
    return keyed.mapPartitionsWithIndex(functools.partial(bolt_partition, bc, bolt, stats, types))


def _levels(plan: Plan) -> list[list[str]]:
    """Components grouped by depth (spouts 0, then 1 + their deepest upstream's): each
    group runs as one Spark job once the groups above it are done."""
    depth: dict[str, int] = {}
    for comp in plan.order:
        ups = plan.upstream(comp)
        depth[comp] = 1 + max(depth[u] for u in ups) if ups else 0
    levels: dict[int, list[str]] = {}
    for comp in plan.order:
        levels.setdefault(depth[comp], []).append(comp)
    return [levels[d] for d in sorted(levels)]


def _sink_frame(spark: Any, topology: Topology, sink: str, comp: str, stream: str, records: Any,
                found: list | str | None) -> Any:
    fields = list(topology.stream_fields(comp, stream))
    if isinstance(found, str):
        why = re.sub(r"field #(\d+)", lambda m: f"field {fields[int(m.group(1)) - 1]!r}", found)
        raise BackfillError(f"sink {sink!r} cannot be written as columns: {why}")
    types = [_schema.resolve(t) for t in (found or [_schema.NULL] * len(fields))]
    values = records.flatMap(StreamValues(stream))
    return spark.createDataFrame(values.map(_schema.RowConverter(types)),
                                 schema=_schema.spark_schema(fields, types), verifySchema=False)
