"""Spout inputs of a batch run: files read by the Python workers themselves, or DataFrames.

``FileInput`` (JSON lines, text, Parquet) is read inside Spark's Python workers with the
same code the live spouts use: lines by ``squall.contrib.lines`` and parsed by the
spout's ``LineRules`` (so a backfill sees exactly the values a live run sees), Parquet
by pyarrow. No JVM sits between the file and the bolts. Paths are local (and must be
visible at the same path on every executor, as for Spark's own readers) or URIs that
``pyarrow.fs`` opens (``s3://``, ``hdfs://``, ``file://``, ...). A directory means the
files below it, skipping names that start with ``_`` or ``.`` (as Spark does); a local
path may be a glob.

The driver lists the files and cuts them into as many parts as the input's stage has
partitions: byte ranges for lines (a line belongs to the part holding its first byte),
row groups for Parquet.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from squall.contrib.jsonl import JsonLineRules
from squall.contrib.line_spout import LineRules, TextLineRules
from squall.contrib.lines import TOO_LONG, LineReader
from squall.contrib.parquet_spout import parquet_rows
from squall.contrib.sources import PreparedSource
from squall.spark.plan import BackfillError
from squall.spark.schema import plain_row

FILE_FORMATS = ("jsonl", "text", "parquet")
MALFORMED_KEPT = 5


class FileInput:
    """Files to read as a spout's input: ``fmt`` is ``jsonl``, ``text`` or ``parquet``."""

    def __init__(self, path: str | os.PathLike | Sequence[str | os.PathLike], fmt: str = "jsonl") -> None:
        if fmt not in FILE_FORMATS:
            raise BackfillError(f"file input format {fmt!r} is not one of {', '.join(FILE_FORMATS)}")
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        self.paths = [os.fspath(p) for p in paths]
        self.fmt = fmt

    def __repr__(self) -> str:
        return f"FileInput({self.paths!r}, {self.fmt!r})"

    def prepare_source(self, key: str, fields: list[str], spout: Any, conf: Mapping[str, Any]) -> PreparedSource:
        """A BackfillSource (squall.contrib.sources): the files listed, Parquet's columns checked."""
        return prepare_file_input(key, self, fields, spout)


def _is_uri(path: str) -> bool:
    return "://" in path


def _visible(name: str) -> bool:
    return not name.startswith(("_", "."))


def list_files(key: str, paths: Sequence[str]) -> list[tuple[str | None, str, int]]:
    """(uri or None, path, size) of every file an input names, in a stable order."""
    out: list[tuple[str | None, str, int]] = []
    for path in paths:
        if _is_uri(path):
            out += _list_uri(key, path)
            continue
        matches = sorted(glob.glob(path)) if glob.has_magic(path) else ([path] if os.path.exists(path) else [])
        if not matches:
            raise BackfillError(f"input {key!r}: {path} does not exist")
        for m in matches:
            if os.path.isdir(m):
                for root, dirs, files in os.walk(m):
                    dirs[:] = sorted(d for d in dirs if _visible(d))
                    out += [(None, os.path.join(root, f), os.path.getsize(os.path.join(root, f)))
                            for f in sorted(files) if _visible(f)]
            else:
                out.append((None, m, os.path.getsize(m)))
    return out


def _list_uri(key: str, uri: str) -> list[tuple[str | None, str, int]]:
    from pyarrow import fs

    try:
        filesystem, inner = fs.FileSystem.from_uri(uri)
        info = filesystem.get_file_info(inner)
        if info.type == fs.FileType.NotFound:
            raise BackfillError(f"input {key!r}: {uri} does not exist")
        if info.type == fs.FileType.Directory:
            infos = filesystem.get_file_info(fs.FileSelector(inner, recursive=True))
            found = [i for i in infos if i.type == fs.FileType.File
                     and all(_visible(part) for part in i.path[len(inner):].split("/") if part)]
            return [(uri, i.path, i.size) for i in sorted(found, key=lambda i: i.path)]
        return [(uri, inner, info.size)]
    except BackfillError:
        raise
    except Exception as exc:
        raise BackfillError(f"input {key!r}: cannot list {uri}: {exc}") from None


def open_file(uri: str | None, path: str) -> Any:
    if uri is None:
        return open(path, "rb")
    from pyarrow import fs

    return fs.FileSystem.from_uri(uri)[0].open_input_file(path)


