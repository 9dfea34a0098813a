"""Configuration: shipped defaults, overrides in order, and validation that names the key.

Keys inside squall's own namespaces (``topology.``, ``nimbus.``, ...) must be known and
well typed; any other key is user configuration and passes through untouched, as in Storm.
"""
from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from squall.conf import DEFAULTS_PATH


class ConfigError(ValueError):
    """A configuration key is unknown, or its value has the wrong type."""


# The namespaces squall owns; a key under one of them must be declared below.
OWN_PREFIXES = ("zookeeper.", "squall.", "nimbus.", "supervisor.", "worker.", "task.", "zmq.", "topology.", "kafka.")

_INT, _FLOAT, _STR, _BOOL = "int", "float", "str", "bool"

# key -> (type, nullable). Mirrors conf/defaults.yaml; a test keeps the two in step.
SCHEMA: dict[str, tuple[str, bool]] = {
    "zookeeper.servers": ("list[str]", False),
    "zookeeper.port": (_INT, False),
    "zookeeper.root": (_STR, False),
    "zookeeper.session.timeout.ms": (_INT, False),
    "zookeeper.connection.timeout.ms": (_INT, False),
    "zookeeper.auth.user": (_STR, True),
    "zookeeper.auth.password": (_STR, True),
    "squall.local.dir": (_STR, False),
    "squall.log.dir": (_STR, True),
    "squall.log.format": ("enum:console,json", False),
    "squall.log.level": ("enum:DEBUG,INFO,WARNING,ERROR", False),
    "squall.messaging.transport": ("enum:zmq,local", False),
    "nimbus.host": (_STR, False),
    "nimbus.port": (_INT, False),
    "nimbus.monitor.freq.secs": (_FLOAT, False),
    "nimbus.task.timeout.secs": (_FLOAT, False),
    "nimbus.supervisor.timeout.secs": (_FLOAT, False),
    "nimbus.task.launch.secs": (_FLOAT, False),
    "nimbus.code.max.upload.bytes": (_INT, False),
    "nimbus.leader.poll.secs": (_FLOAT, False),
    "nimbus.bind.host": (_STR, True),
    "nimbus.auth.enabled": (_BOOL, False),
    "nimbus.auth.tokens.file": (_STR, True),
    "nimbus.tls.cert.file": (_STR, True),
    "nimbus.tls.key.file": (_STR, True),
    "nimbus.tls.ca.file": (_STR, True),
    "squall.token": (_STR, True),
    "squall.http.handshake.timeout.secs": (_FLOAT, False),
    "squall.http.header.timeout.secs": (_FLOAT, False),
    "squall.http.body.read.timeout.secs": (_FLOAT, False),
    "squall.http.max.connections": (_INT, False),
    "squall.http.max.connections.per.address": (_INT, False),
    "squall.http.body.min.rate.bytes": (_INT, False),
    "squall.http.request.timeout.secs": (_FLOAT, False),
    "squall.http.reply.timeout.secs": (_FLOAT, False),
    "nimbus.http.threads": (_INT, False),
    "supervisor.slots.ports": ("list[int]", False),
    "supervisor.host": (_STR, False),
    "supervisor.id": (_STR, True),
    "supervisor.monitor.frequency.secs": (_FLOAT, False),
    "supervisor.heartbeat.frequency.secs": (_FLOAT, False),
    "supervisor.worker.start.timeout.secs": (_FLOAT, False),
    "supervisor.worker.timeout.secs": (_FLOAT, False),
    "supervisor.worker.shutdown.sleep.secs": (_FLOAT, False),
    "supervisor.restart.grace.secs": (_FLOAT, False),
    "supervisor.worker.command": ("list[str]", True),
    "supervisor.worker.user": (_STR, True),
    "supervisor.worker.uids": ("list[int]", False),
    "supervisor.worker.runtime.dir": (_STR, False),
    "supervisor.cgroup.dir": (_STR, False),
    "worker.memory.max.mb": (_INT, True),
    "worker.zookeeper.max.connections": (_INT, True),
    "supervisor.code.max.unpacked.bytes": (_INT, False),
    "supervisor.code.max.members": (_INT, False),
    "supervisor.metrics.port": (_INT, True),
    "supervisor.logviewer.port": (_INT, True),
    "supervisor.tls.cert.file": (_STR, True),
    "supervisor.tls.key.file": (_STR, True),
    "supervisor.logviewer.max.bytes": (_INT, False),
    "supervisor.venv.pip.args": ("list[str]", False),
    "supervisor.venv.build.timeout.secs": (_FLOAT, False),
    "supervisor.venv.retry.secs": (_FLOAT, False),
    "supervisor.venv.cache.max": (_INT, False),
    "supervisor.venv.max.mb": (_INT, False),
    "worker.log.max.bytes": (_INT, False),
    "worker.log.backups": (_INT, False),
    "supervisor.state.dir": (_STR, True),
    "worker.heartbeat.frequency.secs": (_FLOAT, False),
    "task.heartbeat.frequency.secs": (_FLOAT, False),
    "worker.metrics.frequency.secs": (_FLOAT, False),
    "task.refresh.poll.secs": (_FLOAT, False),
    "worker.receive.high.watermark": (_FLOAT, False),
    "worker.receive.low.watermark": (_FLOAT, False),
    "worker.pin.cpu": (_BOOL, False),
    "zmq.hwm": (_INT, False),
    "zmq.linger.millis": (_INT, False),
    "zmq.bind.host": (_STR, True),
    "zmq.curve": (_BOOL, False),
    "zmq.max.message.bytes": (_INT, False),
    "worker.transfer.held.max.bytes": (_INT, False),
    "topology.name": (_STR, True),
    "topology.workers": (_INT, False),
    "topology.acker.executors": (_INT, True),
    "topology.message.timeout.secs": (_FLOAT, False),
    "topology.enable.message.timeouts": (_BOOL, False),
    "topology.max.spout.pending": (_INT, True),
    "topology.tick.tuple.freq.secs": (_FLOAT, True),
    "topology.executor.receive.buffer.size": (_INT, False),
    "topology.disable.loadaware.messaging": (_BOOL, False),
    "topology.worker.executor.threads": (_INT, False),
    "topology.transfer.buffer.size": (_INT, False),
    "topology.producer.batch.size": (_INT, False),
    "topology.batch.flush.interval.millis": (_FLOAT, False),
    "topology.spout.batch.size": (_INT, False),
    "topology.sleep.spout.wait.strategy.time.ms": (_FLOAT, False),
    "topology.debug": (_BOOL, False),
    "topology.max.error.report.per.interval": (_INT, False),
    "topology.error.throttle.interval.secs": (_FLOAT, False),
    "topology.errors.kept": (_INT, False),
    "topology.serializers": ("dict", False),
    "topology.testing.always.try.serialize": (_BOOL, False),
    "topology.state.provider": ("enum:memory,embedded,redis", True),
    "topology.state.checkpoint.interval.ms": (_INT, False),
    "topology.state.checkpoint.timeout.secs": (_FLOAT, True),
    "topology.state.redis.url": (_STR, False),
    "topology.state.redis.timeout.secs": (_FLOAT, False),
    "topology.state.snapshot": (_STR, True),
    "topology.state.carry.over": (_BOOL, False),
    "topology.state.namespace": (_STR, True),
    "topology.window.max.tuples": (_INT, False),
    "topology.multilang.serializer": ("enum:json,msgpack,org.apache.storm.multilang.JsonSerializer", False),
    "topology.subprocess.timeout.secs": (_FLOAT, False),
    "topology.shellbolt.max.pending": (_INT, False),
    "topology.multilang.max.inflight": (_INT, False),
    "topology.multilang.max.message.bytes": (_INT, False),
    "topology.multilang.log.lines.per.sec": (_INT, False),
    "topology.streamparse.mode": ("enum:in-process,multilang", False),
    "topology.metrics.consumer.register": ("list[dict]", False),
    "topology.builtin.metrics.bucket.size.secs": (_FLOAT, False),
    "topology.worker.hook.start.timeout.secs": (_FLOAT, False),
    "topology.worker.hook.shutdown.timeout.secs": (_FLOAT, False),
    "topology.environment": ("dict", False),
    "topology.python.requirements": (_STR, True),
    "kafka.bootstrap.servers": (_STR, True),
    "kafka.client.config": ("dict", False),
    "kafka.secrets": ("dict", False),
    "kafka.spout.first.poll.offset.strategy": (
        "enum:EARLIEST,LATEST,UNCOMMITTED_EARLIEST,UNCOMMITTED_LATEST", False),
    "kafka.spout.offset.commit.period.ms": (_INT, False),
    "kafka.spout.max.uncommitted.offsets": (_INT, False),
    "kafka.spout.poll.max.records": (_INT, False),
    "kafka.spout.partition.refresh.period.ms": (_INT, False),
    "kafka.spout.retry.initial.delay.ms": (_INT, False),
    "kafka.spout.retry.delay.multiplier": (_FLOAT, False),
    "kafka.spout.retry.max.delay.ms": (_INT, False),
    "kafka.spout.retry.max.count": (_INT, True),
    "kafka.spout.metrics.time.bucket.secs": (_FLOAT, False),
    "kafka.bolt.max.in.flight": (_INT, False),
    "kafka.bolt.full.wait.ms": (_INT, False),
    "kafka.bolt.delivery.timeout.ms": (_INT, False),
    "kafka.backfill.poll.timeout.secs": (_FLOAT, False),
}

