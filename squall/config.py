"""Configuration: shipped defaults, overrides in order, and validation that names the key.

Keys inside squall's own namespaces (``topology.``, ``nimbus.``, ...) must be known and
well typed; any other key is user configuration and passes through untouched, as in Storm.

Every key is registered in ``KEYS`` with its ``KeySpec``: the keys of the core here, a
feature's beside its code (Storm keeps a connector's keys with the connector): Kafka's in
``squall.contrib.kafka.conf``, state's in ``squall.state.conf``, ... ``FEATURE_KEYS`` says
which module registers the keys under each feature's prefix; that module is imported when
such a key is checked (nimbus checking a topology's config with Kafka keys imports Kafka's
keys, whatever else it imported), and never for a config that names none of its keys.
``conf/defaults.yaml`` holds every key's default; a test keeps the two in step.
"""
from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from squall.conf import DEFAULTS_PATH
from squall.errors import SquallError
from squall.registry import Registry


class ConfigError(SquallError, ValueError):
    """A configuration key is unknown, or its value has the wrong type."""


INT, FLOAT, STR, BOOL = "int", "float", "str", "bool"  # KeySpec kinds; also "dict", "enum:a,b", "list[int]"
Bounds = tuple[float, float, bool]  # lowest, highest, whether the lowest itself is allowed


@dataclass(frozen=True)
class KeySpec:
    """How one key is checked: its kind, whether it may be null, the range of its numbers
    (every number must also be finite; a list's are checked one by one) and a check of
    its own (raises ConfigError naming the key)."""

    kind: str
    nullable: bool = False
    bounds: Bounds | None = None
    check: Callable[[str, Any], None] | None = None


# Where each feature registers its keys: the prefix of its keys -> its module.
FEATURE_KEYS = {
    "kafka.": "squall.contrib.kafka.conf",
    "topology.state.": "squall.state.conf",
    "topology.window.": "squall.windowing.conf",
    "topology.multilang.": "squall.multilang.conf",
    "topology.subprocess.": "squall.multilang.conf",
    "topology.shellbolt.": "squall.multilang.conf",
    "topology.streamparse.": "squall.multilang.conf",
}
KEYS: Registry[KeySpec] = Registry("config key", providers=sorted(set(FEATURE_KEYS.values())))

# The namespaces squall owns; a key under one of them must be registered.
OWN_PREFIXES = ("zookeeper.", "squall.", "nimbus.", "supervisor.", "worker.", "task.", "zmq.", "topology.",
                *(p for p in FEATURE_KEYS if not p.startswith("topology.")))


def register_keys(keys: Mapping[str, KeySpec], module: str) -> None:
    """Register a feature's keys (``module``: the feature's, named in FEATURE_KEYS)."""
    for key, spec in keys.items():
        KEYS.register(key, spec, module)


