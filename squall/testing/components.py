"""Spouts and bolts for testing topologies (like Storm's testing utilities and Bytewax's
``TestingSource``/``TestingSink``): one set, so tests do not each write their own.

- Sources: ``FixedTupleSpout`` (fixed rows, reliable, replays what fails, records what could
  not be delivered), ``PositionedRowSpout``
  (the same with its position in checkpointed state).
- Sinks: ``RecordingBolt`` (in this process), ``FileRecordingBolt`` (tasks in other processes:
  workers, Spark executors), ``NullBolt`` (acks and keeps nothing).
- Stages: ``EchoBolt`` (passes values on), ``StatefulKeyedCount`` (counts per key in state).
- Metrics: ``RecordingMetricsConsumer`` (a metrics consumer that records what it is handed,
  in this process or in files; ``recorded_metrics`` reads the files).

In local mode each task runs its own copy of a component, so results are kept in a
process-wide registry by name: ``Recorder.get(name)`` is how a test sees what its bolts saw.
Tests that share a process (a test runner runs many modules in one) must not share a name:
``unique_name`` makes one.
"""
from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from squall.components import Bolt, Spout
from squall.metrics_consumer import DataPoint, MetricsConsumer, TaskInfo
from squall.state.components import StatefulBolt, StatefulSpout

_names = itertools.count()


def unique_name(prefix: str) -> str:
    """``prefix`` with a number no other call in this process got: a name for a test's
    topology and its ``Recorder`` lists. Counters of one's own would repeat numbers another
    module's counter also hands out (two tests of two modules in one process, one reading
    the other's acks)."""
    return f"{prefix}-{next(_names)}"


class Recorder:
    """Named, thread-safe lists of recorded items, shared by every task in this process."""

    _lock = threading.Lock()
    _data: dict[str, list] = {}

    @classmethod
    def add(cls, name: str, item: Any) -> None:
        with cls._lock:
            cls._data.setdefault(name, []).append(item)

    @classmethod
    def get(cls, name: str) -> list:
        with cls._lock:
            return list(cls._data.get(name, []))

    @classmethod
    def clear(cls, name: str) -> None:
        with cls._lock:
            cls._data.pop(name, None)


class FixedTupleSpout(Spout):
    """Emits ``rows`` once, reliably (message id = row index), replays failed rows, and
    records acked ids under ``<name>.acked``, failed ids under ``<name>.failed`` and rows
    that could not be delivered under ``<name>.undeliverable``.
    With several tasks, each emits the rows whose index falls to it."""

    def __init__(self, name: str, rows: Sequence[Sequence[Any]], fields: Sequence[str],
                 reliable: bool = True) -> None:
        self.name, self.rows, self.fields, self.reliable = name, [list(r) for r in rows], list(fields), reliable

    def open(self, conf, context, collector):
        self.collector = collector
        n = len(context.component_tasks(context.this_component_id))
        self.todo = list(range(context.this_task_index, len(self.rows), n))
        self.todo.reverse()

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop()
            self.collector.emit(self.rows[i], msg_id=i if self.reliable else None)

    def ack(self, msg_id):
        Recorder.add(self.name + ".acked", msg_id)

    def fail(self, msg_id):
        Recorder.add(self.name + ".failed", msg_id)
        self.todo.append(msg_id)

    def undeliverable(self, msg_id, reason):
        """Recorded under ``<name>.undeliverable`` as (id, reason); not replayed (it would fail again)."""
        Recorder.add(self.name + ".undeliverable", (msg_id, reason))

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)


class RecordingBolt(Bolt):
    """Records (task id, source component, stream, values) of every input under ``name``
    and acks it; with ``fields``, only those fields' values (to keep large payloads out)."""

    def __init__(self, name: str, fields: Sequence[str] | None = None) -> None:
        self.name, self.fields = name, list(fields) if fields is not None else None

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.this_task_id

    def execute(self, tuple):
        values = list(tuple.values) if self.fields is None else [tuple[f] for f in self.fields]
        Recorder.add(self.name, (self.task, tuple.source_component, tuple.source_stream, values))
        self.collector.ack(tuple)

    @staticmethod
    def values(name: str) -> list[list]:
        """The values recorded under ``name``, in the order they arrived."""
        return [record[3] for record in Recorder.get(name)]