# Allowed ranges of numeric keys: (lowest, highest, whether the lowest itself is allowed).
# Every number must also be finite. A list of ints (ports) is checked element by element.
_DAY = 86400.0
_PORT = (1, 65535, True)
_SECS = (0.0, _DAY, False)          # a positive period or timeout, at most a day
_COUNT = (1, 10**9, True)
RANGES: dict[str, tuple[float, float, bool]] = {
    "zookeeper.port": _PORT,
    "zookeeper.session.timeout.ms": (100, 3_600_000, True),
    "zookeeper.connection.timeout.ms": (100, 3_600_000, True),
    "nimbus.port": (0, 65535, True),
    "nimbus.monitor.freq.secs": _SECS,
    "nimbus.task.timeout.secs": _SECS,
    "nimbus.supervisor.timeout.secs": _SECS,
    "nimbus.task.launch.secs": _SECS,
    "nimbus.code.max.upload.bytes": (1, 2**40, True),
    "nimbus.leader.poll.secs": _SECS,
    "squall.http.handshake.timeout.secs": (0.0, 3600.0, False),
    "squall.http.header.timeout.secs": (0.0, 3600.0, False),
    "squall.http.body.read.timeout.secs": (0.0, 3600.0, False),
    "squall.http.max.connections": (1, 100_000, True),
    "squall.http.max.connections.per.address": (1, 100_000, True),
    "squall.http.body.min.rate.bytes": (1, 2**40, True),
    "squall.http.request.timeout.secs": (0.0, 86400.0, False),
    "squall.http.reply.timeout.secs": (0.0, 86400.0, False),
    "nimbus.http.threads": (1, 1000, True),
    "supervisor.slots.ports": _PORT,
    "supervisor.monitor.frequency.secs": _SECS,
    "supervisor.heartbeat.frequency.secs": _SECS,
    "supervisor.worker.start.timeout.secs": _SECS,
    "supervisor.worker.timeout.secs": _SECS,
    "supervisor.worker.shutdown.sleep.secs": (0.0, 3600.0, True),
    "supervisor.code.max.unpacked.bytes": (1, 2**40, True),
    "supervisor.code.max.members": (1, 10**7, True),
    "supervisor.logviewer.port": (0, 65535, True),
    "supervisor.logviewer.max.bytes": (1, 2**40, True),
    "supervisor.venv.build.timeout.secs": (1.0, _DAY, True),
    "supervisor.venv.retry.secs": (0.0, _DAY, True),
    "supervisor.venv.cache.max": (0, 1000, True),
    "supervisor.venv.max.mb": (1, 2**30, True),
    "worker.log.max.bytes": (1, 2**40, True),
    "worker.log.backups": (0, 1000, True),
    "worker.zookeeper.max.connections": (1, 10_000, True),
    "worker.metrics.frequency.secs": _SECS,
    "supervisor.metrics.port": (0, 65535, True),
    "worker.heartbeat.frequency.secs": _SECS,
    "task.heartbeat.frequency.secs": _SECS,
    "task.refresh.poll.secs": _SECS,
    "worker.receive.high.watermark": (0.0, 1.0, False),
    "worker.receive.low.watermark": (0.0, 1.0, True),
    "worker.transfer.held.max.bytes": (1, 2**40, True),
    "zmq.hwm": (0, 10**6, True),
    "zmq.linger.millis": (0, 3_600_000, True),
    "zmq.max.message.bytes": (1024, 2**31, True),
    "topology.workers": (1, 10_000, True),
    "topology.acker.executors": (0, 10_000, True),
    "topology.message.timeout.secs": _SECS,
    "topology.max.spout.pending": _COUNT,
    "topology.tick.tuple.freq.secs": _SECS,
    "topology.executor.receive.buffer.size": _COUNT,
    "topology.worker.executor.threads": (0, 10_000, True),
    "topology.transfer.buffer.size": _COUNT,
    "topology.producer.batch.size": (1, 10**6, True),
    "topology.batch.flush.interval.millis": (0.0, 60_000.0, True),
    "topology.spout.batch.size": (1, 10**6, True),
    "topology.sleep.spout.wait.strategy.time.ms": (0.0, 60_000.0, True),
    "topology.max.error.report.per.interval": (0, 10**6, True),
    "topology.error.throttle.interval.secs": _SECS,
    "topology.errors.kept": (0, 10_000, True),
    "topology.state.checkpoint.interval.ms": (1, 86_400_000, True),
    "topology.state.checkpoint.timeout.secs": _SECS,
    "topology.state.redis.timeout.secs": _SECS,
    "topology.window.max.tuples": _COUNT,
    "topology.subprocess.timeout.secs": _SECS,
    "topology.shellbolt.max.pending": _COUNT,
    "topology.multilang.max.inflight": _COUNT,
    "topology.multilang.max.message.bytes": (1024, 2**31, True),
    "topology.multilang.log.lines.per.sec": (0, 10**6, True),
    "topology.builtin.metrics.bucket.size.secs": _SECS,
    "topology.worker.hook.start.timeout.secs": (0.0, 600.0, False),
    "topology.worker.hook.shutdown.timeout.secs": (0.0, 10.0, False),
    "kafka.spout.offset.commit.period.ms": (1, 86_400_000, True),
    "kafka.spout.max.uncommitted.offsets": _COUNT,
    "kafka.spout.poll.max.records": (1, 100_000, True),
    "kafka.spout.partition.refresh.period.ms": (100, 86_400_000, True),
    "kafka.spout.retry.initial.delay.ms": (0, 86_400_000, True),
    "kafka.spout.retry.delay.multiplier": (1.0, 100.0, True),
    "kafka.spout.retry.max.delay.ms": (0, 86_400_000, True),
    "kafka.spout.retry.max.count": (0, 10**9, True),
    "kafka.spout.metrics.time.bucket.secs": _SECS,
    "kafka.bolt.max.in.flight": (1, 10**7, True),
    "kafka.bolt.full.wait.ms": (0, 60_000, True),
    "kafka.bolt.delivery.timeout.ms": (1, 86_400_000, True),
    "kafka.backfill.poll.timeout.secs": _SECS,
}

