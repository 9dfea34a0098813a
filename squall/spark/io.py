"""Files in and out of a batch run: reading inputs, writing sinks, making a session."""
from __future__ import annotations

import glob
import os
import sys
from collections.abc import Mapping
from typing import Any

from squall.spark.plan import BackfillError

INPUT_FORMATS = ("jsonl", "parquet", "csv", "text")
OUTPUT_FORMATS = ("parquet", "jsonl")


def _local(path: str) -> bool:
    return "://" not in path and not path.startswith("file:")


def read_input(spark: Any, key: str, path: str, fmt: str, fields: list[str]) -> Any:
    """A DataFrame of ``path`` whose columns are meant to be ``fields``.

    jsonl: one JSON object per line (unparsable lines are skipped and counted);
    parquet; csv: with a header line, every column a string; text: each line is the value
    of the spout stream's only field.
    """
    if fmt not in INPUT_FORMATS:
        raise BackfillError(f"input format {fmt!r} is not one of {', '.join(INPUT_FORMATS)}")
    if _local(path) and not glob.glob(path):
        raise BackfillError(f"input {key!r}: {path} does not exist")
    try:
        if fmt == "jsonl":
            return (spark.read.option("mode", "PERMISSIVE")
                    .option("columnNameOfCorruptRecord", "_corrupt_record").json(path))
        if fmt == "parquet":
            return spark.read.parquet(path)
        if fmt == "csv":
            return spark.read.option("header", True).csv(path)
        if len(fields) != 1:
            raise BackfillError(f"input {key!r}: text input gives one column per line, but the spout "
                                f"stream declares {len(fields)} fields {fields}")
        return spark.read.text(path).withColumnRenamed("value", fields[0])
    except BackfillError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackfillError(f"input {key!r}: cannot read {path} as {fmt}: {first}") from None


def sink_dir(output: str, sink: str) -> str:
    """``OUTPUT/component`` for a default stream, ``OUTPUT/component.stream`` otherwise."""
    return os.path.join(output, sink.replace(":", ".").replace("/", "_"))


def write_sinks(frames: Mapping[str, Any], output: str, fmt: str = "parquet",
                overwrite: bool = False) -> dict[str, str]:
    """Write each sink DataFrame under ``output``; returns sink -> directory."""
    if fmt not in OUTPUT_FORMATS:
        raise BackfillError(f"output format {fmt!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    out = {}
    for sink, df in frames.items():
        path = sink_dir(output, sink)
        writer = df.write.mode("overwrite" if overwrite else "errorifexists")
        (writer.parquet if fmt == "parquet" else writer.json)(path)
        out[sink] = path
    return out


def existing_outputs(output: str, sinks: list[str]) -> list[str]:
    if not _local(output):
        return []
    return [p for p in (sink_dir(output, s) for s in sinks) if os.path.exists(p)]


def session(master: str = "local[*]", conf: Mapping[str, str] | None = None,
            app_name: str = "squall-backfill") -> tuple[Any, bool]:
    """(SparkSession, whether this call started it). An active session is reused as it is.

    A new session runs its Python workers with this interpreter (which has squall) unless
    PYSPARK_PYTHON (or ``spark.pyspark.python`` in ``conf``) names another; a local
    master binds to 127.0.0.1 unless SPARK_LOCAL_IP is set.
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate(), False
    conf = dict(conf or {})
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.master(master).appName(app_name)
    # PySpark starts its Python workers with $PYSPARK_PYTHON (default: python3 on PATH).
    os.environ.setdefault("PYSPARK_PYTHON", conf.pop("spark.pyspark.python", sys.executable))
    for k, v in {"spark.ui.showConsoleProgress": "false", **conf}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark, True
