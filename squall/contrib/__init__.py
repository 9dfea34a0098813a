"""Ready-made components: file spouts and sinks that line live runs up with batch runs.

``ParquetSink`` imports pyarrow only when a task starts (install the ``spark`` extra).
"""
from squall.contrib.jsonl import JsonLinesSpout
from squall.contrib.parquet import ParquetSink

__all__ = ["JsonLinesSpout", "ParquetSink"]
