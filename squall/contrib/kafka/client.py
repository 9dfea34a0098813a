"""Building confluent-kafka clients from a topology's configuration.

librdkafka properties come from ``kafka.client.config`` (no secrets: squall.config refuses
them there) with the component's own on top; secret properties come from
``kafka.secrets`` by reference (``env:NAME``, ``file:/path``) and are resolved here, in the
worker, just before the client is made. Nothing in this module logs a property value:
``describe`` gives what may be logged (names only for secrets).
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from squall.config import validate
from squall.contrib.kafka.conf import SECRET_PROPERTY
from squall.errors import SquallError
from squall.extras import needs
from squall.metrics import CountMetric

MAX_SECRET_BYTES = 64 * 1024
# Properties squall sets itself on every consumer: offsets are committed only by the spout.
CONSUMER_FIXED = {"enable.auto.commit": False, "enable.auto.offset.store": False}


WARN_EVERY = 30.0  # client error logs at most this often per task
REPORT_AFTER = 5.0  # a broker away this long is reported as an error of the component (once a spell)


class KafkaConfigError(SquallError, ValueError):
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
    # librdkafka's own lines are debug output here (LibrdkafkaLog) and it writes one per
    # reconnect: a broker that is away would cost the polling thread their handling. Only
    # critical ones unless the configuration asks for more ("log_level": 7 for all).
    props.setdefault("log_level", 2)
    props.setdefault("log.connection.close", False)
    return props


class LibrdkafkaLog:
    """librdkafka's own log lines (connection failures, broker state) into the worker's
    structured log instead of the process's stderr, at debug level: the client repeats a
    failure on every reconnect (hundreds of lines a minute for a broker that is away), and
    the component says it once itself (``ClientErrors``). Only critical lines keep their
    level. confluent-kafka hands them over when the client is polled."""

    def __init__(self) -> None:
        self._log = structlog.get_logger("squall.contrib.kafka.librdkafka")

    def log(self, level: int, fmt: str, *args: Any) -> None:
        try:
            text = fmt % args if args else fmt
        except (TypeError, ValueError):
            text = f"{fmt} {args!r}"
        self._log.log(level if level >= logging.CRITICAL else logging.DEBUG, "librdkafka", message=text[:2000])


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


# Per broker address and what was tried, in this process: when a spell of errors was last
# logged and reported. Every task's clients meet the same outage; one line says it.
_WARNED: dict[tuple[str, str], float] = {}
_REPORTED: dict[tuple[str, str], float] = {}


class ClientErrors:
    """Errors a client reports and retries itself (a broker away, a lost connection).

    Each is counted (``kafka_client_errors``). The first of a spell is one warning that
    names the address and what the component was doing (one for all the process's clients
    of that address doing that); while the spell lasts, a reminder at most every WARN_EVERY seconds;
    after REPORT_AFTER seconds it is also reported as an error of the component (``squall
    status``; ``squall run`` fails when a spout reported errors and emitted nothing);
    ``answered`` ends the spell with one line. The client itself retries with back-off
    (``reconnect.backoff.ms`` up to ``reconnect.backoff.max.ms``).
    """

    def __init__(self, context: Any, log: Any, bucket: float, address: str, doing: str,
                 report: Callable[[str], None] | None = None) -> None:
        self.metric = context.register_metric("kafka_client_errors", CountMetric(), bucket)
        self.log = log
        self.report = report     # the component's report_error: a spell over REPORT_AFTER is an error
        self.reported = False
        self.address, self.doing = address, doing
        self.spell = (address, doing)
        self.down_since: float | None = None
        self.reached = False     # has the broker ever answered this component
        self.errors = 0          # in the current spell
        self._warned_at = float("-inf")

    def __call__(self, err: Any) -> None:
        self.metric.incr()
        now = time.monotonic()
        if self.down_since is None:
            self.down_since, self.errors = now, 0
        self.errors += 1
        if self.report is not None and not self.reported and now - self.down_since >= REPORT_AFTER:
            self.reported = True
            if now - _REPORTED.get(self.spell, float("-inf")) >= WARN_EVERY:
                _REPORTED[self.spell] = now
                state = "has not answered" if not self.reached else "has not answered again"
                self.report(f"Kafka at {self.address} {state} for {now - self.down_since:.0f}s (trying to "
                            f"{self.doing}): {describe_error(err)}; retrying with back-off")
        if now - self._warned_at >= WARN_EVERY and now - _WARNED.get(self.spell, float("-inf")) >= WARN_EVERY:
            self._warned_at = _WARNED[self.spell] = now
            if self.errors == 1:
                self.log.warning(f"cannot reach Kafka at {self.address} to {self.doing}; retrying with back-off",
                                 error=describe_error(err))
            else:
                self.log.warning(f"still cannot reach Kafka at {self.address} to {self.doing}",
                                 error=describe_error(err), errors=self.errors,
                                 secs=round(now - self.down_since, 1))

    def answered(self) -> None:
        """The broker answered: a spell of errors (if any) is over."""
        self.reached = True
        if self.down_since is not None:
            secs = time.monotonic() - self.down_since
            self.down_since = None
            self.reported = False
            self._warned_at = float("-inf")
            _WARNED.pop(self.spell, None)
            _REPORTED.pop(self.spell, None)
            if self.errors:
                self.log.info(f"Kafka at {self.address} answers again", secs=round(secs, 1), errors=self.errors)

    def away_for(self, now: float) -> float:
        """Seconds the current spell has lasted (0 when the broker answers)."""
        return 0.0 if self.down_since is None else now - self.down_since


def describe_error(err: Any) -> str:
    """A client error as one short line (a KafkaError's own text, or the exception's)."""
    text = err.str() if hasattr(err, "str") and callable(err.str) else str(err)
    return text[:300]
