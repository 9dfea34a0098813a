"""The dev cluster's ZooKeeper: how often a dead one is restarted, and the bounds it runs with."""
from __future__ import annotations

from squall.cli import dev_zookeeper
from squall.cli.dev_zookeeper import RestartBudget
from squall.daemons.state import MAX_NODE_BYTES


def test_restarts_are_allowed_up_to_the_budget_within_the_window():
    budget = RestartBudget(max_restarts=3, window_secs=100)
    assert [budget.allow(t) for t in (0, 10, 20, 30)] == [True, True, True, False]
    assert budget.allow(101) is True  # the first restart left the window
    assert budget.allow(102) is False


def test_the_bounds_keep_what_clients_can_make_it_hold_under_its_heap():
    assert dev_zookeeper.MAX_REQUEST_BYTES > MAX_NODE_BYTES  # every node squall writes fits
    kept_requests = 500  # zookeeper.commitLogCount's floor: it keeps them with their data
    worst = (kept_requests + dev_zookeeper.OUTSTANDING_LIMIT + dev_zookeeper.MAX_CLIENT_CONNECTIONS) \
        * dev_zookeeper.MAX_REQUEST_BYTES
    assert worst < dev_zookeeper.HEAP_MB << 20