class FileRecordingBolt(Bolt):
    """A RecordingBolt for tasks in other processes: appends [task id, source component,
    stream, values] of every input as a JSON line to ``task-<id>.jsonl`` in the folder the
    topology conf names under ``conf_key``, and acks it. ``recorded(folder)`` reads them."""

    def __init__(self, conf_key: str) -> None:
        self.conf_key = conf_key

    def prepare(self, conf, context, collector):
        self.collector, self.task = collector, context.this_task_id
        folder = Path(conf[self.conf_key])
        folder.mkdir(parents=True, exist_ok=True)
        self.file = open(folder / f"task-{self.task}.jsonl", "a", encoding="utf-8")  # noqa: SIM115 (closed in cleanup)

    def execute(self, tuple):
        self.file.write(json.dumps([self.task, tuple.source_component, tuple.source_stream, list(tuple.values)]) + "\n")
        self.file.flush()  # read by the test while the topology runs
        self.collector.ack(tuple)

    def cleanup(self):
        self.file.close()


def recorded(folder: str | os.PathLike) -> list[tuple[int, str, str, list]]:
    """What FileRecordingBolts wrote to ``folder``: (task id, source component, stream,
    values) per input, file by file. A line still being written is left out."""
    out = []
    for path in sorted(Path(folder).glob("task-*.jsonl")):
        text = path.read_text(encoding="utf-8")
        # Split at "\n" only: JSON keeps U+2028 and U+0085 unescaped, which splitlines would cut at.
        for line in text.split("\n")[:-1]:
            task, component, stream, values = json.loads(line)
            out.append((task, component, stream, values))
    return out


class RecordingMetricsConsumer(MetricsConsumer):
    """Records every batch of data points it is handed: with a name as its registration's
    ``argument``, as (TaskInfo, [DataPoint]) in ``Recorder.get(name)``; with
    ``{"folder": path}``, as JSON lines ``[task_info, [[name, value], ...]]`` in
    ``metrics-<pid>-<task>.jsonl`` there (workers), which ``recorded_metrics`` reads.

    Register it with ``{"class": "squall.testing.components.RecordingMetricsConsumer",
    "argument": ...}`` in ``topology.metrics.consumer.register``."""

    def prepare(self, conf, argument, context, error_reporter):
        self.name: str = ""
        self.file = None
        if isinstance(argument, dict):
            folder = Path(argument["folder"])
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"metrics-{os.getpid()}-{context.this_task_id}.jsonl"
            self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in cleanup)
        else:
            self.name = str(argument)

    def handle_data_points(self, task_info, data_points):
        if self.file is None:
            Recorder.add(self.name, (task_info, data_points))
            return
        self.file.write(json.dumps([list(task_info), [list(p) for p in data_points]]) + "\n")
        self.file.flush()  # read by the test while the topology runs

    def cleanup(self):
        if self.file is not None:
            self.file.close()


def recorded_metrics(folder: str | os.PathLike) -> list[tuple[TaskInfo, list[DataPoint]]]:
    """What RecordingMetricsConsumers wrote to ``folder``, file by file."""
    out = []
    for path in sorted(Path(folder).glob("metrics-*.jsonl")):
        for line in path.read_text(encoding="utf-8").split("\n")[:-1]:
            info, points = json.loads(line)
            out.append((TaskInfo(*info), [DataPoint(*p) for p in points]))
    return out


class NullBolt(Bolt):
    """Acks every input and keeps nothing: for tests that look elsewhere (the spout's acks,
    stats) or only build a topology."""

    def execute(self, tuple):
        self.collector.ack(tuple)


class EchoBolt(Bolt):
    """Emits every input's values unchanged on ``fields``, anchored to it, and acks it."""

    def __init__(self, fields: Sequence[str]) -> None:
        self.fields = list(fields)

    def execute(self, tuple):
        self.collector.emit(list(tuple.values), anchors=tuple)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)


class StatefulKeyedCount(StatefulBolt):
    """Counts its inputs per value of ``field`` in its checkpointed state and acks them:
    after failures and rollbacks the committed counts are exact only if state is updated
    exactly once."""

    def __init__(self, field: str) -> None:
        self.field = field

    def execute(self, tuple):
        key = tuple[self.field]
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(tuple)



class PositionedRowSpout(StatefulSpout):
    """Emits ``rows`` in order, reliably, keeping its position in its checkpointed state:
    after a rollback it replays from the last committed position (exactly-once input for
    stateful topologies). Acked ids are recorded under ``<name>.acked``."""

    def __init__(self, name: str, rows: Sequence[Sequence[Any]], fields: Sequence[str]) -> None:
        self.name, self.rows, self.fields = name, [list(r) for r in rows], list(fields)

    def open(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state
        self.position = state.get("position", 0)

    def next_tuple(self):
        if self.position < len(self.rows):
            self.collector.emit(self.rows[self.position], msg_id=self.position)
            self.position += 1

    def pre_prepare(self, txid):
        self.state.put("position", self.position)

    def ack(self, msg_id):
        Recorder.add(self.name + ".acked", msg_id)

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)
