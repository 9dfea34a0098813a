"""ParquetSpout: a finite spout over Parquet files, the live twin of a Parquet backfill input.

``parquet_rows`` is the one place Parquet rows become tuple values; this spout and
``spark-run --input-format parquet`` both use it. Values are pyarrow's Python values
for the Arrow types: int, float, str, bool, bytes (binary), Decimal, date, datetime
(naive without a time zone, aware with one), lists, dicts for structs and for maps,
None for nulls. pyarrow is imported when a task opens (install the ``spark`` extra).
"""
from __future__ import annotations

import glob
import os
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any

from squall.contrib.file_spout import FileSpout

BATCH_ROWS = 8192


def parquet_rows(fh: Any, fields: Sequence[str], row_groups: Sequence[int] | None = None) -> Iterator[list]:
    """The rows of an open Parquet file (all, or those of ``row_groups``) as value lists
    of ``fields``, in file order."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(fh)
    groups = range(pf.metadata.num_row_groups) if row_groups is None else row_groups
    for batch in pf.iter_batches(batch_size=BATCH_ROWS, row_groups=list(groups), columns=list(fields),
                                 use_threads=False):
        columns = [batch.column(f).to_pylist(maps_as_pydicts="strict") for f in fields]
        for row in zip(*columns):
            yield list(row)


def parquet_files(path: str) -> list[str]:
    """The files a path names: a file, a glob, or a directory's visible files below it."""
    matches = sorted(glob.glob(path)) if glob.has_magic(path) else [path]
    out = []
    for m in matches:
        if os.path.isdir(m):
            for root, dirs, files in os.walk(m):
                dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
                out += [os.path.join(root, f) for f in sorted(files) if not f.startswith(("_", "."))]
        elif os.path.exists(m):
            out.append(m)
    return out


class ParquetSpout(FileSpout):
    """Emit the rows of the Parquet files at ``path`` (or at config key ``conf_key``) as
    tuples of ``fields``. With several tasks, task i of n reads row groups i, i+n, ...
    (counted over all files). Tuples carry (file, group, row) as message id; a failed one
    is emitted again."""

    def open(self, conf, context, collector) -> None:
        import pyarrow.parquet as pq

        super().open(conf, context, collector)
        self.units: deque[tuple[str, int, int]] = deque()   # (file, group index, file number)
        k = 0
        for number, f in enumerate(parquet_files(self.file_path)):
            for g in range(pq.ParquetFile(f).metadata.num_row_groups):
                if k % self.n_tasks == self.index:
                    self.units.append((f, g, number))
                k += 1
        self.rows: Iterator[list] = iter(())
        self.unit: tuple[str, int, int] = ("", 0, 0)
        self.row = 0

    def next_tuple(self) -> None:
        if self.replayed():
            return
        while True:
            values = next(self.rows, None)
            if values is not None:
                break
            if not self.units:
                return
            self.unit = self.units.popleft()
            self.row = 0
            with open(self.unit[0], "rb") as fh:
                self.rows = iter(list(parquet_rows(fh, self.fields, [self.unit[1]])))
        self.emit(values, (self.unit[2], self.unit[1], self.row))
        self.row += 1
