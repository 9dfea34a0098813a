"""What goes into a Kafka record and what a refusal is, plain code: key, value and header
conversions for the KafkaBolt, the headers a dead letter carries, and which client errors
mean "the broker will never take this record" (as opposed to "not now")."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# A dead letter keeps the record's own headers and adds these (a spout's failed stream and a
# KafkaBolt's refusals alike), so a dead-letter topic tells what happened without a mapping.
REASON_HEADER = "squall.reason"   # why the record is a dead letter
ORIGIN_HEADER = "squall.origin"   # where it was read: topic-partition@offset

# Errors about the record itself, named as Kafka names them: sending it again gives the
# same answer. Anything else (a broker away, a timeout, a leader moving) is "not now".
REFUSALS = frozenset({
    "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE", "RECORD_LIST_TOO_LARGE", "INVALID_RECORD", "CORRUPT_MESSAGE",
    "INVALID_TOPIC_EXCEPTION", "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED",
    "INVALID_REQUIRED_ACKS", "POLICY_VIOLATION", "UNSUPPORTED_FOR_MESSAGE_FORMAT", "INVALID_RECORD_BATCH",
    "_INVALID_ARG", "_UNKNOWN_TOPIC",
})


def to_bytes(value: Any) -> bytes | None:
    """A record key or value: bytes as they are, text as UTF-8, None as none; other types
    are the mapper's job (a TypeError fails the tuple)."""
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"a record key or value must be bytes or str, not {type(value).__name__}")


def to_headers(value: Any) -> list[tuple[str, bytes | None]] | None:
    """Record headers from a list of (name, value) pairs or a mapping (values bytes, str or
    None); None or empty for none. Anything else is a TypeError naming what was wrong."""
    if not value:
        return None
    pairs = value.items() if isinstance(value, Mapping) else value
    out = []
    for pair in pairs:
        try:
            name, v = pair
        except (TypeError, ValueError):
            raise TypeError(f"a record header must be a (name, value) pair, not {pair!r:.60}") from None
        if not isinstance(name, str):
            raise TypeError(f"a record header name must be str, not {type(name).__name__}")
        out.append((name, to_bytes(v)))
    return out


def refusal(err: Any) -> str | None:
    """The name of a client error that refuses the record for good, else None."""
    name = getattr(err, "name", None)
    name = name() if callable(name) else None
    return name if name in REFUSALS else None


def dead_letter_headers(original: Any, reason: str, origin: str) -> list[tuple[str, bytes | None]]:
    """A dead letter's headers: the record's own, then the reason and origin."""
    kept = list(original) if original else []
    return [*kept, (REASON_HEADER, reason.encode("utf-8")), (ORIGIN_HEADER, origin.encode("utf-8"))]
