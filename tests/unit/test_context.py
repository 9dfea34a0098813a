"""A worker's resources (squall.context.Resources): one dict its tasks and hooks share."""
import threading
import time

import pytest

from squall import context as ctx
from squall.context import ResourceError, Resources


def test_setdefault_makes_a_resource_once_however_many_tasks_ask_at_once():
    res = Resources()
    made = []

    def make():
        made.append(1)
        time.sleep(0.05)  # long enough for every other thread to arrive meanwhile
        return object()

    got = []
    threads = [threading.Thread(target=lambda: got.append(res.setdefault("pool", make))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    assert len(made) == 1 and len(got) == 8 and len({id(g) for g in got}) == 1
    assert res.get("pool") is got[0] and res.get("other", 7) == 7 and res.keys() == ["pool"]


def test_keys_are_checked_and_bounded(monkeypatch):
    res = Resources()
    for bad in (None, "", 3):
        with pytest.raises(ResourceError, match="a resource key must be a non-empty string"):
            res.set(bad, 1)
    monkeypatch.setattr(ctx, "MAX_RESOURCES", 2)
    res.set("a", 1)
    res.setdefault("b", lambda: 2)
    res.set("a", 3)  # replacing a key is not growing
    with pytest.raises(ResourceError, match="resource 'c': a worker holds at most 2 resources"):
        res.set("c", 4)
    assert {k: res.get(k) for k in res.keys()} == {"a": 3, "b": 2}
