"""Revenue per country: a join of two spouts' streams, live or backfilled.

orders {"order_id", "user", "amount"} and users {"user", "country"} meet in ``join``
(both fields-grouped on user, so a user's orders and profile reach the same task);
``join`` emits (country, amount) once it knows the order's user, holding orders that
come first; ``totals`` (fields-grouped on country) emits the running revenue and order
count of a country; ``archive`` writes those rows as rolling Parquet files. A country's
final figures are its row with the most orders.

Config keys: ``orders.orders``, ``orders.users`` (JSON-lines files; defaults beside this
file) and ``orders.archive`` (default ./orders-archive).
"""
from __future__ import annotations

from pathlib import Path

from squall import BasicBolt, TopologyBuilder
from squall.contrib import JsonLinesSpout, ParquetSink

HERE = Path(__file__).resolve().parent


class JoinUsers(BasicBolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.country: dict[str, str] = {}
        self.waiting: dict[str, list[int]] = {}

    def execute(self, tup):
        user = tup["user"]
        if tup.source_component == "users":
            country = self.country[user] = tup["country"]
            for amount in self.waiting.pop(user, []):
                self.collector.emit([country, amount])
        elif user in self.country:
            self.collector.emit([self.country[user], tup["amount"]])
        else:
            self.waiting.setdefault(user, []).append(tup["amount"])

    def declare_output_fields(self, declarer):
        declarer.declare(["country", "amount"])


class CountryTotals(BasicBolt):
    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.totals: dict[str, list[int]] = {}

    def execute(self, tup):
        t = self.totals.setdefault(tup["country"], [0, 0])
        t[0] += tup["amount"]
        t[1] += 1
        self.collector.emit([tup["country"], t[0], t[1]])

    def declare_output_fields(self, declarer):
        declarer.declare(["country", "revenue", "orders"])


def topology():
    b = TopologyBuilder()
    b.set_spout("orders", JsonLinesSpout(["order_id", "user", "amount"], path=str(HERE / "orders.jsonl"),
                                         conf_key="orders.orders"))
    b.set_spout("users", JsonLinesSpout(["user", "country"], path=str(HERE / "users.jsonl"),
                                        conf_key="orders.users"))
    b.set_bolt("join", JoinUsers(), 3).fields("orders", ["user"]).fields("users", ["user"])
    b.set_bolt("totals", CountryTotals(), 2).fields("join", ["country"])
    b.set_bolt("archive", ParquetSink("orders-archive", ["country", "revenue", "orders"],
                                      conf_key="orders.archive", roll_secs=2)).shuffle("totals")
    return b.build()


CONFIG: dict = {}
