"""spark-run over a Kafka topic gives the live topology's per-key results: the default range
(earliest to the group's committed offsets) is exactly what the live run finished."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner

from squall.cli import main as squall_main
from squall.loader import load_topology
from squall.local import LocalCluster
from support.kafka import Tansu, committed, create_topic, produce, read_all
from support.paths import SPARK_TOPOLOGIES

pytestmark = pytest.mark.spark
TOPOLOGY = SPARK_TOPOLOGIES / "kafka_sums.py"
KEYS, N, PARTITIONS = 7, 3000, 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tansu = Tansu(tmp_path_factory.mktemp("tansu")).start()
    try:
        yield tansu
    finally:
        tansu.close()


def sums(rows):
    out: dict[str, int] = {}
    for key, value in rows:
        out[key] = max(out.get(key, 0), int(value))
    return out


def test_backfill_from_kafka_gives_the_live_results(broker, spark, tmp_path, monkeypatch):
    bs = broker.bootstrap
    topic, out = f"nums-{time.monotonic_ns()}", f"sums-{time.monotonic_ns()}"
    monkeypatch.setenv("KSPARK_TOPIC", topic)
    monkeypatch.setenv("KSPARK_GROUP", f"g-{topic}")
    monkeypatch.setenv("KSPARK_OUT", out)
    create_topic(bs, topic, PARTITIONS)
    create_topic(bs, out, 1)
    produce(bs, topic, [(f"k{i % KEYS}".encode(), str(i).encode()) for i in range(N)]
            + [(b"k0", b"\xff not text")])  # undecodable: reported live, malformed in the backfill
    topology, conf, _ = load_topology(str(TOPOLOGY))
    with LocalCluster({"squall.log.level": "WARNING"}) as lc:
        lc.submit("live", {**conf, "kafka.bootstrap.servers": bs}, topology)
        deadline = time.monotonic() + 120
        while sum(committed(bs, f"g-{topic}", topic, PARTITIONS).values()) < N + 1:
            assert time.monotonic() < deadline, "the live run did not commit every record"
            time.sleep(0.2)
        errors = lc.errors("live")
    assert any("undecodable" in e["error"] for es in errors.values() for e in es), errors
    live = sums((m.key().decode(), m.value().decode()) for m in read_all(bs, out, idle=1.0))
    reference = {f"k{k}": sum(i for i in range(N) if i % KEYS == k) for k in range(KEYS)}
    assert live == reference
    # Records after the live run are past the committed offsets: the default range leaves them out.
    produce(bs, topic, [(b"k1", b"1000000")])
    # As the guide writes it: the KafkaBolt (live output, and on ticks) is left out by itself,
    # so the stream it read is the one written.
    result = CliRunner().invoke(squall_main, [
        "spark-run", str(TOPOLOGY), "--input", "kafka=kafka:",
        "--output", str(tmp_path / "out"), "--output-format", "jsonl", "--master", "local[2]",
        "-c", f"kafka.bootstrap.servers={bs}"])
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    assert "skipped 1 malformed" in result.output, result.output
    assert "write: live output, left out by themselves" in result.output, result.output
    rows = [json.loads(line) for f in sorted((tmp_path / "out" / "sum").glob("part-*"))
            for line in f.read_text().splitlines()]
    assert sums((r["key"], r["value"]) for r in rows) == live
