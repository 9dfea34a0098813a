"""What an operator asked of a running topology's workers, kept in ZooKeeper at
``/operations/<topology id>`` (nimbus writes it, the topology's workers read and watch it):
log levels for a while (Storm's ``set_log_level``), tuple sampling (the event logger behind
Storm's Debug button), profiles of one worker, and restarts of every worker (``kill_workers``).

Plain data and the checks of every field, shared by nimbus (a caller's request) and the
workers (what they read): a malformed node is refused whole with a ValueError naming the
field. Everything is bounded: the loggers, components and profiles a node may name, the
lengths of names, percentages, durations.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from squall.daemons.fields import as_dict, as_int, as_list, as_num, as_str, field_value

# Python's logging levels, with Storm's (log4j's) spellings accepted for them.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LEVEL_ALIASES = {"WARN": "WARNING", "FATAL": "CRITICAL", "TRACE": "DEBUG", "ALL": "DEBUG"}
ROOT_LOGGER = "ROOT"  # Storm's name of the root logger
MAX_LOGGERS = 32
MAX_NAME_CHARS = 200
_LOGGER = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*$")

ALL_COMPONENTS = "*"  # debug sampling of every component
MAX_DEBUG_COMPONENTS = 64
MAX_DURATION_SECS = 86_400.0  # a log level or a sampling lasts at most a day
DEFAULT_DURATION_SECS = 600.0  # ten minutes, when the caller gives none

PROFILE_KINDS = ("stack", "record", "heap")
MAX_PROFILES = 16  # requests kept in the node; older ones leave it
MAX_RECORD_SECS = 300.0  # a sampling profile or a heap trace lasts at most five minutes
DEFAULT_HEAP_SECS = 5.0  # how long a heap profile traces allocations
_PROFILE_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")


def normalize_level(level: Any) -> str:
    """A level name as Python's logging spells it; ValueError naming the accepted ones."""
    if not isinstance(level, str):
        raise ValueError(f"a log level must be a string, got {level!r}")
    name = LEVEL_ALIASES.get(level.strip().upper(), level.strip().upper())
    if name not in LOG_LEVELS:
        raise ValueError(f"unknown log level {level[:40]!r}: use one of {', '.join(LOG_LEVELS)} "
                         f"(or {', '.join(LEVEL_ALIASES)})")
    return name


def check_logger(name: Any) -> str:
    """A logger name: ``ROOT`` or dotted identifiers (``myapp.bolts``, ``kafka``)."""
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS or not (
            name == ROOT_LOGGER or _LOGGER.match(name)):
        raise ValueError(f"{str(name)[:MAX_NAME_CHARS]!r} is not a logger name (dotted identifiers, "
                         f"at most {MAX_NAME_CHARS} characters, or {ROOT_LOGGER})")
    return name


def check_component(name: Any) -> str:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS or any(ord(c) < 32 for c in name):
        raise ValueError(f"{str(name)[:MAX_NAME_CHARS]!r} is not a component id")
    return name


def check_percent(value: Any) -> float:
    """A sampling percentage: above 0, at most 100."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 100:
        raise ValueError(f"a sampling percentage must be a number above 0 and at most 100, got {value!r}")
    return float(value)


def check_duration(value: Any, what: str, maximum: float = MAX_DURATION_SECS) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= maximum:
        raise ValueError(f"{what} must be a number of seconds above 0 and at most {maximum:g}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class Timed:
    """A setting and when it ends (seconds since the epoch, nimbus's clock)."""

    value: Any  # a level name (log levels) or a percentage (debug)
    until: float


@dataclass(frozen=True)
class ProfileRequest:
    """Profile the worker on (node, port): ``kind`` stack, record (``secs`` of sampling) or
    heap (``secs`` of allocation tracing); ``at`` when nimbus took the request."""

    id: str
    node: str
    port: int
    kind: str
    secs: float
    at: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "port": self.port, "kind": self.kind, "secs": self.secs,
                "at": self.at}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ProfileRequest:
        ident = as_str(field_value(d, "id"), "profile id")
        if not _PROFILE_ID.match(ident):
            raise ValueError(f"profile id {ident[:80]!r} is not lower-case letters, digits and dashes")
        kind = as_str(field_value(d, "kind"), "profile kind")
        if kind not in PROFILE_KINDS:
            raise ValueError(f"profile kind must be one of {PROFILE_KINDS}, got {kind[:40]!r}")
        port = as_int(field_value(d, "port"), "profile port")
        if not 1 <= port <= 65535:
            raise ValueError(f"profile port {port} is out of range")
        secs = as_num(field_value(d, "secs"), "profile secs")
        if not 0 <= secs <= MAX_RECORD_SECS:
            raise ValueError(f"profile secs must be from 0 to {MAX_RECORD_SECS:g}, got {secs!r}")
        return cls(ident, check_component(field_value(d, "node")), port, kind, secs,
                   as_num(field_value(d, "at"), "profile at"))


