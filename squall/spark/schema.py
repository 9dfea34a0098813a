"""Spark types for the column types of ``squall.contrib.columns``, and Spark rows back
to the plain values live spouts hand over. Only ``spark_type`` imports pyspark."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from squall.contrib.columns import MAX_DECIMAL_DIGITS, resolve


def spark_type(t: tuple) -> Any:
    from pyspark.sql import types as T

    kind = t[0]
    simple = {"boolean": T.BooleanType, "long": T.LongType, "double": T.DoubleType, "string": T.StringType,
              "binary": T.BinaryType, "date": T.DateType, "timestamp": T.TimestampType,
              "timestamp_ntz": T.TimestampNTZType}
    if kind in simple:
        return simple[kind]()
    if kind == "decimal":
        return T.DecimalType(MAX_DECIMAL_DIGITS, t[1])
    if kind == "array":
        return T.ArrayType(spark_type(t[1]), True)
    if kind == "map":
        return T.MapType(spark_type(t[1]), spark_type(t[2]), True)
    raise AssertionError(t)


def spark_schema(fields: Sequence[str], types: Sequence[tuple]) -> Any:
    from pyspark.sql import types as T

    return T.StructType([T.StructField(f, spark_type(resolve(t)), True) for f, t in zip(fields, types)])


def plain_value(v: Any) -> Any:
    """A Spark Row (struct) becomes a dict and a bytearray bytes, recursively: the values a
    JSON or Parquet spout hands over live."""
    if isinstance(v, tuple) and hasattr(v, "asDict"):
        return {k: plain_value(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [plain_value(x) for x in v]
    if isinstance(v, dict):
        return {k: plain_value(x) for k, x in v.items()}
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def plain_row(row: Sequence[Any]) -> list:
    return [plain_value(v) for v in row]