# librdkafka properties that hold a secret: refused in kafka.client.config (whose values every
# reader of the topology's configuration sees), given by reference in kafka.secrets instead.
SECRET_PROPERTY = re.compile(r"password|secret|\.pem$|^sasl\.oauthbearer\.config$|^sasl\.kerberos\.keytab$")


def _check_kafka(key: str, value: dict) -> None:
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


# topology.environment: variables a topology's workers (and their multilang children) get.
# Never what isolation, security or squall itself sets for a worker: its identity, search
# paths, the dynamic loader, the interpreter's own settings and squall's variables.
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
ENV_RESERVED = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "VIRTUAL_ENV", "TMPDIR"})
ENV_RESERVED_PREFIXES = ("SQUALL_", "PYTHON", "LD_")
ENV_MAX_VARS = 100
ENV_MAX_VALUE_CHARS = 8192


def _check_environment(key: str, value: dict) -> None:
    if len(value) > ENV_MAX_VARS:
        raise ConfigError(f"config key {key!r}: {len(value)} variables, more than {ENV_MAX_VARS}")
    for name, v in value.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ConfigError(f"config key {key!r}: {name!r:.140} is not a variable name "
                              "(letters, digits and _, not starting with a digit, at most 128)")
        if name.upper() in ENV_RESERVED or name.upper().startswith(ENV_RESERVED_PREFIXES):
            raise ConfigError(f"config key {key!r}: {name} is set by squall for every worker (its identity, search "
                              f"paths, loader and interpreter: {', '.join(sorted(ENV_RESERVED))}, "
                              f"{', '.join(p + '*' for p in ENV_RESERVED_PREFIXES)}); a topology may not change it")
        if not isinstance(v, str) or "\0" in v or len(v) > ENV_MAX_VALUE_CHARS:
            raise ConfigError(f"config key {key!r}: {name} must be a string of at most {ENV_MAX_VALUE_CHARS} "
                              f"characters without NUL, got {type(v).__name__} {v!r:.60}")


