"""Building confluent-kafka clients from a topology's configuration.

librdkafka properties come from ``kafka.client.config`` (no secrets: squall.config refuses
them there) with the component's own on top; secret properties come from
``kafka.secrets`` by reference (``env:NAME``, ``file:/path``) and are resolved here, in the
worker, just before the client is made. Nothing in this module logs a property value:
``describe`` gives what may be logged (names only for secrets).
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import structlog

from squall.config import SECRET_PROPERTY, validate
from squall.extras import needs
from squall.metrics import CountMetric

MAX_SECRET_BYTES = 64 * 1024
# Properties squall sets itself on every consumer: offsets are committed only by the spout.
CONSUMER_FIXED = {"enable.auto.commit": False, "enable.auto.offset.store": False}


WARN_EVERY = 30.0  # client error logs at most this often per task


class KafkaConfigError(ValueError):
    """Kafka settings that cannot work; the message names the property, never a secret."""


def confluent() -> Any:
    """The confluent_kafka module, imported on first use: it is an optional dependency (a
    heavy one, with librdkafka inside), needed only where Kafka components run."""
    try:
        import confluent_kafka  # noqa: PLC0415 - the lazy import of an optional extra
    except ImportError:
        raise KafkaConfigError(needs("squall.contrib.kafka", "confluent-kafka", "kafka")) from None
    return confluent_kafka


def resolve_secrets(refs: Mapping[str, str], environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """property -> secret value for every ``env:NAME`` or ``file:/path`` reference. A missing
    variable or unreadable file is a KafkaConfigError naming the property and the source."""
    env = os.environ if environ is None else environ
    out = {}
    for prop, ref in refs.items():
        if not isinstance(ref, str):
            raise KafkaConfigError(f"kafka.secrets {prop!r}: a reference must be a string")
        if ref.startswith("env:"):
            name = ref[4:]
            if name not in env:
                raise KafkaConfigError(f"kafka.secrets {prop!r}: environment variable {name} is not set")
            out[prop] = env[name]
        elif ref.startswith("file:"):
            path = ref[5:]
            try:
                with open(path, "rb") as fh:
                    data = fh.read(MAX_SECRET_BYTES + 1)
            except OSError as exc:
                raise KafkaConfigError(f"kafka.secrets {prop!r}: cannot read {path}: {exc.strerror}") from None
            if len(data) > MAX_SECRET_BYTES:
                raise KafkaConfigError(f"kafka.secrets {prop!r}: {path} is over {MAX_SECRET_BYTES} bytes")
            try:
                out[prop] = data.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise KafkaConfigError(f"kafka.secrets {prop!r}: {path} is not UTF-8 text") from None
        else:
            raise KafkaConfigError(f"kafka.secrets {prop!r}: the reference must start with env: or file:")
    return out


def client_config(conf: Mapping[str, Any], own: Mapping[str, Any] | None = None,
                  bootstrap: str | None = None) -> dict[str, Any]:
    """librdkafka properties for a client: the topology's, the component's, bootstrap
    servers, and the resolved secrets (the result holds secrets: never log it)."""
    props: dict[str, Any] = {**(conf.get("kafka.client.config") or {}), **(own or {})}
    servers = bootstrap or props.get("bootstrap.servers") or conf.get("kafka.bootstrap.servers")
    if not servers:
        raise KafkaConfigError("no Kafka bootstrap servers: set kafka.bootstrap.servers or give the "
                               "component bootstrap_servers")
    props["bootstrap.servers"] = servers
    props.update(resolve_secrets(conf.get("kafka.secrets") or {}))
    props.setdefault("logger", LIBRDKAFKA_LOG)
    return props


class LibrdkafkaLog:
    """librdkafka's own log lines (connection failures, broker state) into the worker's
    structured log instead of the process's stderr. confluent-kafka hands them over with a
    stdlib level and printf-style arguments when the client is polled."""

    def __init__(self) -> None:
        self._log = structlog.get_logger("squall.contrib.kafka.librdkafka")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        try:
            text = fmt % args if args else fmt
        except (TypeError, ValueError):
            text = f"{fmt} {args!r}"
        self._log.log(level, "librdkafka", message=text[:2000])


LIBRDKAFKA_LOG = LibrdkafkaLog()


def describe(props: Mapping[str, Any], secret_names: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What may be logged of a client's properties: secrets replaced by their names' marker."""
    hidden = set(secret_names or ())
    return {k: ("<secret>" if k in hidden or SECRET_PROPERTY.search(k) else v) for k, v in props.items()}


def component_conf(conf: Mapping[str, Any] | None, client: Mapping[str, Any] | None, who: str) -> dict[str, Any]:
    """A Kafka component's own ``kafka.*`` settings (its ``client_config`` as
    ``kafka.client.config``), validated like any configuration."""
    own = {"kafka.client.config": dict(client)} if client else {}
    out = validate({**(conf or {}), **own})
    if any(not k.startswith("kafka.") for k in out):
        raise ValueError(f"{who} conf takes kafka.* keys only")
    return out


class ClientErrors:
    """Errors the client reports (it retries them itself: a broker away, a lost
    connection): counted in a metric, logged at most every WARN_EVERY seconds."""

    def __init__(self, context: Any, log: Any, bucket: float) -> None:
        self.metric = context.register_metric("kafka_client_errors", CountMetric(), bucket)
        self.log = log
        self._warned_at = float("-inf")

    def __call__(self, err: Any) -> None:
        self.metric.incr()
        now = time.monotonic()
        if now - self._warned_at >= WARN_EVERY:
            self._warned_at = now
            self.log.warning("kafka client error (retried by the client)", error=str(err))
