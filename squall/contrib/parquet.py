"""ParquetSink: a live topology's output as rolling Parquet files that Spark reads.

Each task buffers its input tuples and writes them as one Parquet file when the buffer
reaches ``rows_per_file`` rows or about ``bytes_per_file`` bytes (estimated from the
values), or when its oldest tuple is ``roll_secs`` old (tick tuples check the clock
while no input arrives). A file is written under a hidden temporary name (Spark and
pyarrow skip names starting with "."), flushed to disk, then renamed; only then are its
tuples acked. A write that fails fails its tuples, so the spouts replay them: a row is
in a complete file at least once, and no reader ever sees a partial file.

The columns are the given fields, taken by name from every input stream. Column types
come from ``types`` (pyarrow type names such as ``{"count": "int64"}``; values are
converted to them), or else from the values by the rules of ``squall.contrib.columns``
(the same as a backfill's Parquet sinks): every value of a field must have one type
over the sink's life, nothing is widened, and a value that breaks this fails its
tuples with the field and the two types reported (so declare ``types`` where values
vary). A column, or part of one, seen only as null is written as string.

Keep ``roll_secs`` well under ``topology.message.timeout.secs``, and
``topology.max.spout.pending`` (if set) large enough for a whole file in flight, or
spouts wait for time rolls. Tuples written by ``cleanup`` (at shutdown) reach the file
but their acks may not reach the acker, so they can be replayed later: at least once.
"""
from __future__ import annotations

import os
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from squall.components import Bolt
from squall.contrib.columns import ColumnTypes
from squall.extras import needs
from squall.tuple import Fields, Tuple


def _size(value: Any) -> int:
    """A cheap estimate of a value's size in a file."""
    if isinstance(value, (str, bytes, bytearray)):
        return len(value) + 4
    if isinstance(value, (list, tuple)):
        return 4 + sum(_size(v) for v in value)
    if isinstance(value, dict):
        return 4 + sum(_size(k) + _size(v) for k, v in value.items())
    return 8


