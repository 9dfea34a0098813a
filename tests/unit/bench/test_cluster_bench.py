"""The cluster benches run the daemons' background work at a user's periods, and read their
rates from reports that stay fresh enough for their windows."""
from cluster_bench import USER_PERIODS, user_periods
from squall.config import load_defaults
from squall.testing.cluster import FAST

# What the benches read their rates from: a worker's executor stats, its supervisor's report.
REPORTS = ("task.heartbeat.frequency.secs", "supervisor.heartbeat.frequency.secs")


def test_background_periods_are_squalls_defaults_and_slower_than_the_test_harness():
    defaults = load_defaults()
    periods = user_periods()
    assert set(periods) == set(USER_PERIODS)
    for key, value in periods.items():
        assert value == defaults[key]
        assert value > FAST[key], key  # otherwise the bench would run the harness's period anyway


def test_the_reports_rates_are_read_from_stay_at_a_second():
    for key in REPORTS:
        assert key not in USER_PERIODS
        assert FAST[key] <= 1
