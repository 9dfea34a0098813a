"""Ready-made components: file spouts and sinks that line live runs up with batch runs.

``ParquetSink`` imports pyarrow only when a task starts (install the ``spark`` extra).
"""
from squall.contrib.jsonl import JsonLineRules, JsonLinesSpout
from squall.contrib.line_spout import LineRules, LineSpout, MalformedLine, TextLineRules, TextLinesSpout
from squall.contrib.parquet import ParquetSink

__all__ = ["JsonLineRules", "JsonLinesSpout", "LineRules", "LineSpout", "MalformedLine", "ParquetSink",
           "TextLineRules", "TextLinesSpout"]
