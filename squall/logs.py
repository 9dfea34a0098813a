"""structlog set-up shared by the CLI, daemons and workers."""
from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Mapping

import structlog

# A user error's text (traceback or message) as logged and reported: one deep recursion must
# not make a log line, a ZooKeeper node or a status reply of megabytes.
MAX_ERROR_TEXT = 6000
_OWN = str(Path(__file__).resolve().parent) + "/"


def error_text(error: BaseException | str, limit: int = MAX_ERROR_TEXT) -> str:
    """An error as people read it: a traceback for an exception, else the text; at most
    ``limit`` characters, keeping the start and the end (where the exception is said)."""
    if isinstance(error, BaseException):
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN):
            tb = tb.tb_next  # start at the user's code, not at squall's call of it
        text = "".join(traceback.format_exception(type(error), error, tb)).rstrip()
    else:
        text = str(error)
    if len(text) <= limit:
        return text
    head, tail = limit // 4, limit - limit // 4
    return f"{text[:head]}\n... [{len(text) - head - tail} characters left out] ...\n{text[-tail:]}"


def last_line(text: str) -> str:
    """The line that says what went wrong: an exception's ``Type: message``."""
    return (text.strip().splitlines() or [""])[-1]


REPEAT_WINDOW_SECS = 10.0
_REPEAT_CAUSES = 1024  # causes remembered; the oldest is forgotten past this
_GUARDED = frozenset({"warning", "error", "critical"})


class RepeatGuard:
    """A structlog processor that keeps one cause from flooding a log: a warning or error
    repeated (the same level, message and text fields; numbers such as a txid or a count
    may differ) is written at most once per ``window`` seconds, and the next line of that
    cause carries ``repeated``: how many were held back since the last one."""

    def __init__(self, window: float = REPEAT_WINDOW_SECS, clock: Callable[[], float] = time.monotonic) -> None:
        self.window, self._clock = window, clock
        self._seen: OrderedDict[tuple[Any, ...], list[float]] = OrderedDict()  # cause -> [last line, held back]
        self._lock = threading.Lock()

    @staticmethod
    def cause(event: Mapping[str, Any]) -> tuple[Any, ...]:
        texts = tuple(sorted((k, v) for k, v in event.items() if isinstance(v, str) and k not in ("level", "event")))
        return event.get("level"), str(event.get("event")), texts

    def __call__(self, logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("level") not in _GUARDED:
            return event
        key, now = self.cause(event), self._clock()
        with self._lock:
            entry = self._seen.get(key)
            if entry is not None and now - entry[0] < self.window:
                entry[1] += 1
                raise structlog.DropEvent
            held = int(entry[1]) if entry is not None else 0
            self._seen[key] = [now, 0]
            self._seen.move_to_end(key)
            while len(self._seen) > _REPEAT_CAUSES:
                self._seen.popitem(last=False)
        if held:
            event["repeated"] = held
        return event


_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}


def configure(fmt: str = "console", level: str = "INFO", stream: Any = None, **context: Any) -> None:
    """Console (readable) or JSON lines on ``stream`` (stderr by default); ``context`` is
    bound to every line (e.g. daemon="supervisor"). Repeated warnings and errors are held
    back by a ``RepeatGuard``."""
    static = dict(context)

    def add_static(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        # Process-wide fields (daemon, ids) on every line, from every thread: contextvars
        # would not reach threads started before or outside the binding.
        for key, value in static.items():
            event.setdefault(key, value)
        return event

    processors: list[Any] = [
        add_static,
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        RepeatGuard(),
        structlog.processors.TimeStamper(fmt="iso" if fmt == "json" else "%Y-%m-%d %H:%M:%S", utc=fmt == "json"),
    ]
    if fmt == "json":
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        processors += [structlog.dev.ConsoleRenderer(colors=False)]
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level.upper(), logging.INFO)),
        # One write per line (message and newline together): a rotating file never splits one.
        logger_factory=structlog.WriteLoggerFactory(stream or sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()


def configure_from(conf: Mapping[str, Any], fmt: str | None = None, stream: Any = None, **context: Any) -> None:
    configure(fmt or conf.get("squall.log.format", "console"), conf.get("squall.log.level", "INFO"),
              stream, **context)
