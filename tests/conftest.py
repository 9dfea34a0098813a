"""What every tier shares: the command-line options, hypothesis without deadlines, a fresh
structlog set-up per test, and how the test processes share the suite (support/scheduling.py).

Servers live with the tiers that use them (tests/cluster, tests/spark and tests/ui import
their fixtures from support/servers.py); the unit tier starts none.
"""
from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from hypothesis import HealthCheck, settings

from support.scheduling import LongestFirst

# Speed lives in bench/, not in tests: hypothesis's per-example deadline (200 ms) and its check
# on slow data generation would turn a busy machine into a red run, so neither applies.
settings.register_profile("squall", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("squall")

# Tests send their children Ctrl-C (SIGINT) and expect them to end on it. A suite started as a
# background job (`cmd &`) inherits SIGINT ignored, and an ignored signal stays ignored across
# exec, so every child would shrug Ctrl-C off: give them the default back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TIERS = ("unit", "cluster", "spark", "ui")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--chaos-long", action="store_true", default=False,
                     help="run the long chaos suite (more ids, a 60 s ZooKeeper outage; several minutes)")
    parser.addoption("--state-chaos-long", action="store_true", default=False,
                     help="run the state chaos test with more events and kills (minutes)")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> LongestFirst | None:
    """``--dist loadfile`` (scripts/test.sh): whole files, the longest first (support/scheduling.py)."""
    return LongestFirst(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each test carries its tier's marker (the folder it is in), so ``-m "not ui"`` works."""
    here = Path(__file__).parent
    for item in items:
        parts = item.path.relative_to(here).parts if item.path.is_relative_to(here) else ()
        if parts and parts[0] in TIERS:
            item.add_marker(parts[0])


@pytest.fixture(autouse=True)
def _structlog_config_per_test() -> Iterator[None]:
    """Each test starts from the same logging set-up: a CLI run in-process (CliRunner)
    configures structlog for the whole process, e.g. with a WARNING filter that would hide
    later tests' info lines from ``capture_logs``."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)