class LineSource:
    """The part of a line input that workers need: its files and rules."""

    kind = "lines"
    max_width = None  # cut into as many parts as its stage has partitions

    def __init__(self, key: str, files: list[tuple[str | None, str, int]], rules: LineRules) -> None:
        self.key, self.files, self.rules = key, files, rules

    def cut(self, width: int) -> list[list[tuple[int, int, int]]]:
        """Per partition, its (file index, start, stop) byte ranges: ``width`` parts of
        about equal size over all files in order."""
        total = sum(size for _, _, size in self.files)
        bounds = [total * i // width for i in range(width + 1)]
        parts: list[list[tuple[int, int, int]]] = [[] for _ in range(width)]
        base = 0
        for index, (_, _, size) in enumerate(self.files):
            for p in range(width):
                lo, hi = max(bounds[p], base), min(bounds[p + 1], base + size)
                if lo < hi:
                    parts[p].append((index, lo - base, hi - base))
            base += size
        return parts

    def read(self, ranges: list[tuple[int, int, int]], malformed: Callable[[str], None]) -> Iterator[list]:
        """The values of every good line in ``ranges``; a bad one is passed to ``malformed``."""
        parse, rules = self.rules.parse, self.rules
        for index, start, stop in ranges:
            uri, path, _ = self.files[index]
            with open_file(uri, path) as fh:
                lines = LineReader(fh, start, stop, rules.max_line_bytes)
                for raw in lines:
                    try:
                        if raw is TOO_LONG:
                            raise rules.too_long()
                        values = parse(raw)
                    except ValueError as exc:  # as the live spout catches it
                        malformed(f"{uri or ''}{path} (line at byte {lines.offset}): skipped: {exc}")
                        continue
                    if values is not None:
                        yield values


class ParquetSource:
    """The part of a Parquet input that workers need: files, row groups and columns."""

    kind = "parquet"
    max_width = None

    def __init__(self, key: str, files: list[tuple[str | None, str, int]], fields: list[str],
                 groups: list[list[int]]) -> None:
        self.key, self.files, self.fields, self.groups = key, files, fields, groups  # groups: rows per group

    def cut(self, width: int) -> list[list[tuple[int, list[int]]]]:
        """Per partition, its (file index, row groups): about equal rows each."""
        units = [(f, g, rows) for f, sizes in enumerate(self.groups) for g, rows in enumerate(sizes)]
        total = sum(r for _, _, r in units)
        parts: list[list[tuple[int, list[int]]]] = [[] for _ in range(width)]
        done = 0
        for f, g, rows in units:
            p = min(width - 1, done * width // total) if total else 0
            if parts[p] and parts[p][-1][0] == f:
                parts[p][-1][1].append(g)
            else:
                parts[p].append((f, [g]))
            done += rows
        return parts

    def read(self, ranges: list[tuple[int, list[int]]], malformed: Callable[[str], None]) -> Iterator[list]:
        for index, groups in ranges:
            uri, path, _ = self.files[index]
            with open_file(uri, path) as fh:
                yield from parquet_rows(fh, self.fields, groups)


def line_rules(fmt: str, fields: list[str], spout: Any) -> LineRules:
    """The rules to read a ``fmt`` input with: the spout's own when it is that format's
    live spout (its options included), else the format's defaults for ``fields``."""
    own = getattr(spout, "line_rules", None)
    rules = own() if callable(own) else None
    wanted = JsonLineRules if fmt == "jsonl" else TextLineRules
    if isinstance(rules, wanted) and rules.fields == list(fields):
        return rules
    try:
        return wanted(fields)
    except ValueError as exc:
        raise BackfillError(str(exc)) from None


def prepare_file_input(key: str, spec: FileInput, fields: list[str], spout: Any) -> LineSource | ParquetSource:
    """List an input's files (and check Parquet columns) on the driver."""
    files = list_files(key, spec.paths)
    if spec.fmt != "parquet":
        try:
            rules = line_rules(spec.fmt, fields, spout)
        except BackfillError as exc:
            raise BackfillError(f"input {key!r}: {exc}") from None
        return LineSource(key, files, rules)
    import pyarrow.parquet as pq

    groups = []
    for uri, path, _ in files:
        try:
            with open_file(uri, path) as fh:
                meta = pq.ParquetFile(fh).metadata
                names = meta.schema.to_arrow_schema().names
        except Exception as exc:
            raise BackfillError(f"input {key!r}: cannot read {uri or ''}{path} as Parquet: {exc}") from None
        missing = [f for f in fields if f not in names]
        if missing:
            raise BackfillError(
                f"input {key!r} has no column{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))} "
                f"in {path}, which the spout declares (the file's columns: {names})")
        groups.append([meta.row_group(i).num_rows for i in range(meta.num_row_groups)])
    return ParquetSource(key, files, list(fields), groups)


class StageInput:
    """What an input stage reads, as shipped to workers: a file source's parts (one list
    of ranges per partition), or the rows of a DataFrame."""

    def __init__(self, key: str, stream: str, source: PreparedSource | None = None,
                 plain: bool = False) -> None:
        self.key, self.stream, self.source, self.plain = key, stream, source, plain

    @property
    def prepared(self) -> PreparedSource:
        """The source of an input the workers read themselves (ValueError for a DataFrame's)."""
        if self.source is None:
            raise ValueError(f"input {self.key!r} is a DataFrame's rows")
        return self.source

    def values(self, items: Iterable[Any], malformed: Callable[[str], None]) -> Iterator[list]:
        if self.source is not None:
            for ranges in items:
                yield from self.source.read(ranges, malformed)
        elif self.plain:
            for row in items:
                yield plain_row(row)
        else:
            for row in items:
                yield list(row)
