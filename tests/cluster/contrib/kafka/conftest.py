"""A Kafka-protocol broker for the Kafka tests: one Tansu per session behind a BrokerGate
(clients see the gate's port, so a test can take the broker away and give it back)."""
from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from support.kafka import BrokerGate, Tansu


class Broker:
    def __init__(self, tansu: Tansu, gate: BrokerGate) -> None:
        self.tansu, self.gate = tansu, gate
        self.bootstrap = f"127.0.0.1:{gate.port}"

    def topic_name(self, stem: str) -> str:
        """A topic of this test's own (one broker serves the whole session)."""
        return f"{stem}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator[Broker]:
    gate = BrokerGate()
    tansu = Tansu(tmp_path_factory.mktemp("tansu"), advertise=gate.port).start()
    gate.start(tansu.port)
    try:
        yield Broker(tansu, gate)
    finally:
        gate.stop()
        tansu.close()
