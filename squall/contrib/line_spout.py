"""A finite spout over the lines of a file, parsed by rules a backfill shares.

``LineRules`` turn one raw line into the values of a tuple (``parse``), return None for
a line to skip quietly, or raise ``MalformedLine`` for one to skip and count. A spout
built on them (``JsonLinesSpout``, ``TextLinesSpout``) hands its rules to ``spark-run``
through ``line_rules()``, so a backfill reads the same file into the same values.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

from squall.components import DEFAULT_STREAM
from squall.contrib.file_spout import FileSpout
from squall.contrib.lines import DEFAULT_MAX_LINE_BYTES, TOO_LONG, LineReader
from squall.errors import SquallError
from squall.tuple import Fields


class MalformedLine(SquallError, ValueError):
    """A line the rules refuse; the message says why."""


class LineRules:
    """How one line becomes values of ``fields`` (subclasses define ``parse``)."""

    def __init__(self, fields: Sequence[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self.fields = list(Fields(fields).names)
        if not isinstance(max_line_bytes, int) or max_line_bytes < 1:
            raise ValueError(f"max_line_bytes must be an integer >= 1, got {max_line_bytes!r}")
        self.max_line_bytes = max_line_bytes

    def parse(self, raw: bytes) -> list | None:
        raise NotImplementedError

    def too_long(self) -> MalformedLine:
        return MalformedLine(f"longer than {self.max_line_bytes} bytes")


class TextLineRules(LineRules):
    """Plain text: every line (even an empty one) is the value of the stream's one field."""

    def __init__(self, fields: Sequence[str], max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        super().__init__(fields, max_line_bytes)
        if len(self.fields) != 1:
            raise ValueError(f"text lines fill one field, but {len(self.fields)} are declared: {self.fields}")

    def parse(self, raw: bytes) -> list:
        try:
            return [raw.decode("utf-8")]
        except UnicodeDecodeError as exc:
            raise MalformedLine(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None


class LineSpout(FileSpout):
    """Emits the lines of ``path`` (or of the file named by config key ``conf_key``)
    parsed by ``rules``. With several tasks, task i of n reads lines i, i+n, ...; a
    tuple's message id is its line number."""

    def __init__(self, rules: LineRules, path: str | os.PathLike | None = None, conf_key: str | None = None,
                 stream: str = DEFAULT_STREAM, reliable: bool = True) -> None:
        super().__init__(rules.fields, path, conf_key, stream, reliable)
        self.rules = rules

    def line_rules(self) -> LineRules:
        """The rules a backfill reads this spout's input with."""
        return self.rules

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.fh = open(self.file_path, "rb")
        self.lines = iter(LineReader(self.fh, max_bytes=self.rules.max_line_bytes))
        self.lineno = 0
        self.malformed = 0
        self.eof = False

    def next_tuple(self) -> None:
        if self.replayed():
            return
        parse = self.rules.parse
        while not self.eof:
            raw = next(self.lines, None)
            if raw is None:
                self.eof = True
                return
            self.lineno += 1
            if (self.lineno - 1) % self.n_tasks != self.index:
                continue
            try:
                if raw is TOO_LONG:
                    raise self.rules.too_long()
                values = parse(raw)
            except ValueError as exc:  # MalformedLine, or a rule that raised something close
                self.malformed += 1
                self.collector.report_error(f"{self.file_path}:{self.lineno}: skipped: {exc}")
                continue
            if values is not None:
                self.emit(values, self.lineno)
                return

    def close(self) -> None:
        fh = getattr(self, "fh", None)
        if fh is not None:
            fh.close()


class TextLinesSpout(LineSpout):
    """Emit each line of a UTF-8 text file as the one value of ``field``."""

    def __init__(self, field: str, path: str | os.PathLike | None = None, conf_key: str | None = None,
                 stream: str = DEFAULT_STREAM, reliable: bool = True,
                 max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        super().__init__(TextLineRules([field], max_line_bytes), path, conf_key, stream, reliable)
