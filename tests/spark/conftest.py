"""The Spark tier: one local SparkSession for the run, Spark's JVMs set for small jobs, and
the run's ZooKeeper for the test that compares a standalone Spark cluster with a squall cluster."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from support import spark_jvm
from support.servers import zk_server  # noqa: F401 (fixture of this tier)


@pytest.fixture(scope="session", autouse=True)
def _small_job_jvms() -> Iterator[None]:
    """Every Spark JVM the tier starts, set for small jobs (support/spark_jvm.py)."""
    saved = {k: os.environ.get(k) for k in spark_jvm.ENV}
    for k in spark_jvm.ENV:
        os.environ[k] = f"{spark_jvm.SMALL_JOB_JVM} {saved[k] or ''}".strip()
    try:
        yield
    finally:
        _restore(saved)


def _restore(saved: dict[str, str | None]) -> None:
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession (UI off, bound to 127.0.0.1) for the whole test session;
    its Python workers run this interpreter, which has squall."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession  # pyspark is optional (the spark extra) and heavy

    saved = {k: os.environ.get(k) for k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")}
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (SparkSession.builder.master("local[2]").appName("squall-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.default.parallelism", "2")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
        _restore(saved)
