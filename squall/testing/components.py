"""Components for testing topologies in local mode (like Storm's testing utilities).

Results are kept in a process-wide registry by name, since each task runs its own copy of
a component: ``Recorder.get(name)`` is how a test sees what its bolts saw.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from squall.components import Bolt, Spout
from squall.state.components import StatefulSpout


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
    records acked ids under ``<name>.acked`` and failed ids under ``<name>.failed``.
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

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)


class RecordingBolt(Bolt):
    """Records (task id, source component, stream, values) of every input under ``name``
    and acks it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.this_task_id

    def execute(self, tuple):
        Recorder.add(self.name, (self.task, tuple.source_component, tuple.source_stream, list(tuple.values)))
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
