"""The Kafka connector's configuration keys (``kafka.``), registered with squall's config
(``squall.config.FEATURE_KEYS`` names this module): their kinds, ranges and the checks of
the client properties and secret references. Defaults and what each key means are in
``conf/defaults.yaml``."""
from __future__ import annotations

import re
from typing import Any

from squall.config import COUNT, FLOAT, INT, SECS, STR, ConfigError, KeySpec, register_keys

# librdkafka properties that hold a secret: refused in kafka.client.config (whose values every
# reader of the topology's configuration sees), given by reference in kafka.secrets instead.
SECRET_PROPERTY = re.compile(r"password|secret|\.pem$|^sasl\.oauthbearer\.config$|^sasl\.kerberos\.keytab$")
_MS_DAY = (0, 86_400_000, True)


def check_properties(key: str, value: dict[str, Any]) -> None:
    """``kafka.client.config``: plain values, no secret; ``kafka.secrets``: references only."""
    for prop, v in value.items():
        if not isinstance(prop, str) or not prop:
            raise ConfigError(f"config key {key!r}: property names must be non-empty strings, got {prop!r}")
        if key == "kafka.client.config":
            if SECRET_PROPERTY.search(prop):
                raise ConfigError(f"config key {key!r}: {prop!r} holds a secret; give it in kafka.secrets "
                                  "as env:NAME or file:/path (a topology's configuration is shown to its readers)")
            if not isinstance(v, (str, int, float, bool)):
                raise ConfigError(f"config key {key!r}: property {prop!r} must be a string, number or bool")
        elif not isinstance(v, str) or not (v.startswith("env:") and len(v) > 4 or v.startswith("file:/")):
            raise ConfigError(f"config key {key!r}: {prop!r} must be a reference, env:NAME or file:/absolute/path")


register_keys({
    "kafka.bootstrap.servers": KeySpec(STR, nullable=True),
    "kafka.client.config": KeySpec("dict", check=check_properties),
    "kafka.secrets": KeySpec("dict", check=check_properties),
    "kafka.spout.first.poll.offset.strategy": KeySpec("enum:EARLIEST,LATEST,UNCOMMITTED_EARLIEST,UNCOMMITTED_LATEST"),
    "kafka.spout.offset.commit.period.ms": KeySpec(INT, bounds=(1, 86_400_000, True)),
    "kafka.spout.max.uncommitted.offsets": KeySpec(INT, bounds=COUNT),
    "kafka.spout.poll.max.records": KeySpec(INT, bounds=(1, 100_000, True)),
    "kafka.spout.partition.refresh.period.ms": KeySpec(INT, bounds=(100, 86_400_000, True)),
    "kafka.spout.retry.initial.delay.ms": KeySpec(INT, bounds=_MS_DAY),
    "kafka.spout.retry.delay.multiplier": KeySpec(FLOAT, bounds=(1.0, 100.0, True)),
    "kafka.spout.retry.max.delay.ms": KeySpec(INT, bounds=_MS_DAY),
    "kafka.spout.retry.max.count": KeySpec(INT, nullable=True, bounds=(0, 10**9, True)),
    "kafka.spout.metrics.time.bucket.secs": KeySpec(FLOAT, bounds=SECS),
    "kafka.bolt.max.in.flight": KeySpec(INT, bounds=(1, 10**7, True)),
    "kafka.bolt.full.wait.ms": KeySpec(INT, bounds=(0, 60_000, True)),
    "kafka.bolt.delivery.timeout.ms": KeySpec(INT, bounds=(1, 86_400_000, True)),
    "kafka.backfill.poll.timeout.secs": KeySpec(FLOAT, bounds=SECS),
}, __name__)
