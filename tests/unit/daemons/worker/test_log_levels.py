"""Log levels set for a while on a worker's Python loggers, and put back."""
from __future__ import annotations

import logging

from squall.daemons.state.operator_requests import Timed
from squall.daemons.worker.log_levels import LogLevels


def test_levels_apply_until_their_end_then_go_back_to_what_they_were():
    mine = logging.getLogger("test.log_levels.mine")
    mine.setLevel(logging.ERROR)
    root_before = logging.getLogger().level
    levels = LogLevels()
    try:
        wanted = {"test.log_levels.mine": Timed("DEBUG", 10.0), "ROOT": Timed("INFO", 20.0)}
        assert levels.apply(wanted, 5.0) == [("ROOT", "INFO"), ("test.log_levels.mine", "DEBUG")]
        assert mine.level == logging.DEBUG and logging.getLogger().level == logging.INFO
        assert levels.apply(wanted, 6.0) == []  # nothing changes twice
        assert levels.apply(wanted, 10.0) == [("test.log_levels.mine", "reset")]
        assert mine.level == logging.ERROR
        assert levels.apply({}, 11.0) == [("ROOT", "reset")]  # the entry was removed
        assert logging.getLogger().level == root_before
    finally:
        mine.setLevel(logging.NOTSET)
        logging.getLogger().setLevel(root_before)
