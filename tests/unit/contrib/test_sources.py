"""Backfill sources: every registered ``spark-run --input`` scheme is routed to its source,
which is a BackfillSource the engine runs; files need no scheme; and every module that
registers a scheme is one the registry imports."""
from __future__ import annotations

import pytest

from squall.contrib.kafka.spark import KafkaInput
from squall.contrib.sources import SOURCES, BackfillError, BackfillSource, scheme_of
from squall.spark import FileInput, read_input
from support.paths import REPO

SCHEMES = SOURCES.names()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_spark_run_routes_each_scheme_to_its_source(scheme):
    entry = SOURCES.get(scheme)
    assert entry.example.startswith(f"{scheme}:") and scheme_of(entry.example) is entry
    source = read_input(None, "spout", entry.example, "jsonl")  # --input-format does not apply
    assert isinstance(source, BackfillSource)
    with pytest.raises(BackfillError, match="input 'spout'"):
        read_input(None, "spout", f"{scheme}:?nonsense=1", "jsonl")


def test_kafka_is_registered_by_its_connector():
    assert SOURCES.origin("kafka") == "squall.contrib.kafka.spark"
    assert isinstance(read_input(None, "orders", "kafka:orders?from=earliest", "jsonl"), KafkaInput)


def test_files_need_no_scheme(tmp_path):
    (tmp_path / "in.jsonl").write_text('{"n": 1}\n')
    source = read_input(None, "numbers", str(tmp_path / "in.jsonl"), "jsonl")
    assert isinstance(source, FileInput) and isinstance(source, BackfillSource)
    for uri in ("s3://bucket/orders", "file:///data/orders", "orders.jsonl"):  # URIs: pyarrow's files
        assert scheme_of(uri) is None
    with pytest.raises(BackfillError, match="input 'numbers'"):  # no such scheme: a file, and there is none
        read_input(None, "numbers", "nosuch:orders", "jsonl")


def test_every_module_that_registers_a_scheme_is_a_provider():
    registering = {".".join(path.relative_to(REPO).with_suffix("").parts) for path in (REPO / "squall").rglob("*.py")
                   if "SOURCES.register(" in path.read_text(encoding="utf-8")}
    assert registering == set(SOURCES.providers)
    assert {SOURCES.origin(s) for s in SCHEMES} == set(SOURCES.providers)