# What one entry of topology.metrics.consumer.register may hold (Storm's keys): the class,
# and optionally its argument, parallelism, queue bound and metric-name filters.
CONSUMER_KEYS = {"class", "argument", "parallelism.hint", "max.retain.metric.tuples", "whitelist", "blacklist"}


def _check_consumers(key: str, value: list) -> None:
    for i, entry in enumerate(value):
        where = f"config key {key!r}, entry {i}"
        unknown = sorted(set(map(str, entry)) - CONSUMER_KEYS)
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown} (known: {sorted(CONSUMER_KEYS)})")
        cls = entry.get("class")
        if not isinstance(cls, str) or not cls.strip():
            raise ConfigError(f"{where}: 'class' must name the consumer class (module.Class), got {cls!r}")
        for name, high in (("parallelism.hint", 1000), ("max.retain.metric.tuples", 10**6)):
            n = entry.get(name, 1)
            if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= high:
                raise ConfigError(f"{where}: {name!r} must be an integer from 1 to {high}, got {n!r}")
        if "whitelist" in entry and "blacklist" in entry:
            raise ConfigError(f"{where}: give 'whitelist' or 'blacklist', not both")
        for name in ("whitelist", "blacklist"):
            patterns = entry.get(name, [])
            if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
                raise ConfigError(f"{where}: {name!r} must be a list of regular expressions")
            for p in patterns:
                try:
                    re.compile(p)
                except re.error as exc:
                    raise ConfigError(f"{where}: {name!r} pattern {p!r}: {exc}") from None


