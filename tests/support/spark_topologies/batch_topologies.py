"""Topologies for tests/spark/test_spark.py. Loaded as a topology module (squall.loader), so Spark
workers get this file only through squall.spark's code shipping."""
from __future__ import annotations

import os

from squall import BasicBolt, Bolt, CustomStreamGrouping, TopologyBuilder
from squall.contrib import JsonLinesSpout, ParquetSink
from squall.spark.plan import TICK_KEY
from squall.testing.components import EchoBolt, FileRecordingBolt

KEY_FIELDS = ["key", "n"]


class Where(BasicBolt):
    """Emits each input's key with the task that received it."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.index, self.task = context.this_task_index, context.this_task_id

    def execute(self, tup):
        self.collector.emit([tup["key"], self.index, self.task])

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "index", "task"])


class Router(BasicBolt):
    """Sends each key straight to a task of ``direct`` it picks, and reports the pick."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.targets = context.component_tasks("direct")

    def execute(self, tup):
        key = tup["key"]
        chosen = self.targets[len(key) % len(self.targets)]
        sent = self.collector.emit_direct(chosen, [key], stream="routed")
        self.collector.emit([key, chosen, list(sent)])

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "chosen", "sent"])
        declarer.declare(["key"], stream="routed", direct=True)


class Lifecycle(Bolt):
    """Acks by hand; reports at cleanup how often prepare ran and what it executed, and
    leaves a mark in the directory named by config key batchtest.marks."""

    prepares = 0

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.prepares += 1
        self.task = context.this_task_id
        self.executed = 0
        self.marks = conf.get("batchtest.marks")

    def execute(self, tup):
        self.executed += 1
        self.collector.ack(tup)

    def cleanup(self):
        self.collector.emit([self.task, self.prepares, self.executed])
        if self.marks:  # a side effect outside Spark, to count how often this task ran
            with open(os.path.join(self.marks, f"task-{self.task}.txt"), "a") as fh:
                fh.write("cleaned up\n")

    def declare_output_fields(self, declarer):
        declarer.declare(["task", "prepares", "executed"])