# The core's keys: key -> (type, nullable).
SCHEMA: dict[str, tuple[str, bool]] = {
    "zookeeper.servers": ("list[str]", False),
    "zookeeper.port": (INT, False),
    "zookeeper.root": (STR, False),
    "zookeeper.session.timeout.ms": (INT, False),
    "zookeeper.connection.timeout.ms": (INT, False),
    "zookeeper.auth.user": (STR, True),
    "zookeeper.auth.password": (STR, True),
    "squall.local.dir": (STR, False),
    "squall.log.dir": (STR, True),
    "squall.log.format": ("enum:console,json", False),
    "squall.log.level": ("enum:DEBUG,INFO,WARNING,ERROR", False),
    "squall.messaging.transport": ("enum:zmq,local", False),
    "nimbus.host": (STR, False),
    "nimbus.port": (INT, False),
    "nimbus.monitor.freq.secs": (FLOAT, False),
    "nimbus.task.timeout.secs": (FLOAT, False),
    "nimbus.supervisor.timeout.secs": (FLOAT, False),
    "nimbus.task.launch.secs": (FLOAT, False),
    "nimbus.code.max.upload.bytes": (INT, False),
    "nimbus.leader.poll.secs": (FLOAT, False),
    "nimbus.bind.host": (STR, True),
    "nimbus.auth.enabled": (BOOL, False),
    "nimbus.auth.tokens.file": (STR, True),
    "nimbus.tls.cert.file": (STR, True),
    "nimbus.tls.key.file": (STR, True),
    "nimbus.tls.ca.file": (STR, True),
    "squall.token": (STR, True),
    "squall.http.handshake.timeout.secs": (FLOAT, False),
    "squall.http.header.timeout.secs": (FLOAT, False),
    "squall.http.body.read.timeout.secs": (FLOAT, False),
    "squall.http.max.connections": (INT, False),
    "squall.http.max.connections.per.address": (INT, False),
    "squall.http.body.min.rate.bytes": (INT, False),
    "squall.http.request.timeout.secs": (FLOAT, False),
    "squall.http.reply.timeout.secs": (FLOAT, False),
    "nimbus.http.threads": (INT, False),
    "supervisor.slots.ports": ("list[int]", False),
    "supervisor.host": (STR, False),
    "supervisor.id": (STR, True),
    "supervisor.monitor.frequency.secs": (FLOAT, False),
    "supervisor.heartbeat.frequency.secs": (FLOAT, False),
    "supervisor.worker.start.timeout.secs": (FLOAT, False),
    "supervisor.worker.timeout.secs": (FLOAT, False),
    "supervisor.worker.shutdown.sleep.secs": (FLOAT, False),
    "supervisor.restart.grace.secs": (FLOAT, False),
    "supervisor.worker.command": ("list[str]", True),
    "supervisor.worker.user": (STR, True),
    "supervisor.worker.uids": ("list[int]", False),
    "supervisor.worker.runtime.dir": (STR, False),
    "supervisor.cgroup.dir": (STR, False),
    "worker.memory.max.mb": (INT, True),
    "worker.zookeeper.max.connections": (INT, True),
    "supervisor.code.max.unpacked.bytes": (INT, False),
    "supervisor.code.max.members": (INT, False),
    "supervisor.metrics.port": (INT, True),
    "supervisor.logviewer.port": (INT, True),
    "supervisor.tls.cert.file": (STR, True),
    "supervisor.tls.key.file": (STR, True),
    "supervisor.logviewer.max.bytes": (INT, False),
    "supervisor.venv.pip.args": ("list[str]", False),
    "supervisor.venv.build.timeout.secs": (FLOAT, False),
    "supervisor.venv.retry.secs": (FLOAT, False),
    "supervisor.venv.cache.max": (INT, False),
    "supervisor.venv.max.mb": (INT, False),
    "worker.log.max.bytes": (INT, False),
    "worker.log.backups": (INT, False),
    "supervisor.state.dir": (STR, True),
    "worker.heartbeat.frequency.secs": (FLOAT, False),
    "task.heartbeat.frequency.secs": (FLOAT, False),
    "worker.metrics.frequency.secs": (FLOAT, False),
    "task.refresh.poll.secs": (FLOAT, False),
    "worker.receive.high.watermark": (FLOAT, False),
    "worker.receive.low.watermark": (FLOAT, False),
    "worker.pin.cpu": (BOOL, False),
    "zmq.hwm": (INT, False),
    "zmq.linger.millis": (INT, False),
    "zmq.bind.host": (STR, True),
    "zmq.curve": (BOOL, False),
    "zmq.max.message.bytes": (INT, False),
    "worker.transfer.held.max.bytes": (INT, False),
    "topology.name": (STR, True),
    "topology.workers": (INT, False),
    "topology.acker.executors": (INT, True),
    "topology.message.timeout.secs": (FLOAT, False),
    "topology.enable.message.timeouts": (BOOL, False),
    "topology.max.spout.pending": (INT, True),
    "topology.tick.tuple.freq.secs": (FLOAT, True),
    "topology.executor.receive.buffer.size": (INT, False),
    "topology.disable.loadaware.messaging": (BOOL, False),
    "topology.worker.executor.threads": (INT, False),
    "topology.transfer.buffer.size": (INT, False),
    "topology.producer.batch.size": (INT, False),
    "topology.batch.flush.interval.millis": (FLOAT, False),
    "topology.spout.batch.size": (INT, False),
    "topology.sleep.spout.wait.strategy.time.ms": (FLOAT, False),
    "topology.debug": (BOOL, False),
    "topology.max.error.report.per.interval": (INT, False),
    "topology.error.throttle.interval.secs": (FLOAT, False),
    "topology.errors.kept": (INT, False),
    "topology.serializers": ("dict", False),
    "topology.testing.always.try.serialize": (BOOL, False),
    "topology.metrics.consumer.register": ("list[dict]", False),
    "topology.builtin.metrics.bucket.size.secs": (FLOAT, False),
    "topology.worker.hook.start.timeout.secs": (FLOAT, False),
    "topology.worker.hook.shutdown.timeout.secs": (FLOAT, False),
    "topology.environment": ("dict", False),
    "topology.python.requirements": (STR, True),
}