def _type_ok(kind: str, value: Any) -> bool:
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _FLOAT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == _STR:
        return isinstance(value, str)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == "dict":
        return isinstance(value, dict)
    if kind.startswith("enum:"):
        return value in kind[5:].split(",")
    if kind.startswith("list["):
        inner = kind[5:-1]
        return isinstance(value, list) and all(_type_ok(inner, v) for v in value)
    raise AssertionError(kind)


def validate_key(key: str, value: Any) -> None:
    """Raise ConfigError naming ``key`` when it is unknown or its value is ill-typed."""
    if not isinstance(key, str):
        raise ConfigError(f"config key {key!r} is not a string")
    spec = SCHEMA.get(key)
    if spec is None:
        guess = suggestion(key)
        if key.startswith(OWN_PREFIXES):
            raise ConfigError(f"unknown config key {key!r}" + (f": did you mean {guess!r}?" if guess else ""))
        if guess is not None and _looks_own(key):
            raise ConfigError(f"unknown config key {key!r}: did you mean {guess!r}? (a key of your own must "
                              "not look like one of squall's: name it differently)")
        return  # user configuration
    kind, nullable = spec
    if value is None:
        if nullable:
            return
        raise ConfigError(f"config key {key!r} may not be null")
    if not _type_ok(kind, value):
        raise ConfigError(f"config key {key!r} expects {kind}, got {type(value).__name__} {value!r}")
    if key in ("kafka.client.config", "kafka.secrets"):
        _check_kafka(key, value)
    if key == "topology.metrics.consumer.register":
        _check_consumers(key, value)
    if key == "topology.environment":
        _check_environment(key, value)
    bounds = RANGES.get(key)
    for number in value if isinstance(value, list) else [value]:
        if isinstance(number, float) and not math.isfinite(number):
            raise ConfigError(f"config key {key!r} must be a finite number, got {number!r}")
        if bounds is not None and not _in_range(number, bounds):
            low, high, low_ok = bounds
            raise ConfigError(f"config key {key!r} must be {'at least' if low_ok else 'more than'} {low} "
                              f"and at most {high}, got {number!r}")


