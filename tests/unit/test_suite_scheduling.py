"""How scripts/test.sh's test processes share the suite (tests/support/scheduling.py)."""
import pytest

from support.scheduling import SECONDS, SPARK, _tail_seconds, costs, scope_of, tail_begins


def order(nodeids: list[str]) -> list[str]:
    units: dict[str, int] = {}
    for nodeid in nodeids:
        units[scope_of(nodeid)] = units.get(scope_of(nodeid), 0) + 1
    cost = costs(units)
    return sorted(units, key=lambda unit: -cost[unit])


def test_the_spark_tier_is_one_unit_and_each_docs_page_one_of_its_own():
    assert scope_of("tests/spark/test_spark.py::test_a") == scope_of("tests/spark/test_spark_state.py::test_b") == SPARK
    pages = ["tests/cluster/test_docs.py::test_page_runs[README.md]",
             "tests/cluster/test_docs.py::test_page_runs[docs/tutorial.md]",
             "tests/spark/test_docs_spark.py::test_page_runs[docs/guide/backfill.md]"]
    assert [scope_of(p) for p in pages] == pages
    assert scope_of("tests/unit/test_config.py::TestX::test_y[1]") == "tests/unit/test_config.py"


def test_one_long_test_goes_before_a_file_of_many_short_ones():
    nodeids = [f"tests/unit/test_config.py::test_{i}" for i in range(500)]
    nodeids += [f"tests/cluster/test_rotating_log_capture.py::test_{i}" for i in range(9)]
    nodeids += ["tests/cluster/test_docker_compose.py::test_compose", "tests/spark/test_spark.py::test_a"]
    nodeids += [f"tests/cluster/test_docs.py::test_page_runs[p{i}]" for i in range(4)]
    assert order(nodeids) == [SPARK, "tests/cluster/test_docker_compose.py",
                              *[f"tests/cluster/test_docs.py::test_page_runs[p{i}]" for i in range(4)],
                              "tests/cluster/test_rotating_log_capture.py", "tests/unit/test_config.py"]


def test_a_long_docs_page_goes_before_the_other_pages_of_its_file():
    pages = [f"tests/spark/test_docs_spark.py::test_page_runs[{p}]" for p in ("docs/guide/backfill.md",
                                                                            "docs/internals.md")]
    cost = costs({page: 1 for page in pages})
    assert cost[pages[0]] > 2 * cost[pages[1]], cost


def test_a_page_listed_by_name_takes_its_figure_and_the_other_pages_share_the_files():
    pages = [f"tests/cluster/test_docs.py::test_page_runs[{p}]" for p in ("docs/tutorial.md", "a.md", "b.md")]
    cost = costs({page: 1 for page in pages})
    assert cost[pages[0]] == SECONDS[pages[0]]
    assert cost[pages[1]] == cost[pages[2]] == SECONDS["tests/cluster/test_docs.py"] / 2
    # The tutorial (75 s on CI) goes out before a file of five cluster tests (3 s each).
    assert cost[pages[0]] > costs({"tests/cluster/test_x.py": 5})["tests/cluster/test_x.py"]


def test_the_reruns_start_once_what_is_left_is_the_suites_tail():
    """The reruns start while short units are still queued, never while a long one is, and
    with a tail of 0 seconds (the side-by-side setting) only once the queue is empty."""
    nodeids = [f"tests/unit/test_config.py::test_{i}" for i in range(500)]  # 25 s
    nodeids += [f"tests/cluster/test_small_{j}.py::test_{i}" for j in range(20) for i in range(2)]  # 20 x 6 s
    nodeids += ["tests/cluster/test_docker_compose.py::test_compose"]
    units: dict[str, int] = {}
    for nodeid in nodeids:
        units[scope_of(nodeid)] = units.get(scope_of(nodeid), 0) + 1
    cost = costs(units)
    queue = order(nodeids)
    tail = 60.0  # whatever SQUALL_TEST_TAIL_SECONDS says in this run
    started = [tail_begins([cost[u] for u in queue[i:]], tail) for i in range(len(queue) + 1)]
    first = started.index(True)
    assert all(started[first:]) and 0 < first < len(queue)  # once begun, it stays begun
    assert "tests/cluster/test_docker_compose.py" not in queue[first:]
    assert sum(cost[u] for u in queue[first:]) <= tail < sum(cost[u] for u in queue[first - 1:])
    assert [tail_begins([cost[u] for u in queue[i:]], 0) for i in range(len(queue) + 1)] == \
        [False] * len(queue) + [True]


@pytest.mark.parametrize("text", ["soon", "-5", "nan", ""])
def test_a_tail_setting_that_is_not_seconds_is_refused_naming_it(text):
    with pytest.raises(ValueError, match="SQUALL_TEST_TAIL_SECONDS"):
        _tail_seconds(text)
