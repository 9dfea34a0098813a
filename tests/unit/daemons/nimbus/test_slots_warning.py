"""Asking for more workers than there are free slots is said, with what happens instead."""
from __future__ import annotations

from squall.daemons.nimbus.scheduler import slots_warning


def test_enough_slots_say_nothing() -> None:
    assert slots_warning(3, 10, 3) is None
    assert slots_warning(20, 4, 6) is None  # four executors need only four workers


def test_too_few_slots_say_how_many_run() -> None:
    assert slots_warning(20, 30, 6) == ("20 workers requested but only 6 free slots: it runs on 6 workers "
                                        "until more slots are free")
    assert slots_warning(2, 30, 1) == ("2 workers requested but only 1 free slot: it runs on 1 worker "
                                       "until more slots are free")
    assert "no free slots" in slots_warning(2, 30, 0)