class Ticker(BasicBolt):
    """Counts its inputs and emits the count on each tick."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.task, self.count = context.this_task_id, 0

    def execute(self, tup):
        if tup.is_tick():
            self.collector.emit([self.task, self.count, tup[0]])
        else:
            self.count += 1

    def component_config(self):
        return {TICK_KEY: 5}

    def declare_output_fields(self, declarer):
        declarer.declare(["task", "count", "rate"])


class Flaky(BasicBolt):
    """Fails keys that start with "x" by raising, passes the rest on."""

    def execute(self, tup):
        if tup["key"].startswith("x"):
            raise ValueError(f"refusing {tup['key']}")
        self.collector.emit([tup["key"]])

    def declare_output_fields(self, declarer):
        declarer.declare(["key"])


class EvenOdd(CustomStreamGrouping):
    def choose_tasks(self, task_id, values):
        return [self.target_tasks[values[1] % 2]]


def groupings():
    b = TopologyBuilder()
    b.set_spout("keys", JsonLinesSpout(KEY_FIELDS, path="unused-in-batch.jsonl"), 2)
    b.set_bolt("byfield", Where(), 3).fields("keys", ["key"])
    b.set_bolt("everyone", Where(), 2).all("keys")
    b.set_bolt("lowest", Where(), 3).global_("keys")
    b.set_bolt("router", Router(), 2).shuffle("keys")
    b.set_bolt("direct", Where(), 3).direct("router", "routed")
    b.set_bolt("custom", Where(), 2).custom("keys", EvenOdd())
    b.set_bolt("partial", Where(), 3).partial_key("keys", ["key"])
    b.set_bolt("spread", Where(), 3).shuffle("keys")
    b.set_bolt("life", Lifecycle(), 4).local_or_shuffle("keys")
    b.set_bolt("ticker", Ticker(), 2).shuffle("keys")
    b.set_bolt("flaky", Flaky(), 2).shuffle("keys")
    return b.build()


def cycle():
    b = TopologyBuilder()
    b.set_spout("keys", JsonLinesSpout(KEY_FIELDS, path="unused.jsonl"))
    b.set_bolt("a", Where()).shuffle("keys").shuffle("c")
    b.set_bolt("b", Where()).shuffle("a")
    b.set_bolt("c", Where()).shuffle("b")
    return b.build()


# -- ParquetSink round trip (local mode) ---------------------------------------------------
ROW_FIELDS = ["id", "name", "score", "flag", "tags"]


def sink_roundtrip():
    b = TopologyBuilder()
    b.set_spout("rows", JsonLinesSpout(ROW_FIELDS, conf_key="sinktest.input"))
    b.set_bolt("tee", EchoBolt(ROW_FIELDS), 2).shuffle("rows")
    b.set_bolt("archive", ParquetSink(None, ROW_FIELDS, conf_key="sinktest.archive", rows_per_file=40,
                                      roll_secs=1), 2).shuffle("tee")
    b.set_bolt("record", FileRecordingBolt("sinktest.record")).shuffle("tee")  # what the topology emitted
    return b.build()


def topology():
    return groupings()


# -- sink types and Parquet inputs ----------------------------------------------------------
TYPED_FIELDS = ["i", "f", "s", "b", "raw", "arr", "map", "naive", "aware", "dec", "day", "nothing"]


def typed_values(n: int) -> list:
    import datetime as dt
    import decimal

    return [n, n + 0.5, f"s{n}é", n % 2 == 0, bytes([n % 256, 0]), [n, None], {"k": n},
            dt.datetime(2020, 1, 1, 0, 0, n % 60, 123456), dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
            + dt.timedelta(seconds=n), decimal.Decimal(n) / 4, dt.date(2020, 1, 1 + n % 28), None]


class Typed(BasicBolt):
    """Emits a value of every column type, made from the input's n."""

    def execute(self, tup):
        self.collector.emit(typed_values(tup["n"]))

    def declare_output_fields(self, declarer):
        declarer.declare(TYPED_FIELDS)


class Mixed(BasicBolt):
    """Emits an int for odd n and a float for even n in one field."""

    def execute(self, tup):
        n = tup["n"]
        self.collector.emit([tup["key"], n if n % 2 else n + 0.5])

    def declare_output_fields(self, declarer):
        declarer.declare(["key", "v"])


class Slow(BasicBolt):
    def execute(self, tup):
        import time

        time.sleep(0.0001)
        self.collector.emit([tup["key"]])

    def declare_output_fields(self, declarer):
        declarer.declare(["key"])


def typed():
    b = TopologyBuilder()
    b.set_spout("keys", JsonLinesSpout(KEY_FIELDS, path="unused-in-batch.jsonl"))
    b.set_bolt("typed", Typed(), 2).shuffle("keys")
    b.set_bolt("mixed", Mixed(), 2).shuffle("keys")
    b.set_bolt("slow", Slow(), 2).shuffle("keys")
    return b.build()


PARQUET_FIELDS = ["id", "f", "s", "b", "tags", "st", "m", "ts", "naive", "d", "day"]


class Pickles(BasicBolt):
    """Appends every input's values, pickled, to <batchtest.pickles>/task-<id>.bin."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        os.makedirs(conf["batchtest.pickles"], exist_ok=True)
        self.fh = open(os.path.join(conf["batchtest.pickles"], f"task-{context.this_task_id}.bin"), "ab")

    def execute(self, tup):
        import pickle

        pickle.dump(list(tup.values), self.fh)
        self.fh.flush()

    def cleanup(self):
        self.fh.close()


def parquet_echo():
    from squall.contrib.parquet_spout import ParquetSpout

    b = TopologyBuilder()
    b.set_spout("rows", ParquetSpout(PARQUET_FIELDS, conf_key="batchtest.parquet"), 2)
    b.set_bolt("echo", EchoBolt(PARQUET_FIELDS), 2).shuffle("rows")
    b.set_bolt("pickles", Pickles()).shuffle("echo")
    return b.build()
