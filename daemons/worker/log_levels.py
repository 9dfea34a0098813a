"""Log levels an operator set for a while (``squall set-log-level``, Storm's set_log_level).

The names are Python ``logging`` loggers: what user code and libraries log through
(``logging.getLogger("myapp.bolts")``); ``ROOT`` is the root logger. A logger's own level is
remembered the first time it is changed and put back when its entry ends (its time ran out,
or it was reset), so a level never outlives its timeout. squall's own structured log lines
follow ``squall.log.level`` and are not changed here.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping

from squall.daemons.state.operator_requests import ROOT_LOGGER, Timed


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT_LOGGER else logging.getLogger(name)


class LogLevels:
    """The levels in force in this process and what they replaced."""

    def __init__(self) -> None:
        self._original: dict[str, int] = {}  # logger -> its own level before the first change
        self.in_force: dict[str, str] = {}

    def apply(self, wanted: Mapping[str, Timed], now: float) -> list[tuple[str, str]]:
        """Set every wanted level whose time has not run out and put back the others; the
        changes made, as (logger, level or "reset")."""
        changes = []
        live = {name: t.value for name, t in wanted.items() if t.until > now}
        for name, level in sorted(live.items()):
            if self.in_force.get(name) == level:
                continue
            logger = _logger(name)
            self._original.setdefault(name, logger.level)
            logger.setLevel(level)
            self.in_force[name] = level
            changes.append((name, level))
        for name in sorted(set(self.in_force) - set(live)):
            _logger(name).setLevel(self._original.pop(name))
            del self.in_force[name]
            changes.append((name, "reset"))
        return changes
