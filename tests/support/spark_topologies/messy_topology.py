"""A pipeline over messy JSON lines, for the live-versus-backfill equivalence tests.

Two spouts (events, users), a cleaning bolt with a reject stream, a symmetric join of
clean events with users (fields grouping on user from both), keyed running aggregations
(per user, per country, per type of ``cents``), a global one (rejects by reason), an
all-grouped census, a direct-grouped router/bucket pair and an echo of every event.
Every bolt's results are independent of tuple order and of the task a shuffle picks,
so any engine must give the same final results. Keys are JSON text of the values
(``key``), so values of different JSON types never collapse into one.

Task counts come from shape ``$SQUALL_MESSY_SHAPE`` (an index into ``SHAPES``), so one
file serves several fusion layouts. ``record`` writes what the sink streams carry to
JSON lines under config key ``messy.out`` (live runs; a backfill excludes it and writes
the same streams as its sinks).
"""
from __future__ import annotations

import json
import os

from squall import BasicBolt, TopologyBuilder
from squall.contrib import JsonLinesSpout
from squall.testing.components import EchoBolt, FileRecordingBolt

EVENT_FIELDS = ["user", "item", "cents", "tags", "meta"]
USER_FIELDS = ["user", "country"]
MAX_LINE_BYTES = 400
SHAPES = [
    {"events": 2, "clean": 2, "echo": 3, "types": 2, "join": 2, "country": 2, "user": 3, "router": 2,
     "bucket": 3, "census": 2},
    {"events": 1, "clean": 3, "echo": 1, "types": 1, "join": 3, "country": 1, "user": 1, "router": 4,
     "bucket": 2, "census": 3},
    {"events": 3, "clean": 1, "echo": 2, "types": 3, "join": 1, "country": 3, "user": 2, "router": 1,
     "bucket": 1, "census": 1},
]
# sink stream -> how its final result is read: "all" rows as a multiset, or per key
# (first field) the row with the largest count (second field).
SINKS = {"echo": "all", "join": "all", "bucket": "all", "types": "last", "per_country": "last",
         "per_user": "last", "rejects": "last", "census": "last"}


def key(value) -> str:
    """A JSON value's text: equal only for equal values of the same JSON type."""
    return json.dumps(value, ensure_ascii=True)


def kind(value) -> str:
    return {dict: "object", list: "array", str: "string", int: "int", float: "float", bool: "bool",
            type(None): "null"}.get(type(value), type(value).__name__)


class Clean(BasicBolt):
    """Events with a non-empty string user and integer cents go on; the rest are rejects."""

    def execute(self, t):
        user, cents = t["user"], t["cents"]
        if type(user) is str and user and type(cents) is int:
            self.collector.emit([user, t["item"], cents])
        else:
            self.collector.emit([f"user:{kind(user)} cents:{kind(cents)}", user, cents], stream="rejects")

    def declare_output_fields(self, declarer):
        declarer.declare(["user", "item", "cents"])
        declarer.declare(["reason", "user", "cents"], stream="rejects")


class RunningCount(BasicBolt):
    """Per key of ``field`` (as JSON text): the running count, and the running sum of
    ``total`` when given."""

    def __init__(self, field, out, total=None):
        self.field, self.out, self.total = field, out, total

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.seen = {}

    def execute(self, t):
        k = key(t[self.field]) if self.field != "user" else t["user"]
        n, s = self.seen.get(k, (0, 0))
        n += 1
        row = [k, n]
        if self.total:
            s += t[self.total]
            row.append(s)
        self.seen[k] = (n, s)
        self.collector.emit(row)

    def declare_output_fields(self, declarer):
        declarer.declare(self.out)


class Join(BasicBolt):
    """Symmetric hash join of clean events and users on user: every matching pair once,
    whichever side arrives first."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.events, self.countries = {}, {}

    def execute(self, t):
        k = key(t["user"])
        if t.source_component == "users":
            self.countries.setdefault(k, []).append(t["country"])
            for item, cents in self.events.get(k, []):
                self.collector.emit([t["user"], t["country"], item, cents])
        else:
            self.events.setdefault(k, []).append((t["item"], t["cents"]))
            for country in self.countries.get(k, []):
                self.collector.emit([t["user"], country, t["item"], t["cents"]])

    def declare_output_fields(self, declarer):
        declarer.declare(["user", "country", "item", "cents"])


class Census(BasicBolt):
    """All-grouped: every task counts every user line."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.index, self.n = context.this_task_index, 0

    def execute(self, t):
        self.n += 1
        self.collector.emit([self.index, self.n])

    def declare_output_fields(self, declarer):
        declarer.declare(["index", "n"])


class Router(BasicBolt):
    """Sends each item straight to the bucket task its JSON text's length picks."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.targets = context.component_tasks("bucket")

    def execute(self, t):
        item = t["item"]
        self.collector.emit_direct(self.targets[len(key(item)) % len(self.targets)], [item], stream="routed")

    def declare_output_fields(self, declarer):
        declarer.declare(["item"], stream="routed", direct=True)


class Bucket(BasicBolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.index = context.this_task_index

    def execute(self, t):
        self.collector.emit([key(t["item"]), self.index])

    def declare_output_fields(self, declarer):
        declarer.declare(["item", "index"])


def build(shape: dict):
    b = TopologyBuilder()
    b.set_spout("events", JsonLinesSpout(EVENT_FIELDS, conf_key="messy.events", max_line_bytes=MAX_LINE_BYTES),
                shape["events"])
    b.set_spout("users", JsonLinesSpout(USER_FIELDS, conf_key="messy.users", max_line_bytes=MAX_LINE_BYTES))
    b.set_bolt("clean", Clean(), shape["clean"]).shuffle("events")
    b.set_bolt("echo", EchoBolt(EVENT_FIELDS), shape["echo"]).local_or_shuffle("events")
    b.set_bolt("types", RunningCount("cents", ["cents", "n"]), shape["types"]).fields("events", ["cents"])
    b.set_bolt("join", Join(), shape["join"]).fields("clean", ["user"]).fields("users", ["user"])
    b.set_bolt("per_country", RunningCount("country", ["country", "n", "cents"], "cents"),
               shape["country"]).fields("join", ["country"])
    b.set_bolt("per_user", RunningCount("user", ["user", "n", "cents"], "cents"), shape["user"]).fields(
        "clean", ["user"])
    b.set_bolt("rejects", RunningCount("reason", ["reason", "n"]), 2).global_("clean", stream="rejects")
    b.set_bolt("census", Census(), shape["census"]).all("users")
    b.set_bolt("router", Router(), shape["router"]).shuffle("clean")
    b.set_bolt("bucket", Bucket(), shape["bucket"]).direct("router", "routed")
    rec = b.set_bolt("record", FileRecordingBolt("messy.out"), 2)  # live runs only
    for sink in SINKS:
        rec.shuffle(sink)
    return b.build()


def topology():
    return build(SHAPES[int(os.environ.get("SQUALL_MESSY_SHAPE", "0"))])


CONFIG = {"topology.max.spout.pending": 200}
