"""JsonLinesSpout: a finite spout over a JSON-lines file, the live twin of a backfill input.

Each line is one JSON object; the tuple is its values for the declared fields, in
declared order (a missing key is None, as in the column Spark reads from the same file).
Lines that are not JSON objects are reported and skipped, never fatal. Every tuple
carries its line number as message id; a failed one is emitted again.
"""
from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from typing import Any

from squall.components import DEFAULT_STREAM, Spout
from squall.tuple import Fields


class JsonLinesSpout(Spout):
    """Emit the lines of ``path`` (or of the file named by config key ``conf_key``).

    With several tasks, task i of n reads lines i, i+n, i+2n, ... of the file.
    """

    def __init__(self, fields: Sequence[str], path: str | None = None, conf_key: str | None = None,
                 stream: str = DEFAULT_STREAM, reliable: bool = True) -> None:
        self.fields = list(Fields(fields).names)
        self.path, self.conf_key, self.stream, self.reliable = path, conf_key, stream, reliable

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(self.fields, stream=self.stream)

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        path = (conf.get(self.conf_key) if self.conf_key else None) or self.path
        if not path:
            raise ValueError(f"JsonLinesSpout {context.this_component_id!r} has no file: give a path "
                             f"or set config key {self.conf_key!r}")
        self.file_path = str(path)
        self.fh = open(self.file_path, encoding="utf-8")
        tasks = context.component_tasks(context.this_component_id)
        self.n, self.index = len(tasks), context.this_task_index
        self.lineno = 0
        self.pending: dict[int, list] = {}
        self.replay: deque[int] = deque()
        self.malformed = 0
        self.eof = False

    def next_tuple(self) -> None:
        if self.replay:
            msg_id = self.replay.popleft()
            values = self.pending.get(msg_id)
            if values is not None:
                self.collector.emit(values, self.stream, msg_id=msg_id)
            return
        while not self.eof:
            line = self.fh.readline()
            if not line:
                self.eof = True
                return
            self.lineno += 1
            if (self.lineno - 1) % self.n != self.index or not line.strip():
                continue
            values = self._parse(line)
            if values is None:
                continue
            if self.reliable:
                self.pending[self.lineno] = values
                self.collector.emit(values, self.stream, msg_id=self.lineno)
            else:
                self.collector.emit(values, self.stream)
            return

    def _parse(self, line: str) -> list | None:
        try:
            obj: Any = json.loads(line)
        except ValueError as exc:
            obj, why = None, f"not JSON ({exc})"
        else:
            why = f"a JSON {type(obj).__name__}, not an object"
        if not isinstance(obj, dict):
            self.malformed += 1
            self.collector.report_error(f"{self.file_path}:{self.lineno}: skipped: {why}")
            return None
        return [obj.get(f) for f in self.fields]

    def ack(self, msg_id: Any) -> None:
        self.pending.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if msg_id in self.pending:
            self.replay.append(msg_id)

    def close(self) -> None:
        fh = getattr(self, "fh", None)
        if fh is not None:
            fh.close()
