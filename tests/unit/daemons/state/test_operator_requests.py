"""Operator requests as ZooKeeper holds them: every field checked, everything bounded."""
from __future__ import annotations

import pytest

from squall.daemons.state.operator_requests import (
    ALL_COMPONENTS,
    MAX_LOGGERS,
    OperatorRequests,
    ProfileRequest,
    Timed,
    check_logger,
    check_percent,
    normalize_level,
)


def test_round_trip_and_what_sampling_applies_to_a_component():
    req = OperatorRequests(log_levels={"ROOT": Timed("DEBUG", 50.0)},
                           debug={"split": Timed(25.0, 40.0), ALL_COMPONENTS: Timed(5.0, 60.0)},
                           profiles=(ProfileRequest("stack-ab12", "s1", 6700, "stack", 0.0, 10.0),),
                           restarts=2, restart_at=9.0)
    assert OperatorRequests.from_dict(req.to_dict()) == req
    assert req.sampling("split", 30.0) == 25.0  # its own setting first
    assert req.sampling("count", 30.0) == 5.0   # then every component's
    assert req.sampling("split", 45.0) == 5.0   # its own ran out
    assert req.sampling("count", 61.0) == 0.0
    pruned = req.pruned(55.0)
    assert pruned.log_levels == {} and list(pruned.debug) == [ALL_COMPONENTS]
    assert pruned.profiles == req.profiles and pruned.restarts == 2


@pytest.mark.parametrize("level, expected", [("debug", "DEBUG"), ("WARN", "WARNING"), (" fatal ", "CRITICAL"),
                                             ("TRACE", "DEBUG")])
def test_levels_take_pythons_and_storms_names(level, expected):
    assert normalize_level(level) == expected


@pytest.mark.parametrize("check, value, message", [
    (normalize_level, "LOUD", "unknown log level 'LOUD'"),
    (normalize_level, 10, "must be a string"),
    (check_logger, "../etc", "is not a logger name"),
    (check_logger, "a" * 201, "is not a logger name"),
    (check_logger, "a..b", "is not a logger name"),
    (check_percent, 0, "above 0 and at most 100"),
    (check_percent, 100.5, "above 0 and at most 100"),
    (check_percent, True, "above 0 and at most 100"),
])
def test_bad_inputs_are_refused_naming_the_problem(check, value, message):
    with pytest.raises(ValueError, match=message):
        check(value)


@pytest.mark.parametrize("node, message", [
    ({"log_levels": {f"l{i}": ["INFO", 1.0] for i in range(MAX_LOGGERS + 1)}}, "33 loggers, more than 32"),
    ({"log_levels": {"ROOT": ["NOISY", 1.0]}}, "unknown log level"),
    ({"log_levels": {"ROOT": "INFO"}}, "must be a list"),
    ({"debug": {"split": [0, 1.0]}}, "above 0"),
    ({"profiles": [{"id": "../../x", "node": "s1", "port": 1, "kind": "stack", "secs": 0, "at": 1}]}, "profile id"),
    ({"profiles": [{"id": "a", "node": "s1", "port": 1, "kind": "core", "secs": 0, "at": 1}]}, "profile kind"),
    ({"profiles": [{"id": "a", "node": "s1", "port": 1, "kind": "record", "secs": 3600, "at": 1}]}, "secs"),
    ({"restarts": -1}, "negative"),
])
def test_a_malformed_node_is_refused_whole(node, message):
    with pytest.raises(ValueError, match=message):
        OperatorRequests.from_dict(node)
