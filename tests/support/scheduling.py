"""How `scripts/test.sh`'s test processes share the suite (pytest-xdist, ``--dist loadfile``).

xdist hands out whole files, by default those with the most tests first, so the files of one
long test (the Docker compose run, the chaos runs, the install) came last, and one process
ran the last of them alone while the other sat idle. Here the longest go first (longest
processing time first: the short files then fill the processes' ends); the Spark tier is
one unit (a process that runs a Spark test starts a SparkSession, a JVM, for the rest of
the run, and one is enough), and each docs page another.

``SECONDS`` is what a file (or one test of an ``EACH_TEST`` file) takes on CI, roughly: only
the order depends on it, never a result. A file missing from it is costed by its tier
(``PER_TEST``); an ``EACH_TEST`` file's figure is shared by its tests not listed by name.
Add a file (or a test of an ``EACH_TEST`` file) there when it takes half a minute or more.

Once what is left to hand out costs ``TAIL_SECONDS`` or less, ``scripts/test.sh`` starts its
reruns (``tail_begins``): the plain-Python rerun and the Debian run wait on local-mode deadlines
and a cluster test more than they compute (19 and 49 CPU-s for 15 and 45 s on two processes),
as do the suite's last cluster files, so they share the suite's last minute or so instead of
running after it. Started once the queue was empty (the suite's end, its last units being unit
files of a few seconds), they made the run's last ~65 s.
"""
from __future__ import annotations

import os
from collections import Counter, OrderedDict
from pathlib import Path

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

SPARK = "tests/spark"

# File (or the Spark tier) -> its seconds on CI (scripts/test.sh -q --durations, 2 cores).
SECONDS = {
    SPARK: 250,  # less its docs pages: they start Spark in processes of their own
    # The docs pages (EACH_TEST units): the long ones by name, from CI's durations; the file's
    # figure is what its other pages take together, shared equally. Costed at an equal share of
    # 200 s, the tutorial (75 s) went out among the 15 s cluster files and could end the run.
    "tests/cluster/test_docs.py::test_page_runs[docs/tutorial.md]": 75,
    "tests/cluster/test_docs.py::test_page_runs[README.md]": 36,
    "tests/cluster/test_docs.py::test_page_runs[docs/migrating-from-storm.md]": 26,
    "tests/cluster/test_docs.py::test_page_runs[docs/operations/cluster.md]": 26,
    "tests/cluster/test_docs.py": 120,
    "tests/cluster/cli/test_operate_cli.py": 155,
    "tests/cluster/test_docker_compose.py": 200,
    "tests/cluster/contrib/kafka/test_kafka_chaos.py": 140,
    "tests/cluster/test_install.py": 215,  # the wheel build (106 s) and three tests
    # A docs page of its own (an EACH_TEST unit): the backfill guide's two Spark runs took
    # 117 s, where an equal share of its file's seconds started it among the 40 s files, last.
    "tests/spark/test_docs_spark.py::test_page_runs[docs/guide/backfill.md]": 120,
    "tests/spark/test_docs_spark.py": 35,  # its other page (internals.md)
    # 30 s less than before: its `squall status` of a topology with no worker says --wait 0
    # instead of waiting out the 30 s status gives a young topology for its first rates.
    "tests/cluster/daemons/supervisor/test_topology_environments.py": 65,
    "tests/cluster/daemons/supervisor/test_supervisor.py": 90,
    "tests/cluster/faults/test_multi_host.py": 85,
    "tests/cluster/faults/test_chaos.py": 80,
    "tests/cluster/daemons/nimbus/test_nimbus.py": 80,
    "tests/ui/test_web_ui.py": 80,
    "tests/cluster/test_memory_bound.py": 60,
    "tests/cluster/cli/test_cluster_cli.py": 35,  # 60 s less: two such waits, on made-up beats
    # Files of several 10-40 s tests, costed per test (3 s) before: they went out among the
    # last units (the 2026-11-30 baseline's durations, less its load).
    "tests/cluster/daemons/supervisor/test_isolation.py": 65,
    "tests/cluster/daemons/nimbus/test_hostile_http.py": 35,
    "tests/cluster/daemons/nimbus/test_floods.py": 60,
    "tests/cluster/daemons/supervisor/test_state_ownership.py": 50,
    "tests/cluster/faults/test_zookeeper_hog.py": 45,
    "tests/cluster/daemons/nimbus/test_forged_reports.py": 40,
    # Files of one to four tests of half a minute each: costed per test (3 s) they went out
    # among the last units, where one can be the last to end.
    "tests/cluster/test_cluster_e2e.py": 60,
    "tests/cluster/faults/test_faults_cluster.py": 45,
    "tests/cluster/faults/test_zk_outage_worker_start.py": 31,
    "tests/cluster/faults/test_state_chaos.py": 31,
    "tests/cluster/daemons/supervisor/test_http_endpoints.py": 30,
    "tests/cluster/test_newcomer_cli.py": 30,
    "tests/cluster/daemons/nimbus/test_tls_rotation.py": 23,
    "tests/cluster/multilang/test_streamparse_projects.py": 25,
    "tests/cluster/state/test_rollback_loop.py": 25,
}
# A file scripts/test.sh names: made once what is left to hand out costs TAIL_SECONDS or less
# (the suite's last ~80 s on three processes: the short cluster files, then the unit tier's),
# so that the runs it holds back start in the suite's tail. SQUALL_TEST_TAIL_SECONDS sets
# another figure (0: once the last unit has gone out, as before; for a side-by-side run).
TAIL_ENV = "SQUALL_TEST_TAIL"