# Allowed ranges of numeric keys: (lowest, highest, whether the lowest itself is allowed).
# Every number must also be finite. A list of ints (ports) is checked element by element.
_DAY = 86400.0
_PORT = (1, 65535, True)
SECS: Bounds = (0.0, _DAY, False)          # a positive period or timeout, at most a day
COUNT: Bounds = (1, 10**9, True)
RANGES: dict[str, Bounds] = {
    "zookeeper.port": _PORT,
    "zookeeper.session.timeout.ms": (100, 3_600_000, True),
    "zookeeper.connection.timeout.ms": (100, 3_600_000, True),
    "nimbus.port": (0, 65535, True),
    "nimbus.monitor.freq.secs": SECS,
    "nimbus.task.timeout.secs": SECS,
    "nimbus.supervisor.timeout.secs": SECS,
    "nimbus.task.launch.secs": SECS,
    "nimbus.code.max.upload.bytes": (1, 2**40, True),
    "nimbus.leader.poll.secs": SECS,
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
    "supervisor.monitor.frequency.secs": SECS,
    "supervisor.heartbeat.frequency.secs": SECS,
    "supervisor.worker.start.timeout.secs": SECS,
    "supervisor.worker.timeout.secs": SECS,
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
    "worker.metrics.frequency.secs": SECS,
    "supervisor.metrics.port": (0, 65535, True),
    "worker.heartbeat.frequency.secs": SECS,
    "task.heartbeat.frequency.secs": SECS,
    "task.refresh.poll.secs": SECS,
    "worker.receive.high.watermark": (0.0, 1.0, False),
    "worker.receive.low.watermark": (0.0, 1.0, True),
    "worker.transfer.held.max.bytes": (1, 2**40, True),
    "zmq.hwm": (0, 10**6, True),
    "zmq.linger.millis": (0, 3_600_000, True),
    "zmq.max.message.bytes": (1024, 2**31, True),
    "topology.workers": (1, 10_000, True),
    "topology.acker.executors": (0, 10_000, True),
    "topology.message.timeout.secs": SECS,
    "topology.max.spout.pending": COUNT,
    "topology.tick.tuple.freq.secs": SECS,
    "topology.executor.receive.buffer.size": COUNT,
    "topology.worker.executor.threads": (0, 10_000, True),
    "topology.transfer.buffer.size": COUNT,
    "topology.producer.batch.size": (1, 10**6, True),
    "topology.batch.flush.interval.millis": (0.0, 60_000.0, True),
    "topology.spout.batch.size": (1, 10**6, True),
    "topology.sleep.spout.wait.strategy.time.ms": (0.0, 60_000.0, True),
    "topology.max.error.report.per.interval": (0, 10**6, True),
    "topology.error.throttle.interval.secs": SECS,
    "topology.errors.kept": (0, 10_000, True),
    "topology.builtin.metrics.bucket.size.secs": SECS,
    "topology.worker.hook.start.timeout.secs": (0.0, 600.0, False),
    "topology.worker.hook.shutdown.timeout.secs": (0.0, 10.0, False),
}

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


