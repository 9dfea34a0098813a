"""Batch runs of topologies on Spark through PySpark (backfills).

``run(topology, spark, inputs={spout: FileInput or DataFrame}, sinks=[...])`` runs an
acyclic topology over bounded inputs and returns the sinks; ``squall spark-run`` does the
same from a topology file and writes Parquet or JSON lines. pyspark is imported only
inside the functions that use it (install the ``spark`` extra).
"""
from squall.spark.engine import BackfillResult, run
from squall.spark.inputs import FileInput
from squall.spark.io import read_input, session, write_sinks
from squall.spark.plan import BackfillError, Plan, make_plan

__all__ = ["BackfillError", "BackfillResult", "FileInput", "Plan", "make_plan", "read_input", "run", "session",
           "write_sinks"]
