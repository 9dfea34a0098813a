"""Every grouping's choice of target tasks."""
import collections

import pytest

from squall.grouping import CustomStreamGrouping, Grouping, fields_task_index, make_chooser, stable_hash
from squall.tuple import Fields

F = Fields(["word", "n"])
TASKS = [4, 5, 6, 7]


def chooser(kind, fields=None, local=frozenset(), tasks=TASKS, custom=None, source_task=1):
    return make_chooser(Grouping(kind, fields, custom), F, tasks, local, source_task)


def test_fields_same_key_same_task_and_spreads():
    choose = chooser("fields", ["word"])
    seen = {}
    for i in range(2000):
        word = f"w{i % 97}"
        (task,) = choose([word, i])
        assert seen.setdefault(word, task) == task
    assert set(seen.values()) == set(TASKS)
    assert all(seen[w] == TASKS[fields_task_index([w], 4)] for w in seen)


def test_fields_grouping_hashes_are_pinned():
    """Where keys go is a contract: running clusters and Spark backfills must agree on it
    (the same in another process, whatever its hash seed: tests/cluster/test_grouping_across_processes.py)."""
    # pinned values: a change here changes where keys go in running clusters and on Spark
    assert stable_hash(["apple"]) == stable_hash(("apple",)) == 4061005286  # CRC-32 of the msgpack array
    assert [fields_task_index([w], 4) for w in ["apple", "moon", "cow"]] == [2, 3, 0]


def test_fields_keys_of_every_value_type_a_tuple_may_hold():
    """Keys past msgpack's own types hash too (a big int, a decimal, a time, a set), and a
    set hashes by its elements whatever order this process iterates them in; what msgpack
    packed before hashes as before, so a key keeps its task across versions."""
    import datetime
    import decimal
    import zlib

    import msgpack

    for key in (["word"], [7, -2 ** 63], [(1, "a")], [[1, {"k": b"x"}]]):
        assert stable_hash(key) == zlib.crc32(msgpack.packb(key, use_bin_type=True))
    stable_hash([2 ** 70, decimal.Decimal("1.10"), datetime.date(2026, 1, 1)])
    big = {f"k{i}" for i in range(50)}
    reordered = set(sorted(big, reverse=True))
    assert stable_hash([big]) == stable_hash([reordered])
    one = chooser("fields", ["word"])
    assert one([2 ** 70, 0]) == one([2 ** 70, 0]) and one([{1, 2}, 0]) == one([{2, 1}, 0])


def test_fields_multi_field_and_unhashable_keys():
    choose = chooser("fields", ["word", "n"])
    assert choose(["a", 1]) == choose(["a", 1])
    one = chooser("fields", ["word"])
    assert one([["un", "hashable"], 0]) == one([["un", "hashable"], 0])


def test_shuffle_spreads_evenly():
    choose = chooser("shuffle")
    counts = collections.Counter(choose(["x", i])[0] for i in range(4000))
    assert set(counts) == set(TASKS)
    assert max(counts.values()) - min(counts.values()) <= 1


def test_none_spreads_like_shuffle():
    choose = chooser("none")
    counts = collections.Counter(choose(["x", i])[0] for i in range(400))
    assert set(counts) == set(TASKS)


def test_all_and_global():
    assert chooser("all")(["x", 1]) == tuple(TASKS)
    assert chooser("global", tasks=[9, 3, 5])(["x", 1]) == (3,)


def test_direct_has_no_chooser():
    assert chooser("direct") is None


def test_local_or_shuffle_prefers_local_tasks():
    choose = chooser("local_or_shuffle", local=frozenset({5, 7, 99}))
    assert {choose(["x", i])[0] for i in range(100)} == {5, 7}
    remote = chooser("local_or_shuffle", local=frozenset())
    assert {remote(["x", i])[0] for i in range(100)} == set(TASKS)


def test_partial_key_uses_two_tasks_per_key_and_balances():
    choose = chooser("partial_key", ["word"])
    hot = collections.Counter(choose(["hot", i])[0] for i in range(1000))
    assert len(hot) == 2, "a key goes to one of exactly two candidate tasks"
    assert abs(hot.most_common()[0][1] - hot.most_common()[1][1]) <= 1


def test_custom_grouping():
    class Mod(CustomStreamGrouping):
        def choose_tasks(self, task_id, values):
            return [self.target_tasks[values[1] % len(self.target_tasks)]]

    choose = chooser("custom", custom=Mod())
    assert [choose(["x", i])[0] for i in range(5)] == [4, 5, 6, 7, 4]


def test_unknown_grouping_is_an_error():
    with pytest.raises(ValueError, match="unknown grouping"):
        chooser("bogus")