# Keys with a check of their own, beyond kind and range.
CHECKS: dict[str, Callable[[str, Any], None]] = {
    "topology.metrics.consumer.register": _check_consumers,
    "topology.environment": _check_environment,
}

register_keys({key: KeySpec(kind, nullable, RANGES.get(key), CHECKS.get(key))
               for key, (kind, nullable) in SCHEMA.items()}, __name__)


def _type_ok(kind: str, value: Any) -> bool:
    if kind == INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == FLOAT:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == STR:
        return isinstance(value, str)
    if kind == BOOL:
        return isinstance(value, bool)
    if kind == "dict":
        return isinstance(value, dict)
    if kind.startswith("enum:"):
        return value in kind[5:].split(",")
    if kind.startswith("list["):
        inner = kind[5:-1]
        return isinstance(value, list) and all(_type_ok(inner, v) for v in value)
    raise AssertionError(kind)


def key_spec(key: str) -> KeySpec | None:
    """How ``key`` is checked; None for a key squall does not know (its feature's module,
    by FEATURE_KEYS, is imported first)."""
    spec = KEYS.peek(key)
    if spec is None:
        prefix = max((p for p in FEATURE_KEYS if key.startswith(p)), key=len, default=None)
        if prefix is not None:
            KEYS.load(FEATURE_KEYS[prefix])
            spec = KEYS.peek(key)
    return spec


def known_keys() -> list[str]:
    """Every key squall knows, the features' included."""
    return KEYS.names()


def validate_key(key: str, value: Any) -> None:
    """Raise ConfigError naming ``key`` when it is unknown or its value is ill-typed."""
    if not isinstance(key, str):
        raise ConfigError(f"config key {key!r} is not a string")
    spec = key_spec(key)
    if spec is None:
        if key.startswith(OWN_PREFIXES):
            guess = suggestion(key)
            raise ConfigError(f"unknown config key {key!r}" + (f": did you mean {guess!r}?" if guess else ""))
        guess = suggestion(key) if _looks_own(key) else None
        if guess is not None:
            raise ConfigError(f"unknown config key {key!r}: did you mean {guess!r}? (a key of your own must "
                              "not look like one of squall's: name it differently)")
        return  # user configuration
    if value is None:
        if spec.nullable:
            return
        raise ConfigError(f"config key {key!r} may not be null")
    if not _type_ok(spec.kind, value):
        raise ConfigError(f"config key {key!r} expects {spec.kind}, got {type(value).__name__} {value!r}")
    if spec.check is not None:
        spec.check(key, value)
    bounds = spec.bounds
    for number in value if isinstance(value, list) else [value]:
        if isinstance(number, float) and not math.isfinite(number):
            raise ConfigError(f"config key {key!r} must be a finite number, got {number!r}")
        if bounds is not None and not _in_range(number, bounds):
            low, high, low_ok = bounds
            raise ConfigError(f"config key {key!r} must be {'at least' if low_ok else 'more than'} {low} "
                              f"and at most {high}, got {number!r}")


def suggestion(key: str) -> str | None:
    """The known key ``key`` is most likely a misspelling of, if any."""
    found = difflib.get_close_matches(key, known_keys(), n=1, cutoff=0.85)
    return found[0] if found else None


def _looks_own(key: str) -> bool:
    """Does ``key`` start with a misspelling of one of squall's namespaces (``topolgy.``)?"""
    head = key.split(".", 1)[0] + "."
    return bool(difflib.get_close_matches(head, OWN_PREFIXES, n=1, cutoff=0.8))


def _in_range(number: float, bounds: Bounds) -> bool:
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