def suggestion(key: str) -> str | None:
    """The known key ``key`` is most likely a misspelling of, if any."""
    found = difflib.get_close_matches(key, SCHEMA, n=1, cutoff=0.85)
    return found[0] if found else None


def _looks_own(key: str) -> bool:
    """Does ``key`` start with a misspelling of one of squall's namespaces (``topolgy.``)?"""
    head = key.split(".", 1)[0] + "."
    return bool(difflib.get_close_matches(head, OWN_PREFIXES, n=1, cutoff=0.8))


def _in_range(number: float, bounds: tuple[float, float, bool]) -> bool:
    low, high, low_ok = bounds
    return (number >= low if low_ok else number > low) and number <= high


def validate(conf: Mapping[str, Any]) -> dict[str, Any]:
    """Validate every key of ``conf`` and return it as a plain dict."""
    if not isinstance(conf, Mapping):
        raise ConfigError(f"configuration must be a mapping, got {type(conf).__name__}")
    for key, value in conf.items():
        validate_key(key, value)
    return dict(conf)


def load_defaults() -> dict[str, Any]:
    with open(DEFAULTS_PATH, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def read_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a user config file; an unreadable or non-mapping file is a ConfigError."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys to values")
    try:
        return validate(data)
    except ConfigError as exc:
        raise ConfigError(f"config file {path}: {exc}") from None


def parse_overrides(pairs: Iterable[str]) -> dict[str, Any]:
    """Parse ``key=value`` strings (values are YAML scalars or flow collections)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"override {pair!r} is not of the form key=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        validate_key(key, value)
        out[key] = value
    return out


def user_config_path() -> Path | None:
    """The user file: $SQUALL_CONF, else ./squall.yaml, else ~/.squall/squall.yaml."""
    env = os.environ.get("SQUALL_CONF")
    if env:
        return Path(env)
    for candidate in (Path("squall.yaml"), Path.home() / ".squall" / "squall.yaml"):
        if candidate.is_file():
            return candidate
    return None


def build_config(*layers: Mapping[str, Any] | None, user_file: bool = True) -> dict[str, Any]:
    """Defaults, then the user file (if any), then ``$SQUALL_TOKEN`` (as ``squall.token``),
    then each layer in order (``-c`` comes last), all validated."""
    conf = load_defaults()
    if user_file:
        path = user_config_path()
        if path is not None:
            conf.update(read_yaml_file(path))
    if os.environ.get(TOKEN_ENV):
        conf["squall.token"] = os.environ[TOKEN_ENV]
    for layer in layers:
        if layer:
            conf.update(validate(layer))
    try:
        zookeeper_auth(conf)  # the password may come from the environment
    except ConfigError as exc:
        raise ConfigError(f"config: {exc}") from None
    return conf


# The API token (clients, supervisors): it wins over the user file's ``squall.token``, and
# ``-c squall.token=...`` over it (``build_config``); never passed to workers.
TOKEN_ENV = "SQUALL_TOKEN"

# The daemons' ZooKeeper password when ``zookeeper.auth.password`` is unset (compose's env_file,
# systemd's EnvironmentFile), so it need sit in no mounted config file; never passed to workers.
ZOOKEEPER_PASSWORD_ENV = "SQUALL_ZOOKEEPER_PASSWORD"


def zookeeper_auth(conf: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The daemons' ZooKeeper digest (user, password): ``zookeeper.auth.user`` with
    ``zookeeper.auth.password``, else ``$SQUALL_ZOOKEEPER_PASSWORD``; None when neither is
    set (no ZooKeeper authentication; the variable alone turns nothing on). ConfigError when
    only one half is there or the user cannot be a digest user."""
    env = os.environ if environ is None else environ
    user = conf.get("zookeeper.auth.user")
    password = conf.get("zookeeper.auth.password") or (env.get(ZOOKEEPER_PASSWORD_ENV) if user else None)
    if bool(user) != bool(password):
        raise ConfigError(f"'zookeeper.auth.user' and 'zookeeper.auth.password' (or ${ZOOKEEPER_PASSWORD_ENV}) "
                          "must be set together, or neither (no ZooKeeper authentication)")
    if not user or not password:  # both or neither, from here
        return None
    if ":" in user:
        raise ConfigError("a ZooKeeper digest user must be non-empty and contain no ':'")
    return user, password