def valid_profile_id(ident: str) -> bool:
    return bool(_PROFILE_ID.match(ident))


@dataclass(frozen=True)
class OperatorRequests:
    """Everything asked of one topology's workers (see the module's docstring)."""

    log_levels: dict[str, Timed] = field(default_factory=dict)
    debug: dict[str, Timed] = field(default_factory=dict)  # component (or ALL_COMPONENTS) -> percent
    profiles: tuple[ProfileRequest, ...] = ()
    restarts: int = 0  # kill-workers requests so far: a worker started before the last one restarts
    restart_at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"log_levels": {k: [t.value, t.until] for k, t in sorted(self.log_levels.items())},
                "debug": {k: [t.value, t.until] for k, t in sorted(self.debug.items())},
                "profiles": [p.to_dict() for p in self.profiles],
                "restarts": self.restarts, "restart_at": self.restart_at}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OperatorRequests:
        levels = as_dict(d.get("log_levels", {}), "log_levels")
        if len(levels) > MAX_LOGGERS:
            raise ValueError(f"log_levels names {len(levels)} loggers, more than {MAX_LOGGERS}")
        debug = as_dict(d.get("debug", {}), "debug")
        if len(debug) > MAX_DEBUG_COMPONENTS:
            raise ValueError(f"debug names {len(debug)} components, more than {MAX_DEBUG_COMPONENTS}")
        profiles = as_list(d.get("profiles", []), "profiles")
        if len(profiles) > MAX_PROFILES:
            raise ValueError(f"profiles holds {len(profiles)} requests, more than {MAX_PROFILES}")
        restarts = as_int(d.get("restarts", 0), "restarts")
        if restarts < 0:
            raise ValueError("restarts must not be negative")
        return cls(
            log_levels={check_logger(k): Timed(normalize_level(_pair(v, k)[0]), _pair(v, k)[1])
                        for k, v in levels.items()},
            debug={_debug_key(k): Timed(check_percent(_pair(v, k)[0]), _pair(v, k)[1]) for k, v in debug.items()},
            profiles=tuple(ProfileRequest.from_dict(as_dict(p, "profile")) for p in profiles),
            restarts=restarts, restart_at=as_num(d.get("restart_at", 0.0), "restart_at"))

    def pruned(self, now: float) -> OperatorRequests:
        """Without what ended before ``now``: log levels and sampling past their end, profile
        requests past their time and two minutes more."""
        return replace(self, log_levels={k: t for k, t in self.log_levels.items() if t.until > now},
                       debug={k: t for k, t in self.debug.items() if t.until > now},
                       profiles=tuple(p for p in self.profiles if p.at + p.secs + 120 > now))

    def sampling(self, component: str, now: float) -> float:
        """The percentage of ``component``'s emits to sample now (0: none)."""
        own = self.debug.get(component)
        if own is not None and own.until > now:
            return float(own.value)
        every = self.debug.get(ALL_COMPONENTS)
        return float(every.value) if every is not None and every.until > now else 0.0


def _debug_key(key: str) -> str:
    return key if key == ALL_COMPONENTS else check_component(key)


def _pair(value: Any, key: str) -> tuple[Any, float]:
    row = as_list(value, f"entry {key!r}")
    if len(row) != 2:
        raise ValueError(f"entry {key!r} must be [value, until]")
    return row[0], as_num(row[1], f"until of {key!r}")
