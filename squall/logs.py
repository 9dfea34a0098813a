"""structlog set-up shared by the CLI, daemons and workers."""
from __future__ import annotations

import logging
import sys
import traceback
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


_LEVELS = {"DEBUG": logging.DEBUG, "INFO": logging.INFO, "WARNING": logging.WARNING, "ERROR": logging.ERROR}


def configure(fmt: str = "console", level: str = "INFO", stream: Any = None, **context: Any) -> None:
    """Console (readable) or JSON lines on ``stream`` (stderr by default); ``context`` is
    bound to every line (e.g. daemon="supervisor")."""
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
