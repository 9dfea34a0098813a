"""What the finite file spouts share: where the file is, and replaying failed tuples."""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Sequence
from typing import Any

from squall.components import DEFAULT_STREAM, Spout
from squall.tuple import Fields


class FileSpout(Spout):
    """A spout over ``path`` (or the path in config key ``conf_key``) emitting ``fields``
    on ``stream``. With ``reliable``, each tuple carries a message id; a failed one is
    emitted again (subclasses call ``emit`` and start ``next_tuple`` with ``replayed``)."""

    def __init__(self, fields: Sequence[str], path: str | os.PathLike | None = None, conf_key: str | None = None,
                 stream: str = DEFAULT_STREAM, reliable: bool = True) -> None:
        self.fields = list(Fields(fields).names)
        self.path = None if path is None else os.fspath(path)
        self.conf_key, self.stream, self.reliable = conf_key, stream, reliable

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(self.fields, stream=self.stream)

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        path = (conf.get(self.conf_key) if self.conf_key else None) or self.path
        if not path:
            raise ValueError(f"{type(self).__name__} {context.this_component_id!r} has no file: give a path "
                             f"or set config key {self.conf_key!r}")
        self.file_path = str(path)
        self.n_tasks = len(context.component_tasks(context.this_component_id))
        self.index = context.this_task_index
        self.pending: dict[Any, list] = {}
        self.replay: deque = deque()

    def emit(self, values: list, msg_id: Any) -> None:
        if self.reliable:
            self.pending[msg_id] = values
            self.collector.emit(values, self.stream, msg_id=msg_id)
        else:
            self.collector.emit(values, self.stream)

    def replayed(self) -> bool:
        """Emit one failed tuple again, if there is one; True if it did."""
        if not self.replay:
            return False
        msg_id = self.replay.popleft()
        values = self.pending.get(msg_id)
        if values is not None:
            self.collector.emit(values, self.stream, msg_id=msg_id)
        return True

    def ack(self, msg_id: Any) -> None:
        self.pending.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.pending:
            self.replay.append(msg_id)