def _without_null(pa: Any, t: Any) -> Any:
    """``t`` with every null type in it (an all-None column, a list of empty lists) as string."""
    if pa.types.is_null(t):
        return pa.string()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_without_null(pa, t.value_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _without_null(pa, f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_without_null(pa, t.key_type), _without_null(pa, t.item_type))
    return t


class ParquetSink(Bolt):
    """Write ``fields`` of every input tuple to rolling Parquet files in ``output_dir``
    (or the directory named by config key ``conf_key``, when set)."""

    def __init__(self, output_dir: str | os.PathLike | None, fields: Sequence[str], *,
                 rows_per_file: int = 100_000, bytes_per_file: int = 64 << 20,
                 roll_secs: float | None = 10.0, types: Mapping[str, Any] | None = None,
                 compression: str = "snappy", conf_key: str | None = None, prefix: str = "part") -> None:
        self.fields = list(Fields(fields).names)
        if not self.fields:
            raise ValueError("ParquetSink needs at least one field")
        for name, value in (("rows_per_file", rows_per_file), ("bytes_per_file", bytes_per_file)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"ParquetSink: {name} must be an integer >= 1, got {value!r}")
        if roll_secs is not None and not (isinstance(roll_secs, (int, float)) and roll_secs > 0):
            raise ValueError(f"ParquetSink: roll_secs must be a positive number or None, got {roll_secs!r}")
        unknown = sorted(set(types or {}) - set(self.fields))
        if unknown:
            raise ValueError(f"ParquetSink: types given for unknown fields {unknown}")
        if output_dir is None and conf_key is None:
            raise ValueError("ParquetSink needs output_dir or conf_key")
        if not prefix or "/" in prefix or prefix.startswith((".", "_")):
            raise ValueError(f"ParquetSink: prefix {prefix!r} must be a plain, visible file name start")
        self.output_dir = None if output_dir is None else str(output_dir)
        self.rows_per_file, self.bytes_per_file, self.roll_secs = rows_per_file, bytes_per_file, roll_secs
        self.types = dict(types or {})
        self.compression, self.conf_key, self.prefix = compression, conf_key, prefix

    def component_config(self) -> dict[str, Any] | None:
        # Ticks let an idle sink roll by time, so its last tuples are acked without new input.
        if self.roll_secs is None:
            return None
        return {"topology.tick.tuple.freq.secs": max(1.0, self.roll_secs / 2)}

    # -- lifecycle ------------------------------------------------------------------------
    def prepare(self, conf, context, collector) -> None:
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise ImportError(needs("ParquetSink", "pyarrow", "spark")) from None
        self._pa, self._pq = pa, pq
        self.collector = collector
        self.component = context.this_component_id
        self.task = context.this_task_id
        folder = (conf.get(self.conf_key) if self.conf_key else None) or self.output_dir
        if not folder:
            raise ValueError(f"ParquetSink {self.component!r}: no output directory: set config key "
                             f"{self.conf_key!r}")
        self.dir = Path(folder)
        self.dir.mkdir(parents=True, exist_ok=True)
        for (comp, stream) in context.this_sources():
            declared = context.component_output_fields(comp, stream)
            missing = [f for f in self.fields if f not in declared]
            if missing:
                raise ValueError(f"ParquetSink {self.component!r}: input {comp}/{stream} declares no "
                                 f"field {', '.join(map(repr, missing))} (it declares {list(declared)})")
        undeclared = [f for f in self.fields if f not in self.types]
        self._inferred = ColumnTypes(undeclared) if undeclared else None
        self._inferred_index = [self.fields.index(f) for f in undeclared]
        self.learned: dict[str, Any] = {f: pa.type_for_alias(t) if isinstance(t, str) else t
                                        for f, t in self.types.items()}
        self.token = uuid.uuid4().hex[:8]
        self.seq = 0
        self._indexes: dict[Any, list[int]] = {}
        self._reset()
        self.files_written = 0
        self._remove_stale_temps()

    def _reset(self) -> None:
        self.rows: list[list] = []
        self.tuples: list[Tuple] = []
        self.bytes = 0
        self.oldest: float | None = None

    def _remove_stale_temps(self) -> None:
        # A temp file of this task left by a crash was never renamed, so its tuples were
        # never acked and will be replayed: it is garbage.
        for p in self.dir.glob(f".{self.prefix}-*-t{self.task:05d}-*.tmp"):
            try:
                p.unlink()
            except OSError:
                pass

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            self._roll_if_old()
            return
        src = tup.source
        key = (src.component, src.stream)
        idx = self._indexes.get(key)
        if idx is None:
            idx = self._indexes[key] = [src.fields.index(f) for f in self.fields]
        values = tup.values
        row = [values[i] for i in idx]
        self.rows.append(row)
        self.tuples.append(tup)
        self.bytes += sum(_size(v) for v in row)
        if self.oldest is None:
            self.oldest = time.monotonic()
        if len(self.rows) >= self.rows_per_file or self.bytes >= self.bytes_per_file:
            self.flush()
        else:
            self._roll_if_old()

    def _roll_if_old(self) -> None:
        if self.oldest is not None and self.roll_secs is not None and \
                time.monotonic() - self.oldest >= self.roll_secs:
            self.flush()

    def cleanup(self) -> None:
        if getattr(self, "rows", None):
            self.flush()

    # -- writing --------------------------------------------------------------------------
    def flush(self) -> str | None:
        """Write the buffered rows as one file and ack their tuples; returns its path."""
        if not self.rows:
            return None
        rows, tuples = self.rows, self.tuples
        self._reset()
        name = f"{self.prefix}-{int(time.time() * 1000):013d}-t{self.task:05d}-{self.token}-{self.seq:06d}"
        self.seq += 1
        final = self.dir / f"{name}.parquet"
        tmp = self.dir / f".{name}.tmp"
        try:
            table = self._table(rows)
            with open(tmp, "wb") as fh:
                self._pq.write_table(table, fh, compression=self.compression)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
            self._sync_dir()
        except Exception as exc:
            try:
                tmp.unlink()
            except OSError:
                pass
            self.collector.report_error(f"ParquetSink {self.component!r}: writing {len(rows)} rows "
                                        f"failed ({type(exc).__name__}: {exc}); failing their tuples")
            for t in tuples:
                self.collector.fail(t)
            return None
        self.files_written += 1
        for t in tuples:
            self.collector.ack(t)
        return str(final)

    def _table(self, rows: list[list]) -> Any:
        pa = self._pa
        columns = list(zip(*rows))
        if self._inferred is not None:
            # The values of undeclared fields must keep one type over the sink's life:
            # pyarrow alone would quietly turn ints into floats in a float column.
            seen = ColumnTypes(self._inferred.fields).add(self._inferred)
            seen.observe(list(zip(*(columns[i] for i in self._inferred_index))))
            if seen.broken is not None:
                raise ValueError(seen.broken)
            self._inferred = seen
        arrays, fields = [], []
        for i, name in enumerate(self.fields):
            known = self.learned.get(name)
            try:
                arr = pa.array(columns[i], type=known)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise ValueError(f"field {name!r}: {exc}") from None
            if known is None:
                settled = _without_null(pa, arr.type)
                if settled == arr.type:
                    self.learned[name] = arr.type
                else:  # null-only (parts) so far: write a type Spark reads, decide later
                    arr = arr.cast(settled)
            arrays.append(arr)
            fields.append(pa.field(name, arr.type, nullable=True))
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields))

    def _sync_dir(self) -> None:
        try:
            fd = os.open(self.dir, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
