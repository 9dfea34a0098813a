"""Files in and out of a batch run: naming inputs, writing sinks, making a session."""
from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from squall.contrib.sources import scheme_of
from squall.spark.engine import failure
from squall.spark.inputs import FileInput, list_files
from squall.spark.plan import BackfillError
from squall.spark.sinks import json_frame

INPUT_FORMATS = ("jsonl", "text", "parquet", "csv")
OUTPUT_FORMATS = ("parquet", "jsonl")


def _local(path: str) -> bool:
    return "://" not in path and not path.startswith("file:")


def read_input(spark: Any, key: str, path: str, fmt: str) -> Any:
    """What to run a spout stream over: the source of a registered scheme
    (``squall.contrib.sources``; ``kafka:...``: an offset range of the spout's topics), a
    ``FileInput`` for ``jsonl``, ``text`` and ``parquet`` (read by the Python workers with
    the live spouts' rules), a DataFrame for ``csv`` (Spark's CSV reader, with a header
    line; every column a string)."""
    scheme = scheme_of(path)
    if scheme is not None:
        try:
            return scheme.parse(path)  # whatever --input-format says: not files
        except ValueError as exc:
            raise BackfillError(f"input {key!r}: {exc}") from None
    if fmt not in INPUT_FORMATS:
        raise BackfillError(f"input format {fmt!r} is not one of {', '.join(INPUT_FORMATS)}")
    if fmt != "csv":
        spec = FileInput(path, fmt)
        list_files(key, spec.paths)  # fails now, naming the input, if there is nothing to read
        return spec
    if _local(path):
        list_files(key, [path])
    try:
        return spark.read.option("header", True).csv(path)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BackfillError(f"input {key!r}: cannot read {path} as {fmt}: {first}") from None


def sink_dir(output: str, sink: str) -> str:
    """``OUTPUT/component`` for a default stream, ``OUTPUT/component.stream`` otherwise."""
    return os.path.join(output, sink.replace(":", ".").replace("/", "_"))


def write_sinks(result: Any, output: str, fmt: str = "parquet", overwrite: bool = False,
                parallel: int = 4, sinks: list[str] | None = None) -> dict[str, str]:
    """Write each sink (or those named) of a ``BackfillResult`` under ``output``; returns
    sink -> directory.

    parquet: typed columns (``squall.contrib.columns``); jsonl: one JSON object per row,
    values as they are (``squall.spark.sinks``). Every sink's frame is made (and its
    types checked) before any is written; up to ``parallel`` sinks are written at once
    (each is a Spark job mostly spent waiting, and Spark runs jobs from several threads).
    """
    if fmt not in OUTPUT_FORMATS:
        raise BackfillError(f"output format {fmt!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    mode = "overwrite" if overwrite else "errorifexists"
    jobs = {}
    for sink in (result if sinks is None else sinks):
        if fmt == "parquet":
            jobs[sink] = result[sink].write.mode(mode).parquet
        else:
            frame = json_frame(result._spark, sink, result.fields(sink), result.items_rdd(sink), result.serializers)
            jobs[sink] = frame.write.mode(mode).text
    out = {sink: sink_dir(output, sink) for sink in jobs}
    python = getattr(result._spark.sparkContext, "pythonExec", "python3")
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(jobs)))) as pool:
        futures = {sink: pool.submit(write, out[sink]) for sink, write in jobs.items()}
        for sink, future in futures.items():
            try:
                future.result()
            except Exception as exc:
                raise failure(exc, f"writing sink {sink!r} to {out[sink]}", python) from None
    if fmt == "jsonl":
        for directory in out.values():
            _name_parts(result._spark, directory, ".txt", ".jsonl")
    return out


def _name_parts(spark: Any, directory: str, old: str, new: str) -> None:
    """Rename Spark's ``part-*{old}`` files in ``directory`` to ``part-*{new}`` (its text
    writer names JSON lines ``.txt``), through Hadoop's file system: any URI Spark wrote to."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(directory)
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    for status in fs.listStatus(path):
        name = status.getPath().getName()
        if name.startswith("part-") and name.endswith(old):
            fs.rename(status.getPath(), jvm.org.apache.hadoop.fs.Path(path, name[: -len(old)] + new))


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
    # Spark's warnings here are about what squall does on purpose (unpersisting locally
    # checkpointed levels, say); its errors still show.
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True