def _tail_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # NaN too
        raise ValueError(f"SQUALL_TEST_TAIL_SECONDS={text!r}: seconds, 0 or more")
    return seconds


TAIL_SECONDS = _tail_seconds(os.environ.get("SQUALL_TEST_TAIL_SECONDS", "240"))

# Seconds per test of a file not listed, by tier: unit tests take milliseconds, the others
# start servers and processes.
PER_TEST = {"unit": 0.05}
DEFAULT_PER_TEST = 3.0


# Files whose tests share nothing but the run's servers (no module-scoped fixture): each test
# is a unit of its own, costed at an equal share of the file's seconds.
EACH_TEST = {"tests/cluster/test_docs.py", "tests/spark/test_docs_spark.py"}


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to: its file, the Spark tier as a whole, or the test
    itself (``EACH_TEST``)."""
    path = nodeid.split("::", 1)[0]
    if path in EACH_TEST:
        return nodeid
    return SPARK if path.startswith(SPARK + "/") else path


def costs(units: dict[str, int]) -> dict[str, float]:
    """Unit -> its expected seconds, from its number of tests."""
    files = Counter(unit.split("::", 1)[0] for unit in units if unit not in SECONDS)  # shares of a file's figure
    out = {}
    for unit, tests in units.items():
        path = unit.split("::", 1)[0]
        if unit in SECONDS:
            out[unit] = SECONDS[unit]
        elif path in SECONDS:  # one test of an EACH_TEST file
            out[unit] = SECONDS[path] / files[path]
        else:
            parts = path.split("/")
            tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
            out[unit] = PER_TEST.get(tier, DEFAULT_PER_TEST) * tests
    return out


class LongestFirst(LoadFileScheduling):
    """``--dist loadfile`` with the Spark tier as one unit, the tests of ``EACH_TEST`` files as
    units of their own, and the costliest units first."""

    _cost: dict[str, float] | None = None

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        if self._cost is None:  # the queue is complete before the first unit goes out
            self._cost = costs({unit: len(tests) for unit, tests in self.workqueue.items()})
            self.workqueue = OrderedDict(sorted(self.workqueue.items(), key=lambda unit: -self._cost[unit[0]]))
        super()._assign_work_unit(node)
        if tail_begins([self._cost[unit] for unit in self.workqueue]):
            mark_tail()


def tail_begins(queued: list[float], tail_seconds: float = TAIL_SECONDS) -> bool:
    """Whether the units still to hand out (their costs) are the suite's tail: ``tail_seconds``
    or less in all (an empty queue always is)."""
    return not queued or sum(queued) <= tail_seconds


def mark_tail() -> None:
    """Says (``TAIL_ENV``'s file) that the suite's tail has begun."""
    marker = os.environ.get(TAIL_ENV)
    if marker:
        Path(marker).touch()
