"""Bytewax's Kafka connector on bench/kafka_pipeline.py's job: Kafka -> split -> count -> Kafka.

    SQUALL_BENCH_KAFKA="bootstrap topic records" python bench/peers/bytewax_kafka.py

(bench/compare.py starts the broker, fills the topic and sets the variable.) KafkaSource
(tail off: the dataflow ends at the end of the topic) -> flat_map split -> key_on word ->
stateful_map running count -> KafkaSink, one record per word (key: the word, value: its count
so far) into an output topic of its own; ``run_main``, one worker.

The same guarantee as squall's side, as each system gives it: squall acks a sentence once the
broker confirmed all its records and commits the group's offsets every 5 s
(kafka.spout.offset.commit.period.ms), so a restart replays what was not done. Bytewax's
way to at-least-once is its recovery store: every epoch it snapshots the source's offsets
(and the counts) into SQLite, and its sink flushes the producer at the end of each batch;
so this side runs with a recovery directory and a 5 s epoch (without one, a restarted
Bytewax dataflow has no record of its progress). Both producers are idempotent with
acks=all, as KafkaBolt's is. The clock starts at the
WARM-th input record and stops when ``run_main`` returns (the sink flushed). Prints one JSON
object: input records per second. ``--duration`` and ``--warmup`` are taken and ignored
(the topic sets the work), so compare.py runs it like its other peers.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import bytewax.operators as op
from bytewax.connectors.kafka import KafkaSink, KafkaSinkMessage, KafkaSource
from bytewax.dataflow import Dataflow
from bytewax.recovery import RecoveryConfig, init_db_dir
from bytewax.testing import run_main
from confluent_kafka.admin import AdminClient, NewTopic

WARM = 5_000  # bench/kafka_pipeline.py's WARM
EPOCH = timedelta(seconds=5)  # squall's kafka.spout.offset.commit.period.ms
PRODUCER = {"enable.idempotence": "true", "acks": "all"}  # KafkaBolt's


def running_count(count: int | None, _word: str) -> tuple[int, int]:
    count = (count or 0) + 1
    return count, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=0.0)
    parser.add_argument("--warmup", type=float, default=0.0)
    parser.parse_args()
    spec = os.environ.get("SQUALL_BENCH_KAFKA")
    if not spec:
        raise SystemExit("SQUALL_BENCH_KAFKA is not set: run this through bench/compare.py")
    bootstrap, topic, records = spec.split()
    n = int(records)
    out_topic = f"counts-bytewax-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(out_topic, 1, 1)]).values():
        future.result(30)

    seen = [0]
    clock: dict[str, float] = {}

    def split(msg) -> list[str]:
        seen[0] += 1
        if seen[0] == WARM:
            clock["start"], clock["cpu"] = time.monotonic(), time.process_time()
        return msg.value.decode().split()

    flow = Dataflow("kafka_wordcount")
    lines = op.input("in", flow, KafkaSource([bootstrap], [topic], tail=False))
    words = op.flat_map("split", lines, split)
    counts = op.stateful_map("count", op.key_on("key", words, lambda w: w), running_count)
    out = op.map("record", counts, lambda kv: KafkaSinkMessage(kv[0].encode(), str(kv[1]).encode()))
    op.output("out", out, KafkaSink([bootstrap], out_topic, add_config=PRODUCER))
    with tempfile.TemporaryDirectory(prefix="bytewax-recovery-") as db:
        init_db_dir(Path(db), 1)
        run_main(flow, epoch_interval=EPOCH, recovery_config=RecoveryConfig(Path(db)))
    if "start" not in clock or seen[0] != n:
        raise SystemExit(f"bytewax_kafka: read {seen[0]} of {n} records")
    secs, cpu = time.monotonic() - clock["start"], time.process_time() - clock["cpu"]
    done = n - WARM + 1
    json.dump({"side": "bytewax", "records_per_sec": done / secs, "records": done, "seconds": round(secs, 3),
               "process_cpu": round(cpu / secs, 3), "cpu_us_per_record": round(cpu / done * 1e6, 2),
               "python": sys.version.split()[0]}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
